//go:build amd64 && !noasm

#include "textflag.h"
#include "zmm_amd64.h"

// Integer decode kernels of the four-row layouts (Q4_1x4, Q4_0x4) for
// CPUs with AVX-512 VNNI. The float kernels (qdotQ41X) spend most of a
// block on turning nibbles into float32 values (shifts, table lookups,
// FMAs per row): from L2 they stream about 34 GB/s on one thread, below
// the memory's rate. Here the nibbles stay bytes and VPDPBUSD multiplies
// 64 of them with 64 bytes of x at once — but x is not rounded to 8 bits
// as llama.cpp's integer dots do (that moves logprobs by tenths): limbsPrep
// writes each 32-value block of x as v·s, v an integer of 23 bits
// (|v| ≤ 127·2^16, s = the block's largest |x| / (127·2^16)), split into
// three signed bytes A, B, C with v = A·2^16 + B·2^8 + C — x first scaled
// exactly by the power of two that brings its largest |x| to [1, 2) and
// the results scaled back, so tiny and huge activations keep their
// precision (s never underflows, 1/s never overflows). The kernel sums
// l·A, shifts by 8, adds l·B, shifts, adds l·C, exact in int32 (|sum| ≤
// 8·15·(127·2^16 + 128·257) < 2^31), then converts once per block. What
// is rounded is x, to 2^-24 of its block's largest value — the rounding
// float32 itself gives that largest value — so the products stay within
// float32 summation noise of the exact ones (TestQuantDecodeExact).
//
// Q4_1's value l·d + m: the dot is d·s·Σ l·v + m·Σx per block (Σx, the
// float sum of the block's x, from the prep); Q4_0's (l − 8)·d:
// d·s·Σ l·v − 8·d·Σx.

// VPSHUFB control transposing the 4×4 bytes of each 128-bit lane (also
// read by the AVX2 integer kernels, quantavx2_amd64.s): the
// layout's dword i holds byte i of the four rows (row j in byte j); after
// it, dword j of lane c holds row j's bytes 4c..4c+3, which VPDPBUSD sums
// as one row.
DATA ·vnniTr+0(SB)/8, $0x0d0905010c080400
DATA ·vnniTr+8(SB)/8, $0x0f0b07030e0a0602
DATA ·vnniTr+16(SB)/8, $0x0d0905010c080400
DATA ·vnniTr+24(SB)/8, $0x0f0b07030e0a0602
DATA ·vnniTr+32(SB)/8, $0x0d0905010c080400
DATA ·vnniTr+40(SB)/8, $0x0f0b07030e0a0602
DATA ·vnniTr+48(SB)/8, $0x0d0905010c080400
DATA ·vnniTr+56(SB)/8, $0x0f0b07030e0a0602
GLOBL ·vnniTr(SB), RODATA|NOPTR, $64

// VPERMPS indices: the rows' d (even lanes of the widened scale pairs)
// for each dword j of each lane, then the rows' m·Σx (odd lanes); the
// AVX2 integer kernels read 32 bytes of each.
DATA ·vnniD+0(SB)/4, $0
DATA ·vnniD+4(SB)/4, $2
DATA ·vnniD+8(SB)/4, $4
DATA ·vnniD+12(SB)/4, $6
DATA ·vnniD+16(SB)/4, $0
DATA ·vnniD+20(SB)/4, $2
DATA ·vnniD+24(SB)/4, $4
DATA ·vnniD+28(SB)/4, $6
DATA ·vnniD+32(SB)/4, $0
DATA ·vnniD+36(SB)/4, $2
DATA ·vnniD+40(SB)/4, $4
DATA ·vnniD+44(SB)/4, $6
DATA ·vnniD+48(SB)/4, $0
DATA ·vnniD+52(SB)/4, $2
DATA ·vnniD+56(SB)/4, $4
DATA ·vnniD+60(SB)/4, $6
DATA ·vnniD+64(SB)/4, $1
DATA ·vnniD+68(SB)/4, $3
DATA ·vnniD+72(SB)/4, $5
DATA ·vnniD+76(SB)/4, $7
DATA ·vnniD+80(SB)/4, $1
DATA ·vnniD+84(SB)/4, $3
DATA ·vnniD+88(SB)/4, $5
DATA ·vnniD+92(SB)/4, $7
GLOBL ·vnniD(SB), RODATA|NOPTR, $96

// VPERMD indices replicating dword c of 16 bytes over lane c: the limbs
// of x's values 4c..4c+3 for each row's dword of the transposed nibbles.
DATA vnniRep<>+0(SB)/8, $0
DATA vnniRep<>+8(SB)/8, $0
DATA vnniRep<>+16(SB)/8, $0x0000000100000001
DATA vnniRep<>+24(SB)/8, $0x0000000100000001
DATA vnniRep<>+32(SB)/8, $0x0000000200000002
DATA vnniRep<>+40(SB)/8, $0x0000000200000002
DATA vnniRep<>+48(SB)/8, $0x0000000300000003
DATA vnniRep<>+56(SB)/8, $0x0000000300000003
GLOBL vnniRep<>(SB), RODATA|NOPTR, $64

// The horizontal max or sum (op: VMAXPS or VADDPS) of z into every lane
// of x (y, x: z's lower halves; zt, yt, xt: scratch).
#define HREDUCE(op, z, y, x, zt, yt, xt) \
	VEXTRACTF64X4 $1, z, yt \
	op            yt, y, y \
	VEXTRACTF128  $1, y, xt \
	op            xt, x, x \
	VPERMILPS     $0x4e, x, xt \
	op            xt, x, x \
	VPERMILPS     $0xb1, x, xt \
	op            xt, x, x

// The limbs of the 16 integers in z (clobbers z; Z7, Z8 scratch; Z30 =
// 128s, Z29 = 255s, Z26 = vnniRep) stored at a(DI), b(DI) and c(DI), each
// replicated per lane.
#define LIMBS(z, a, b, c) \
	VPADDD    Z30, z, Z7 \
	VPANDD    Z29, Z7, Z7 \
	VPSUBD    Z30, Z7, Z7 \
	VPSUBD    Z7, z, z \
	VPSRAD    $8, z, z \
	VPMOVDB   Z7, X7 \
	VPERMD    Z7, Z26, Z7 \
	VMOVDQU32 Z7, c(DI) \
	VPADDD    Z30, z, Z8 \
	VPANDD    Z29, Z8, Z8 \
	VPSUBD    Z30, Z8, Z8 \
	VPSUBD    Z8, z, z \
	VPSRAD    $8, z, z \
	VPMOVDB   Z8, X8 \
	VPERMD    Z8, Z26, Z8 \
	VMOVDQU32 Z8, b(DI) \
	VPMOVDB   z, X7 \
	VPERMD    Z7, Z26, Z7 \
	VMOVDQU32 Z7, a(DI)

// The arguments and constants of the integer kernels: limbs R14, scales
// R11, w R8, groups R12, out R13, pf R10, the results' scale 2^e R15 (at
// sc + 8·nb floats); Z27 = 0x0f bytes, Z26 = vnniTr, Z25 = the d indices.
#define VSETUP \
	MOVQ         limbs+8(FP), R14 \
	MOVQ         sc+16(FP), R11 \
	MOVQ         w+24(FP), R8 \
	MOVQ         groups+32(FP), R12 \
	MOVQ         out+40(FP), R13 \
	MOVQ         pf+48(FP), R10 \
	MOVQ         nb+0(FP), AX \
	SHLQ         $5, AX \
	LEAQ         (R11)(AX*1), R15 \
	MOVL         $0x0f0f0f0f, AX \
	VPBROADCASTD AX, Z27 \
	VMOVDQU32    ·vnniTr(SB), Z26 \
	VMOVDQU32    ·vnniD(SB), Z25

// Σ l·v of the values in Z16 (0..15 of the block) and Z17 (16..31)
// against the limbs at SI, per (lane c, dword j = row j), as float32 into
// Z19: l·A, shifted by 8, plus l·B, shifted, plus l·C.
#define VSUMS \
	VPXORD      Z19, Z19, Z19 \
	VPDPBUSD    (SI), Z16, Z19 \
	VPDPBUSD    64(SI), Z17, Z19 \
	VPSLLD      $8, Z19, Z19 \
	VPDPBUSD    128(SI), Z16, Z19 \
	VPDPBUSD    192(SI), Z17, Z19 \
	VPSLLD      $8, Z19, Z19 \
	VPDPBUSD    256(SI), Z16, Z19 \
	VPDPBUSD    320(SI), Z17, Z19 \
	VCVTDQ2PS   Z19, Z19

// Σ l·v of the four rows' block at R8 against the limbs at SI, per
// (lane c, dword j = row j), as float32 into Z19.
#define VBLOCK \
	VMOVDQU32   (R8), Z24 \
	VPSHUFB     Z26, Z24, Z24 \
	VPSRLW      $4, Z24, Z17 \
	VPANDD      Z27, Z24, Z16 \
	VPANDD      Z27, Z17, Z17 \
	VSUMS

// Q4_1: the block's scale pairs (d, m) times (s, Σx): Z0 += d·s·Σ l·v per
// lane, Y1 += m·Σx in the odd lanes.
#define V41SCALE \
	VCVTPH2PS   64(R8), Y18 \
	VMULPS      (DI), Y18, Y18 \
	VPERMPS     Z18, Z25, Z22 \
	VADDPS      Y18, Y1, Y1 \
	VFMADD231PS Z22, Z19, Z0

// Q4_0: the block's d times s per lane into Z0, X1 += d·Σx.
#define V40SCALE \
	VCVTPH2PS        64(R8), X18 \
	VFMADD231PS.BCST 4(DI), X18, X1 \
	VMULPS.BCST      (DI), X18, X18 \
	VSHUFF32X4       $0, Z18, Z18, Z22 \
	VFMADD231PS      Z22, Z19, Z0

// Q4_1's sum of Z0 over its lanes plus the odd lanes of Y1, to X0.
#define V41END \
	VMOVDQU32      ·vnniD+64(SB), Y2 \
	VPERMPS        Y1, Y2, Y2 \
	VEXTRACTF64X4  $1, Z0, Y3 \
	VADDPS         Y3, Y0, Y0 \
	VEXTRACTF128   $1, Y0, X3 \
	VADDPS         X3, X0, X0 \
	VADDPS         X2, X0, X0 \
	VMULPS.BCST    (R15), X0, X0

// The sum of Z0 over its lanes plus off·X1 (off: the float32 bits of
// the values' offset, −8 for Q4_0, −16 for Q5_0), to X0.
#define VOFFEND(off) \
	MOVL           off, AX \
	VPBROADCASTD   AX, X2 \
	VEXTRACTF64X4  $1, Z0, Y3 \
	VADDPS         Y3, Y0, Y0 \
	VEXTRACTF128   $1, Y0, X3 \
	VADDPS         X3, X0, X0 \
	VFMADD231PS    X2, X1, X0 \
	VMULPS.BCST    (R15), X0, X0

// func limbsPrep(nb int, x *float32, limbs *byte, sc *float32, corr int)
//
// For each block b of 32 values of x·2^-e (e: the exponent of x's largest
// |x|): at limbs + 384·b (corr ≠ 0: 512·b) the six 64-byte vectors A, B,
// C of values 0..15 (offsets 0, 128, 256) and 16..31 (64, 192, 320); with
// corr ≠ 0, Q8_0's offset corrections after them: at 384 −128·ΣA and at
// 448 −(32768·ΣB + 128·ΣC) per dword, the sums over the eight values
// whose limbs that dword's lane holds (qdotQ80V); at sc + 8·b the floats
// s, Σx four times over; at sc + 8·nb, 2^e.
TEXT ·limbsPrep(SB), NOSPLIT, $0-40
	MOVQ         nb+0(FP), CX
	TESTQ        CX, CX               // no blocks: nothing to write (the max loop below runs at least once)
	JZ           done
	MOVQ         x+8(FP), SI
	MOVQ         limbs+16(FP), DI
	MOVQ         sc+24(FP), DX
	MOVQ         corr+32(FP), R9
	MOVL         $0x80808080, AX
	VPBROADCASTD AX, Z25
	MOVL         $0x7fffffff, AX
	VPBROADCASTD AX, Z31
	MOVL         $128, AX
	VPBROADCASTD AX, Z30
	MOVL         $255, AX
	VPBROADCASTD AX, Z29
	MOVL         $0x4afe0000, AX      // 127·2^16
	VMOVD        AX, X28
	MOVL         $0x00800000, AX      // 2^-126: an all-zero block keeps finite scales
	VMOVD        AX, X27
	VMOVDQU32    vnniRep<>(SB), Z26

	// e = floor(log2) of x's largest |x|: the blocks are computed on
	// x·2^-e (exact), the kernels scale their results by 2^e (at sc + 8·nb),
	// so no block's s is subnormal unless the block is 2^-100 of x's largest.
	MOVQ          CX, BX
	MOVQ          SI, R8
	VXORPS        Z9, Z9, Z9
mx:
	VANDPS        (R8), Z31, Z2
	VMAXPS        Z2, Z9, Z9
	VANDPS        64(R8), Z31, Z2
	VMAXPS        Z2, Z9, Z9
	ADDQ          $128, R8
	DECQ          BX
	JNZ           mx
	HREDUCE(VMAXPS, Z9, Y9, X9, Z10, Y10, X10)
	VMAXSS        X27, X9, X9
	VGETEXPSS     X9, X9, X5
	VXORPS        X6, X6, X6
	VSUBSS        X5, X6, X6
	VBROADCASTSS  X6, Z6              // −e
	MOVL          $0x3f800000, AX
	VMOVD         AX, X7
	VSCALEFSS     X5, X7, X7          // 2^e
	MOVQ          CX, BX
	SHLQ          $5, BX
	VMOVSS        X7, (DX)(BX*1)

lp:
	TESTQ         CX, CX
	JZ            done
	VMOVUPS       (SI), Z0
	VMOVUPS       64(SI), Z1
	VSCALEFPS     Z6, Z0, Z0
	VSCALEFPS     Z6, Z1, Z1
	VADDPS        Z1, Z0, Z9
	HREDUCE(VADDPS, Z9, Y9, X9, Z10, Y10, X10)
	VANDPS        Z31, Z0, Z2
	VANDPS        Z31, Z1, Z3
	VMAXPS        Z3, Z2, Z2
	HREDUCE(VMAXPS, Z2, Y2, X2, Z3, Y3, X3)
	VMAXSS        X27, X2, X2
	VDIVSS        X2, X28, X3         // 1/s
	VDIVSS        X28, X2, X4         // s
	VBROADCASTSS  X3, Z3
	VMULPS        Z3, Z0, Z0
	VMULPS        Z3, Z1, Z1
	VCVTPS2DQ     Z0, Z0
	VCVTPS2DQ     Z1, Z1
	LIMBS(Z0, 0, 128, 256)
	LIMBS(Z1, 64, 192, 320)
	TESTQ         R9, R9
	JZ            nocorr
	VPXORD        Z11, Z11, Z11       // 128·ΣA, 128·ΣB, 128·ΣC per dword
	VPDPBUSD      0(DI), Z25, Z11
	VPDPBUSD      64(DI), Z25, Z11
	VPXORD        Z12, Z12, Z12
	VPDPBUSD      128(DI), Z25, Z12
	VPDPBUSD      192(DI), Z25, Z12
	VPXORD        Z13, Z13, Z13
	VPDPBUSD      256(DI), Z25, Z13
	VPDPBUSD      320(DI), Z25, Z13
	VPSLLD        $8, Z12, Z12
	VPADDD        Z13, Z12, Z12
	VPXORD        Z14, Z14, Z14
	VPSUBD        Z11, Z14, Z11
	VPSUBD        Z12, Z14, Z12
	VMOVDQU32     Z11, 384(DI)
	VMOVDQU32     Z12, 448(DI)
	ADDQ          $128, DI
nocorr:
	VUNPCKLPS     X9, X4, X4          // s, Σx
	VMOVLHPS      X4, X4, X4
	VINSERTF128   $1, X4, Y4, Y4
	VMOVUPS       Y4, (DX)
	ADDQ          $128, SI
	ADDQ          $384, DI
	ADDQ          $32, DX
	DECQ          CX
	JMP           lp

done:
	VZEROUPPER
	RET

// func qdotQ41V(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)
TEXT ·qdotQ41V(SB), NOSPLIT, $0-56
	VSETUP
	LIMBRUN(v41g, v41, v41done, VBLOCK, V41SCALE, V41END, 80, 384)

// func qdotQ40V(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)
TEXT ·qdotQ40V(SB), NOSPLIT, $0-56
	VSETUP
	LIMBRUN(v40g, v40, v40done, VBLOCK, V40SCALE, VOFFEND($0xc1000000), 72, 384)

// Q5_0x4 and Q5_1x4 (repack.go): the nibbles already in the order
// VPDPBUSD sums (no transposing shuffle), the fifth bits as two byte
// masks (low nibbles', high nibbles') that add 16 to the bytes they
// select. Values 0..31 keep the sums exact in int32: |Σ l·v| ≤
// 8·31·(127·2^16 + 128·257) < 2^31 (as the nibbles' bound above).
// Q5_0's value (l − 16)·d: d·s·Σ l·v − 16·d·Σx; Q5_1's l·d + m as
// Q4_1's. A block is 88 or 96 bytes, 1.4 cache lines: its second line's
// prefetch here (LIMBRUN's, the first's).
#define V5BLOCK \
	PREFETCHT0  64(R8)(R10*1) \
	NIBS5(0) \
	VSUMS

// The values of a block (a sub-block) in the layouts without the
// transposing shuffle, as unsigned bytes in Z16 (values 0..15 of each
// row) and Z17 (16..31), from R8 + off (Z27 = 0x0f bytes; NIBS5: Z23 =
// 0x10 bytes, the fifth bits' masks after the nibbles; SIXBITS: Q6_Kx4's,
// the high bits after them, Z21, Z20 = v6Left, v6Right, Z23 = 0x30 bytes,
// Z2 scratch). Z24: scratch.
#define NIBS(off) \
	VMOVDQU32   off(R8), Z24 \
	VPSRLW      $4, Z24, Z17 \
	VPANDD      Z27, Z24, Z16 \
	VPANDD      Z27, Z17, Z17

#define NIBS5(off) \
	NIBS(off) \
	KMOVQ       off+64(R8), K1 \
	KMOVQ       off+72(R8), K2 \
	VPADDB      Z23, Z16, K1, Z16 \
	VPADDB      Z23, Z17, K2, Z17

#define SIXBITS(off) \
	VBROADCASTI64X4  off+64(R8), Z18 \
	VPSLLVW          Z21, Z18, Z16 \
	VPSRLVW          Z20, Z18, Z17 \
	VPANDD           Z23, Z16, Z16 \
	VPANDD           Z23, Z17, Z17 \
	VMOVDQU32        off(R8), Z24 \
	VPANDD           Z27, Z24, Z2 \
	VPSRLW           $4, Z24, Z24 \
	VPANDD           Z27, Z24, Z24 \
	VPORD            Z2, Z16, Z16 \
	VPORD            Z24, Z17, Z17

// Q5_0: the block's d times s per lane into Z0, X1 += d·Σx.
#define V50SCALE \
	VCVTPH2PS        80(R8), X18 \
	VFMADD231PS.BCST 4(DI), X18, X1 \
	VMULPS.BCST      (DI), X18, X18 \
	VSHUFF32X4       $0, Z18, Z18, Z22 \
	VFMADD231PS      Z22, Z19, Z0

// Q5_1: as V41SCALE, the scale pairs at 80.
#define V51SCALE \
	VCVTPH2PS   80(R8), Y18 \
	VMULPS      (DI), Y18, Y18 \
	VPERMPS     Z18, Z25, Z22 \
	VADDPS      Y18, Y1, Y1 \
	VFMADD231PS Z22, Z19, Z0

// Z23 = 16 in every byte (the fifth bit).
#define V5SETUP \
	VSETUP \
	MOVL         $0x10101010, AX \
	VPBROADCASTD AX, Z23

// func qdotQ50V(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)
TEXT ·qdotQ50V(SB), NOSPLIT, $0-56
	V5SETUP
	LIMBRUN(v50g, v50, v50done, V5BLOCK, V50SCALE, VOFFEND($0xc1800000), 88, 384)

// func qdotQ51V(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)
TEXT ·qdotQ51V(SB), NOSPLIT, $0-56
	V5SETUP
	LIMBRUN(v51g, v51, v51done, V5BLOCK, V51SCALE, V41END, 96, 384)

// Q4_Kx4 (repack.go, q4kx4): per super-block, the four rows' 6-bit
// scales and mins of the eight sub-blocks widened at once (V4KSCALES:
// Z5, Z6 = d·scale, Z7, Z8 = dmin·min, lane 4k+j = row j's of sub-block
// k, k < 4 then k ≥ 4), then each sub-block as Q4_0x4's block without
// the transposing shuffle (its nibbles are in VPDPBUSD's order): Z0 +=
// d·scale·s·Σ l·v, X1 += dmin·min·Σx. The value d·scale·l − dmin·min:
// the end subtracts X1 (VOFFEND with −1).

// VPSRLVD counts for the scales' high bits: lane q, 2q (also read by the
// AVX2 kernels of the layout, 32 bytes at a time).
DATA ·vnniK2+0(SB)/8, $0x0000000200000000
DATA ·vnniK2+8(SB)/8, $0x0000000600000004
DATA ·vnniK2+16(SB)/8, $0x0000000a00000008
DATA ·vnniK2+24(SB)/8, $0x0000000e0000000c
DATA ·vnniK2+32(SB)/8, $0x0000001200000010
DATA ·vnniK2+40(SB)/8, $0x0000001600000014
DATA ·vnniK2+48(SB)/8, $0x0000001a00000018
DATA ·vnniK2+56(SB)/8, $0x0000001e0000001c
GLOBL ·vnniK2(SB), RODATA|NOPTR, $64

// VPERMPS indices: the rows' dmin (odd lanes of the widened d, dmin
// pairs) for each dword j of each lane (vnniD's first 16: their d).
DATA vnniDmin<>+0(SB)/8, $0x0000000300000001
DATA vnniDmin<>+8(SB)/8, $0x0000000700000005
DATA vnniDmin<>+16(SB)/8, $0x0000000300000001
DATA vnniDmin<>+24(SB)/8, $0x0000000700000005
DATA vnniDmin<>+32(SB)/8, $0x0000000300000001
DATA vnniDmin<>+40(SB)/8, $0x0000000700000005
DATA vnniDmin<>+48(SB)/8, $0x0000000300000001
DATA vnniDmin<>+56(SB)/8, $0x0000000700000005
GLOBL vnniDmin<>(SB), RODATA|NOPTR, $64

// The sub-blocks' six-bit values of a half (lo: the widened low-bit
// bytes, hi: the high bits' dword at R8 + off) into z, as int32:
// lo's bits (lo >> sh) & 15 or-ed with the high bits << 4 (Z20 = 3s,
// Z21 = vnniK2, Z9 scratch).
#define K6BITS(lo, sh, off, z) \
	VPBROADCASTD off(R8), Z9 \
	VPSRLVD      Z21, Z9, Z9 \
	VPANDD       Z20, Z9, Z9 \
	VPSLLD       $4, Z9, Z9 \
	VPSRLD       sh, lo, z \
	VPANDD       Z27, z, z \
	VPORD        Z9, z, z

// The scales at R8 + at (Q4_Kx4: 512, Q5_Kx4: 640).
#define V4KSCALES(at) \
	PREFETCHT0   at(R8)(R10*1) \
	VPMOVZXBD    at(R8), Z2 \
	VPMOVZXBD    at+16(R8), Z3 \
	K6BITS(Z2, $0, at+32, Z5) \
	K6BITS(Z3, $0, at+36, Z6) \
	K6BITS(Z2, $4, at+40, Z7) \
	K6BITS(Z3, $4, at+44, Z8) \
	VCVTDQ2PS    Z5, Z5 \
	VCVTDQ2PS    Z6, Z6 \
	VCVTDQ2PS    Z7, Z7 \
	VCVTDQ2PS    Z8, Z8 \
	VCVTPH2PS    at+48(R8), Y9 \
	VPERMPS      Z9, Z25, Z10 \
	VPERMPS      Z9, Z29, Z11 \
	VMULPS       Z10, Z5, Z5 \
	VMULPS       Z10, Z6, Z6 \
	VMULPS       Z11, Z7, Z7 \
	VMULPS       Z11, Z8, Z8

// Sub-block at R8 + off, its scales chunk c (selector sel = c·0x55) of
// zs and zm; the limbs at SI, s and Σx at DI (both advanced).
#define V4KSUB(off, c, sel, zs, zm) \
	PREFETCHT0       off(R8)(R10*1) \
	NIBS(off) \
	VKSUM(c, sel, zs, zm)

// Q5_Kx4's sub-block: Q4_Kx4's with the fifth bits (V5BLOCK's masks)
// after the nibbles.
#define V5KSUB(off, c, sel, zs, zm) \
	PREFETCHT0       off(R8)(R10*1) \
	PREFETCHT0       off+64(R8)(R10*1) \
	NIBS5(off) \
	VKSUM(c, sel, zs, zm)

// A K-quant sub-block's values in Z16, Z17: Σ l·v, scaled into Z0, and
// its min's part into X1.
#define VKSUM(c, sel, zs, zm) \
	VSUMS \
	VSHUFF32X4       sel, zs, zs, Z22 \
	VMULPS.BCST      (DI), Z22, Z22 \
	VFMADD231PS      Z22, Z19, Z0 \
	VEXTRACTF32X4    c, zm, X18 \
	VFMADD231PS.BCST 4(DI), X18, X1 \
	ADDQ             $384, SI \
	ADDQ             $32, DI

// A super-block of Q4_Kx4.
#define V4KSB \
	V4KSCALES(512) \
	V4KSUB(0, $0, $0x00, Z5, Z7) \
	V4KSUB(64, $1, $0x55, Z5, Z7) \
	V4KSUB(128, $2, $0xaa, Z5, Z7) \
	V4KSUB(192, $3, $0xff, Z5, Z7) \
	V4KSUB(256, $0, $0x00, Z6, Z8) \
	V4KSUB(320, $1, $0x55, Z6, Z8) \
	V4KSUB(384, $2, $0xaa, Z6, Z8) \
	V4KSUB(448, $3, $0xff, Z6, Z8)

// A super-block of Q5_Kx4.
#define V5KSB \
	V4KSCALES(640) \
	V5KSUB(0, $0, $0x00, Z5, Z7) \
	V5KSUB(80, $1, $0x55, Z5, Z7) \
	V5KSUB(160, $2, $0xaa, Z5, Z7) \
	V5KSUB(240, $3, $0xff, Z5, Z7) \
	V5KSUB(320, $0, $0x00, Z6, Z8) \
	V5KSUB(400, $1, $0x55, Z6, Z8) \
	V5KSUB(480, $2, $0xaa, Z6, Z8) \
	V5KSUB(560, $3, $0xff, Z6, Z8)

// func qdotQ4KV(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)
// nb: 32-value blocks (eight a super-block).
TEXT ·qdotQ4KV(SB), NOSPLIT, $0-56
	VSETUP
	MOVL         $3, AX
	VPBROADCASTD AX, Z20
	VMOVDQU32    ·vnniK2(SB), Z21
	VMOVDQU32    vnniDmin<>(SB), Z29
	KLIMBRUN(k4g, k4, k4done, V4KSB, $576, VOFFEND($0xbf800000))

// func qdotQ5KV(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)
// nb: 32-value blocks (eight a super-block).
TEXT ·qdotQ5KV(SB), NOSPLIT, $0-56
	VSETUP
	MOVL         $3, AX
	VPBROADCASTD AX, Z20
	VMOVDQU32    ·vnniK2(SB), Z21
	VMOVDQU32    vnniDmin<>(SB), Z29
	MOVL         $0x10101010, AX
	VPBROADCASTD AX, Z23
	KLIMBRUN(k5g, k5, k5done, V5KSB, $704, VOFFEND($0xbf800000))

// Q6_Kx4 (repack.go, q6kx4): per super-block the four rows' int8 scales
// of the sixteen 16-value groups times their d (V6KSCALES: Z5..Z8, lane
// 4g+j = row j's of group g, four groups a vector); per sub-block the
// six-bit values q (0..63, the value plus 32) of its two groups as two
// vectors (low four bits from the nibbles, high two from the 32 bytes
// after them, shifted in place per half by a word shift), each group's
// Σ q·v its own chain (a group's scale is its own; |Σ| ≤ 4·63·(127·2^16
// + 128·257) < 2^31 for four values a dword), Z0 += d·scale·s·Σ q·v, X1 +=
// d·scale·Σx of the group (the prep's half sums, q6vPrep); the end
// subtracts 32·X1.

// VPSLLVW / VPSRLVW counts: the low (high) nibbles' high bits, 4 (0) in
// the words of bytes 0..31, 2 (2) in those of bytes 32..63.
DATA v6Left<>+0(SB)/8, $0x0004000400040004
DATA v6Left<>+8(SB)/8, $0x0004000400040004
DATA v6Left<>+16(SB)/8, $0x0004000400040004
DATA v6Left<>+24(SB)/8, $0x0004000400040004
DATA v6Left<>+32(SB)/8, $0x0002000200020002
DATA v6Left<>+40(SB)/8, $0x0002000200020002
DATA v6Left<>+48(SB)/8, $0x0002000200020002
DATA v6Left<>+56(SB)/8, $0x0002000200020002
GLOBL v6Left<>(SB), RODATA|NOPTR, $64
DATA v6Right<>+0(SB)/8, $0
DATA v6Right<>+8(SB)/8, $0
DATA v6Right<>+16(SB)/8, $0
DATA v6Right<>+24(SB)/8, $0
DATA v6Right<>+32(SB)/8, $0x0002000200020002
DATA v6Right<>+40(SB)/8, $0x0002000200020002
DATA v6Right<>+48(SB)/8, $0x0002000200020002
DATA v6Right<>+56(SB)/8, $0x0002000200020002
GLOBL v6Right<>(SB), RODATA|NOPTR, $64

// The groups' scales times d, as float32 (Z9 scratch).
#define V6KSCALES \
	PREFETCHT0       768(R8)(R10*1) \
	VCVTPH2PS        832(R8), X9 \
	VSHUFF32X4       $0, Z9, Z9, Z9 \
	VPMOVSXBD        768(R8), Z5 \
	VPMOVSXBD        784(R8), Z6 \
	VPMOVSXBD        800(R8), Z7 \
	VPMOVSXBD        816(R8), Z8 \
	VCVTDQ2PS        Z5, Z5 \
	VCVTDQ2PS        Z6, Z6 \
	VCVTDQ2PS        Z7, Z7 \
	VCVTDQ2PS        Z8, Z8 \
	VMULPS           Z9, Z5, Z5 \
	VMULPS           Z9, Z6, Z6 \
	VMULPS           Z9, Z7, Z7 \
	VMULPS           Z9, Z8, Z8

// Σ q·v of the values in z against the limbs at SI + off (A; B and C
// 128 and 256 after), as float32 into acc.
#define V6CHAIN(z, off, acc) \
	VPXORD      acc, acc, acc \
	VPDPBUSD    off(SI), z, acc \
	VPSLLD      $8, acc, acc \
	VPDPBUSD    off+128(SI), z, acc \
	VPSLLD      $8, acc, acc \
	VPDPBUSD    off+256(SI), z, acc \
	VCVTDQ2PS   acc, acc

// Group scale chunk c (selector sel) of zs times s into Z0 with acc, and
// into X1 times the group's Σx at DI + sx.
#define V6SCALE(c, sel, zs, acc, sx) \
	VSHUFF32X4       sel, zs, zs, Z22 \
	VMULPS.BCST      (DI), Z22, Z22 \
	VFMADD231PS      Z22, acc, Z0 \
	VEXTRACTF32X4    c, zs, X18 \
	VFMADD231PS.BCST sx(DI), X18, X1

// Sub-block at R8 + off, its groups' scales chunks clo, chi of zs.
#define V6KSUB(off, zs, clo, sello, chi, selhi) \
	PREFETCHT0       off(R8)(R10*1) \
	PREFETCHT0       off+64(R8)(R10*1) \
	SIXBITS(off) \
	V6CHAIN(Z16, 0, Z19) \
	V6CHAIN(Z17, 64, Z3) \
	V6SCALE(clo, sello, zs, Z19, 4) \
	V6SCALE(chi, selhi, zs, Z3, 8) \
	ADDQ             $384, SI \
	ADDQ             $32, DI

// A super-block of Q6_Kx4.
#define V6KSB \
	V6KSCALES \
	V6KSUB(0, Z5, $0, $0x00, $1, $0x55) \
	V6KSUB(96, Z5, $2, $0xaa, $3, $0xff) \
	V6KSUB(192, Z6, $0, $0x00, $1, $0x55) \
	V6KSUB(288, Z6, $2, $0xaa, $3, $0xff) \
	V6KSUB(384, Z7, $0, $0x00, $1, $0x55) \
	V6KSUB(480, Z7, $2, $0xaa, $3, $0xff) \
	V6KSUB(576, Z8, $0, $0x00, $1, $0x55) \
	V6KSUB(672, Z8, $2, $0xaa, $3, $0xff)

// func qdotQ6KV(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)
// nb: 32-value blocks (eight a super-block); sc as q6vPrep writes it.
TEXT ·qdotQ6KV(SB), NOSPLIT, $0-56
	VSETUP
	MOVL         $0x30303030, AX
	VPBROADCASTD AX, Z23
	VMOVDQU32    v6Left<>(SB), Z21
	VMOVDQU32    v6Right<>(SB), Z20
	KLIMBRUN(k6g, k6, k6done, V6KSB, $840, VOFFEND($0xc2000000))

// Q8_0x4 (repack.go: the values as unsigned bytes u = q + 128, each
// row's four consecutive values in one dword, the layout VPDPBUSD sums as
// it is). The 23-bit integers v of x times 8-bit values do not fit int32
// over a block, so the sum is taken in two parts, each exact in int32:
// H = 256·Σ q·A + Σ u·B (|H| < 2^26) and L = Σ u·C − 128·ΣC − 32768·ΣB
// (|L| < 2^26), so that 256·H + L = Σ q·v (Σ u·A − 128·ΣA = Σ q·A, and
// likewise for B and C). The offset's terms are the prep's (limbsPrep with
// corr): H starts at −128·ΣA before its shift, L at −128·ΣC − 32768·ΣB; a
// block costs six VPDPBUSD and no rearranging. H and L are converted once
// per block and joined by one FMA: H's rounding is at most 2^-24 of
// 256·Σ|q·A| + Σ|u·B|, in units of v 2^-24·Σ|q·v| and a few units more
// (float32 summation noise); L's is 2^-24 of 2^26, four units of v.

// Σ q·v of the four rows' block at R8 against the limbs at SI, per (lane
// c, dword j = row j), as float32 into Z20 (Z28 = 256.0); a block is more
// than two cache lines: the second line's prefetch here (LIMBRUN's, the
// first's).
#define V80BLOCK \
	PREFETCHT0  64(R8)(R10*1) \
	VMOVDQU32   (R8), Z16 \
	VMOVDQU32   64(R8), Z17 \
	VMOVDQU32   384(SI), Z19 \
	VMOVDQU32   448(SI), Z20 \
	VPDPBUSD    (SI), Z16, Z19 \
	VPDPBUSD    64(SI), Z17, Z19 \
	VPDPBUSD    256(SI), Z16, Z20 \
	VPDPBUSD    320(SI), Z17, Z20 \
	VPSLLD      $8, Z19, Z19 \
	VPDPBUSD    128(SI), Z16, Z19 \
	VPDPBUSD    192(SI), Z17, Z19 \
	VCVTDQ2PS   Z19, Z19 \
	VCVTDQ2PS   Z20, Z20 \
	VFMADD231PS Z28, Z19, Z20

// Z0 += the rows' d times s per lane times the block's sums.
#define V80SCALE \
	VCVTPH2PS   128(R8), X18 \
	VMULPS.BCST (DI), X18, X18 \
	VSHUFF32X4  $0, Z18, Z18, Z22 \
	VFMADD231PS Z22, Z20, Z0

// The sum of Z0 over its lanes, to X0.
#define V80END \
	VEXTRACTF64X4  $1, Z0, Y3 \
	VADDPS         Y3, Y0, Y0 \
	VEXTRACTF128   $1, Y0, X3 \
	VADDPS         X3, X0, X0 \
	VMULPS.BCST    (R15), X0, X0

// func qdotQ80V(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)
// limbs as limbsPrep writes them with corr.
TEXT ·qdotQ80V(SB), NOSPLIT, $0-56
	VSETUP
	MOVL         $0x43800000, AX      // 256.0
	VPBROADCASTD AX, Z28
	LIMBRUN(v80g, v80, v80done, V80BLOCK, V80SCALE, V80END, 136, 512)

// VPERMD indices gathering row j's dwords j, 4+j, 8+j, 12+j (j = 0..3).
DATA dq80Idx<>+0(SB)/4, $0
DATA dq80Idx<>+4(SB)/4, $4
DATA dq80Idx<>+8(SB)/4, $8
DATA dq80Idx<>+12(SB)/4, $12
DATA dq80Idx<>+16(SB)/4, $0
DATA dq80Idx<>+20(SB)/4, $0
DATA dq80Idx<>+24(SB)/4, $0
DATA dq80Idx<>+28(SB)/4, $0
DATA dq80Idx<>+32(SB)/4, $0
DATA dq80Idx<>+36(SB)/4, $0
DATA dq80Idx<>+40(SB)/4, $0
DATA dq80Idx<>+44(SB)/4, $0
DATA dq80Idx<>+48(SB)/4, $0
DATA dq80Idx<>+52(SB)/4, $0
DATA dq80Idx<>+56(SB)/4, $0
DATA dq80Idx<>+60(SB)/4, $0
DATA dq80Idx<>+64(SB)/4, $1
DATA dq80Idx<>+68(SB)/4, $5
DATA dq80Idx<>+72(SB)/4, $9
DATA dq80Idx<>+76(SB)/4, $13
DATA dq80Idx<>+80(SB)/4, $0
DATA dq80Idx<>+84(SB)/4, $0
DATA dq80Idx<>+88(SB)/4, $0
DATA dq80Idx<>+92(SB)/4, $0
DATA dq80Idx<>+96(SB)/4, $0
DATA dq80Idx<>+100(SB)/4, $0
DATA dq80Idx<>+104(SB)/4, $0
DATA dq80Idx<>+108(SB)/4, $0
DATA dq80Idx<>+112(SB)/4, $0
DATA dq80Idx<>+116(SB)/4, $0
DATA dq80Idx<>+120(SB)/4, $0
DATA dq80Idx<>+124(SB)/4, $0
DATA dq80Idx<>+128(SB)/4, $2
DATA dq80Idx<>+132(SB)/4, $6
DATA dq80Idx<>+136(SB)/4, $10
DATA dq80Idx<>+140(SB)/4, $14
DATA dq80Idx<>+144(SB)/4, $0
DATA dq80Idx<>+148(SB)/4, $0
DATA dq80Idx<>+152(SB)/4, $0
DATA dq80Idx<>+156(SB)/4, $0
DATA dq80Idx<>+160(SB)/4, $0
DATA dq80Idx<>+164(SB)/4, $0
DATA dq80Idx<>+168(SB)/4, $0
DATA dq80Idx<>+172(SB)/4, $0
DATA dq80Idx<>+176(SB)/4, $0
DATA dq80Idx<>+180(SB)/4, $0
DATA dq80Idx<>+184(SB)/4, $0
DATA dq80Idx<>+188(SB)/4, $0
DATA dq80Idx<>+192(SB)/4, $3
DATA dq80Idx<>+196(SB)/4, $7
DATA dq80Idx<>+200(SB)/4, $11
DATA dq80Idx<>+204(SB)/4, $15
DATA dq80Idx<>+208(SB)/4, $0
DATA dq80Idx<>+212(SB)/4, $0
DATA dq80Idx<>+216(SB)/4, $0
DATA dq80Idx<>+220(SB)/4, $0
DATA dq80Idx<>+224(SB)/4, $0
DATA dq80Idx<>+228(SB)/4, $0
DATA dq80Idx<>+232(SB)/4, $0
DATA dq80Idx<>+236(SB)/4, $0
DATA dq80Idx<>+240(SB)/4, $0
DATA dq80Idx<>+244(SB)/4, $0
DATA dq80Idx<>+248(SB)/4, $0
DATA dq80Idx<>+252(SB)/4, $0
GLOBL dq80Idx<>(SB), RODATA|NOPTR, $256

// Row j of the block in Z16 (values 0..15) and Z17 (16..31) with its d
// (f16 at doff(R8)), by the VPERMD indices idx, stored at lo and hi.
#define DQ80ROW(idx, doff, lo, hi) \
	MOVWLZX          doff(R8), AX \
	VBROADCASTSS     (R15)(AX*4), Z19 \
	VPERMD           Z16, idx, Z18 \
	VPMOVSXBD        X18, Z18 \
	VCVTDQ2PS        Z18, Z18 \
	VMULPS           Z19, Z18, Z18 \
	VMOVUPS          Z18, lo \
	VPERMD           Z17, idx, Z18 \
	VPMOVSXBD        X18, Z18 \
	VCVTDQ2PS        Z18, Z18 \
	VMULPS           Z19, Z18, Z18 \
	VMOVUPS          Z18, hi

// func dequantQ80X(nb int, dst *float32, ldd int, src *byte, tab *float32)
//
// One group of four Q8_0x4 rows (nb blocks): row j's values to dst + j·ldd
// bytes, each float32(q)·d as dequantBlock computes it (d from tab, the
// f16 table). Row j's sixteen values of a half are dwords j, 4+j, 8+j,
// 12+j of its vector (VPERMD with Z20..Z23), its q = u XOR 0x80.
TEXT ·dequantQ80X(SB), NOSPLIT, $0-40
	MOVQ         nb+0(FP), CX
	MOVQ         dst+8(FP), DI
	MOVQ         ldd+16(FP), R12
	MOVQ         src+24(FP), R8
	MOVQ         tab+32(FP), R15
	LEAQ         (R12)(R12*2), R13
	MOVL         $0x80808080, AX
	VPBROADCASTD AX, Z24
	VMOVDQU32    dq80Idx<>+0(SB), Z20
	VMOVDQU32    dq80Idx<>+64(SB), Z21
	VMOVDQU32    dq80Idx<>+128(SB), Z22
	VMOVDQU32    dq80Idx<>+192(SB), Z23
dlp:
	TESTQ        CX, CX
	JZ           ddone
	VPXORD       (R8), Z24, Z16
	VPXORD       64(R8), Z24, Z17
	DQ80ROW(Z20, 128, (DI), 64(DI))
	DQ80ROW(Z21, 130, (DI)(R12*1), 64(DI)(R12*1))
	DQ80ROW(Z22, 132, (DI)(R12*2), 64(DI)(R12*2))
	DQ80ROW(Z23, 134, (DI)(R13*1), 64(DI)(R13*1))
	ADDQ         $136, R8
	ADDQ         $128, DI
	DECQ         CX
	JMP          dlp
ddone:
	VZEROUPPER
	RET

// Group dequantisation of the layouts without the transposing shuffle
// (Q5_0x4, Q5_1x4 and the K-quants'): a block's (sub-block's) values as
// the kernels read them (NIBS5, NIBS, SIXBITS), then each row's sixteen
// values of a half gathered by VPERMD (as dequantQ80X) and widened, each
// value computed as dequantGroup computes it (no fused multiply-adds).
// dst + j·ldd bytes: row j.

// The arguments and constants of the group dequantisers: blocks CX, dst
// DI, row stride R12 (R13 = 3·R12), src R8, f16 table R15, no prefetch
// distance (R10 = 0: the kernels' macros prefetch what they read);
// Z27 = 0x0f bytes, Z12..Z15 the rows' VPERMD indices.
#define DQSETUP \
	MOVQ         nb+0(FP), CX \
	MOVQ         dst+8(FP), DI \
	MOVQ         ldd+16(FP), R12 \
	MOVQ         src+24(FP), R8 \
	MOVQ         tab+32(FP), R15 \
	LEAQ         (R12)(R12*2), R13 \
	XORQ         R10, R10 \
	MOVL         $0x0f0f0f0f, AX \
	VPBROADCASTD AX, Z27 \
	VMOVDQU32    dq80Idx<>+0(SB), Z12 \
	VMOVDQU32    dq80Idx<>+64(SB), Z13 \
	VMOVDQU32    dq80Idx<>+128(SB), Z14 \
	VMOVDQU32    dq80Idx<>+192(SB), Z15

// Row idx's values of Z16 (0..15) and Z17 (16..31) as int32 in Z18, Z19
// (minus Z26 per dword, sub: VPSUBD; or nothing: a no-op form).
#define DQROW(idx) \
	VPERMD    Z16, idx, Z18 \
	VPMOVZXBD X18, Z18 \
	VPERMD    Z17, idx, Z19 \
	VPMOVZXBD X19, Z19

#define DQSTORE(lo, hi) \
	VMOVUPS Z18, lo \
	VMOVUPS Z19, hi

// Q5_0: float32(l − 16)·d, d the f16 at doff (Z26 = 16 per dword).
#define DQ50ROW(idx, doff, lo, hi) \
	DQROW(idx) \
	VPSUBD       Z26, Z18, Z18 \
	VPSUBD       Z26, Z19, Z19 \
	VCVTDQ2PS    Z18, Z18 \
	VCVTDQ2PS    Z19, Z19 \
	MOVWLZX      doff(R8), AX \
	VBROADCASTSS (R15)(AX*4), Z9 \
	VMULPS       Z9, Z18, Z18 \
	VMULPS       Z9, Z19, Z19 \
	DQSTORE(lo, hi)

// Q5_1: float32(l·d) + m, d and m the f16 pair at doff.
#define DQ51ROW(idx, doff, lo, hi) \
	DQROW(idx) \
	VCVTDQ2PS    Z18, Z18 \
	VCVTDQ2PS    Z19, Z19 \
	MOVWLZX      doff(R8), AX \
	VBROADCASTSS (R15)(AX*4), Z9 \
	MOVWLZX      doff+2(R8), AX \
	VBROADCASTSS (R15)(AX*4), Z10 \
	VMULPS       Z9, Z18, Z18 \
	VMULPS       Z9, Z19, Z19 \
	VADDPS       Z10, Z18, Z18 \
	VADDPS       Z10, Z19, Z19 \
	DQSTORE(lo, hi)

// The four rows of a block, ROW(idx, scale offset, stores) for each.
#define DQROWS(ROW, s0, s1, s2, s3) \
	ROW(Z12, s0, (DI), 64(DI)) \
	ROW(Z13, s1, (DI)(R12*1), 64(DI)(R12*1)) \
	ROW(Z14, s2, (DI)(R12*2), 64(DI)(R12*2)) \
	ROW(Z15, s3, (DI)(R13*1), 64(DI)(R13*1))

// A Q5 block's values, then its four rows.
#define DQ50BLOCK \
	NIBS5(0) \
	DQROWS(DQ50ROW, 80, 82, 84, 86)

#define DQ51BLOCK \
	NIBS5(0) \
	DQROWS(DQ51ROW, 80, 84, 88, 92)

// func dequantQ50X(nb int, dst *float32, ldd int, src *byte, tab *float32)
TEXT ·dequantQ50X(SB), NOSPLIT, $0-40
	DQSETUP
	MOVL         $0x10101010, AX
	VPBROADCASTD AX, Z23
	MOVL         $16, AX
	VPBROADCASTD AX, Z26
	DQLOOP(d50, d50done, DQ50BLOCK, R8, $88)

// func dequantQ51X(nb int, dst *float32, ldd int, src *byte, tab *float32)
TEXT ·dequantQ51X(SB), NOSPLIT, $0-40
	DQSETUP
	MOVL         $0x10101010, AX
	VPBROADCASTD AX, Z23
	DQLOOP(d51, d51done, DQ51BLOCK, R8, $96)

// The K-quants: a super-block's scales (V4KSCALES, V6KSCALES) stored in
// the frame (BX = SP), Z5..Z8 at 0, 64, 128, 192: Q4_K/Q5_K's d·scale of row j,
// sub-block k at 4·(4k+j), dmin·min 128 after it; Q6_K's d·scale of
// group g at 4·(4g+j).
#define DQKSTACK \
	VMOVUPS Z5, (BX) \
	VMOVUPS Z6, 64(BX) \
	VMOVUPS Z7, 128(BX) \
	VMOVUPS Z8, 192(BX)

// Q4_K/Q5_K: float32(d1·l) − o1, d1 and o1 at s(BX) and 128+s(BX).
#define DQKROW(idx, s, lo, hi) \
	DQROW(idx) \
	VCVTDQ2PS        Z18, Z18 \
	VCVTDQ2PS        Z19, Z19 \
	VMULPS.BCST      s(BX), Z18, Z18 \
	VMULPS.BCST      s(BX), Z19, Z19 \
	VSUBPS.BCST      128+s(BX), Z18, Z18 \
	VSUBPS.BCST      128+s(BX), Z19, Z19 \
	DQSTORE(lo, hi)

// Q6_K: ds·float32(q − 32), ds at s(BX) (the low half's group) and
// 16+s(BX) (the high half's); Z26 = 32 per dword.
#define DQ6ROW(idx, s, lo, hi) \
	DQROW(idx) \
	VPSUBD           Z26, Z18, Z18 \
	VPSUBD           Z26, Z19, Z19 \
	VCVTDQ2PS        Z18, Z18 \
	VCVTDQ2PS        Z19, Z19 \
	VMULPS.BCST      s(BX), Z18, Z18 \
	VMULPS.BCST      16+s(BX), Z19, Z19 \
	DQSTORE(lo, hi)

// Sub-block k of a Q4_Kx4 / Q5_Kx4 / Q6_Kx4 super-block (VALUES: its
// values' macro at its offset), its four rows, then the next sub-block's
// place in dst.
#define DQKSUB(VALUES, ROW, s) \
	VALUES \
	DQROWS(ROW, s, s+4, s+8, s+12) \
	ADDQ $128, DI

#define DQ4KSETUP \
	DQSETUP \
	MOVQ         SP, BX \
	MOVL         $3, AX \
	VPBROADCASTD AX, Z20 \
	VMOVDQU32    ·vnniK2(SB), Z21 \
	VMOVDQU32    ·vnniD(SB), Z25 \
	VMOVDQU32    vnniDmin<>(SB), Z29

#define DQ4KSB \
	V4KSCALES(512) \
	DQKSTACK \
	DQKSUB(NIBS(0), DQKROW, 0) \
	DQKSUB(NIBS(64), DQKROW, 16) \
	DQKSUB(NIBS(128), DQKROW, 32) \
	DQKSUB(NIBS(192), DQKROW, 48) \
	DQKSUB(NIBS(256), DQKROW, 64) \
	DQKSUB(NIBS(320), DQKROW, 80) \
	DQKSUB(NIBS(384), DQKROW, 96) \
	DQKSUB(NIBS(448), DQKROW, 112)

// func dequantQ4KX(nb int, dst *float32, ldd int, src *byte, tab *float32)
// nb: 32-value blocks (eight a super-block).
TEXT ·dequantQ4KX(SB), NOSPLIT, $256-40
	DQ4KSETUP
	DQKRUN(d4k, d4kdone, DQ4KSB, $576)

#define DQ5KSB \
	V4KSCALES(640) \
	DQKSTACK \
	DQKSUB(NIBS5(0), DQKROW, 0) \
	DQKSUB(NIBS5(80), DQKROW, 16) \
	DQKSUB(NIBS5(160), DQKROW, 32) \
	DQKSUB(NIBS5(240), DQKROW, 48) \
	DQKSUB(NIBS5(320), DQKROW, 64) \
	DQKSUB(NIBS5(400), DQKROW, 80) \
	DQKSUB(NIBS5(480), DQKROW, 96) \
	DQKSUB(NIBS5(560), DQKROW, 112)

// func dequantQ5KX(nb int, dst *float32, ldd int, src *byte, tab *float32)
TEXT ·dequantQ5KX(SB), NOSPLIT, $256-40
	DQ4KSETUP
	MOVL         $0x10101010, AX
	VPBROADCASTD AX, Z23
	DQKRUN(d5k, d5kdone, DQ5KSB, $704)

#define DQ6KSB \
	V6KSCALES \
	DQKSTACK \
	DQKSUB(SIXBITS(0), DQ6ROW, 0) \
	DQKSUB(SIXBITS(96), DQ6ROW, 32) \
	DQKSUB(SIXBITS(192), DQ6ROW, 64) \
	DQKSUB(SIXBITS(288), DQ6ROW, 96) \
	DQKSUB(SIXBITS(384), DQ6ROW, 128) \
	DQKSUB(SIXBITS(480), DQ6ROW, 160) \
	DQKSUB(SIXBITS(576), DQ6ROW, 192) \
	DQKSUB(SIXBITS(672), DQ6ROW, 224)

// func dequantQ6KX(nb int, dst *float32, ldd int, src *byte, tab *float32)
TEXT ·dequantQ6KX(SB), NOSPLIT, $256-40
	DQSETUP
	MOVQ         SP, BX
	MOVL         $0x30303030, AX
	VPBROADCASTD AX, Z23
	VMOVDQU32    v6Left<>(SB), Z21
	VMOVDQU32    v6Right<>(SB), Z20
	MOVL         $32, AX
	VPBROADCASTD AX, Z26
	DQKRUN(d6k, d6kdone, DQ6KSB, $840)
