//go:build amd64 && !noasm

#include "textflag.h"
#include "zmm_amd64.h"

// Decode kernels of block-quantized weights (AVX-512). Each call dots one
// float32 activation row x with rows weight rows (a multiple of 4, back to
// back, ldw bytes each) four at a time (R8..R11), one 32-value block per
// step, and writes the rows dots to out. The block's integers are widened
// to float32 in registers (VPMOVZXBD / VPMOVSXBD, VCVTDQ2PS) and
// multiplied with the activations; the block's f16 scale (and Q4_1's
// offset) is widened by looking it up in f16Table (tab, 2^16 float32
// values: one scalar load and an FMA with an embedded broadcast instead of
// three vector instructions) and applied once per block (see quantgemm.go
// for the arithmetic). Only the quantized bytes are read from memory.

// Prefetch distances (bytes ahead in each weight row).
#define PFQ4 256
#define PFQ8 512

// Row dequantisation (dequantQ*Z, at the end of the file):
// Arguments (nb int, dst *float32, src *byte, tab *float32); Z31 = 15.
#define DQSETUP \
	MOVQ nb+0(FP), CX \
	MOVQ dst+8(FP), DI \
	MOVQ src+16(FP), SI \
	MOVQ tab+24(FP), R15 \
	MOVL $15, AX \
	VPBROADCASTD AX, Z31

// The row loop: per block (size bytes, f16 d first), WIDEN leaves its 32
// integers as float32 in Z16/Z17, which are scaled by d, passed to POST,
// and stored.
#define DQRUN(lp, done, WIDEN, POST, size) \
lp: \
	TESTQ CX, CX \
	JZ    done \
	WIDEN \
	MOVWLZX          (SI), AX \
	VMULPS.BCST      (R15)(AX*4), Z16, Z16 \
	VMULPS.BCST      (R15)(AX*4), Z17, Z17 \
	POST \
	VMOVUPS          Z16, (DI) \
	VMOVUPS          Z17, 64(DI) \
	ADDQ             $size, SI \
	ADDQ             $128, DI \
	DECQ             CX \
	JMP              lp \
done: \
	VZEROUPPER \
	RET

#define DQNONE

#define DQ41WIDEN \
	NIB(4(SI), Z16, Z17) \
	VCVTDQ2PS Z16, Z16 \
	VCVTDQ2PS Z17, Z17

// Q4_1's offset m, added after the rounded product.
#define DQ41POST \
	MOVWLZX     2(SI), BX \
	VADDPS.BCST (R15)(BX*4), Z16, Z16 \
	VADDPS.BCST (R15)(BX*4), Z17, Z17

#define DQ40WIDEN \
	NIB(2(SI), Z16, Z17) \
	VPSUBD    Z30, Z16, Z16 \
	VPSUBD    Z30, Z17, Z17 \
	VCVTDQ2PS Z16, Z16 \
	VCVTDQ2PS Z17, Z17

#define DQ80WIDEN \
	VPMOVSXBD 2(SI), Z16 \
	VPMOVSXBD 18(SI), Z17 \
	VCVTDQ2PS Z16, Z16 \
	VCVTDQ2PS Z17, Z17

// K-quant rows. Q4_K/Q5_K: per super-block, d·sc (0(SP)) and dmin·m
// (32(SP)) as DequantRow rounds them, then each sub-block's values as
// (d·sc)·q − dmin·m. Q6_K: d·sc per 16-value group (0(SP)), values
// (d·sc)·(q − 32).
#define DQKCHUNK(j, qs, FIFTH) \
	K45INTS(SI, j, qs, FIFTH) \
	VMULPS.BCST      (8*j)(SP), Z16, Z16 \
	VMULPS.BCST      (8*j)(SP), Z19, Z19 \
	VMULPS.BCST      (8*j+4)(SP), Z17, Z17 \
	VMULPS.BCST      (8*j+4)(SP), Z21, Z21 \
	VSUBPS.BCST      (32+8*j)(SP), Z16, Z16 \
	VSUBPS.BCST      (32+8*j)(SP), Z19, Z19 \
	VSUBPS.BCST      (32+8*j+4)(SP), Z17, Z17 \
	VSUBPS.BCST      (32+8*j+4)(SP), Z21, Z21 \
	VMOVUPS          Z16, (256*j)(DI) \
	VMOVUPS          Z19, (256*j+64)(DI) \
	VMOVUPS          Z17, (256*j+128)(DI) \
	VMOVUPS          Z21, (256*j+192)(DI)

#define DQK45(lp, done, qs, FIFTH, size) \
lp: \
	TESTQ CX, CX \
	JZ    done \
	KSCALES(SI) \
	MOVWLZX          (SI), AX \
	MOVWLZX          2(SI), BX \
	VMULPS.BCST      (R15)(AX*4), Z17, Z18 \
	VMULPS.BCST      (R15)(BX*4), Z17, Z19 \
	VMOVUPS          Z18, (SP) \
	VEXTRACTF64X4    $1, Z19, Y19 \
	VMOVUPS          Y19, 32(SP) \
	DQKCHUNK(0, qs, FIFTH) \
	DQKCHUNK(1, qs, FIFTH) \
	DQKCHUNK(2, qs, FIFTH) \
	DQKCHUNK(3, qs, FIFTH) \
	ADDQ             $size, SI \
	ADDQ             $1024, DI \
	DECQ             CX \
	JMP              lp \
done: \
	VZEROUPPER \
	RET

// Store the 16 six-bit values in dst (minus 32) times scale s at x
// offset off of the super-block.
#define Q6KDQ(dst, off, s) \
	VPSUBD           Z24, dst, dst \
	VCVTDQ2PS        dst, dst \
	VMULPS.BCST      (4*(s))(SP), dst, dst \
	VMOVUPS          dst, (4*(off))(DI)

// Arguments common to the kernels:
// (nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32)
#define QSETUP \
	MOVQ x+8(FP), R14 \
	MOVQ w+24(FP), R8 \
	MOVQ ldw+32(FP), DX \
	MOVQ rows+40(FP), R12 \
	SHRQ $2, R12 \
	MOVQ out+48(FP), R13 \
	MOVQ tab+56(FP), R15 \
	MOVL $15, AX \
	VPBROADCASTD AX, Z31

// Start a group of four rows at R8: the other rows' pointers, x and xs
// from their starts, zero accumulators.
#define QGROUP \
	MOVQ nb+0(FP), CX \
	MOVQ R14, SI \
	MOVQ xs+16(FP), DI \
	LEAQ (R8)(DX*1), R9 \
	LEAQ (R9)(DX*1), R10 \
	LEAQ (R10)(DX*1), R11 \
	ZEROZ

// End a group: out[0..3] = the four sums (Z0..Z3 plus Z4..Z7), out += 4;
// the next group starts where the fourth row ended (R11).
#define QSTORE \
	VADDPS Z4, Z0, Z0 \
	VADDPS Z5, Z1, Z1 \
	VADDPS Z6, Z2, Z2 \
	VADDPS Z7, Z3, Z3 \
	MOVQ   R13, DI \
	RED4(Z0, Y0, X0, Z1, Y1, X1, Z2, Y2, X2, Z3, Y3, X3, 0) \
	ADDQ   $16, R13 \
	MOVQ   R11, R8 \
	DECQ   R12

// lo, hi = the low and high nibbles of the 16 bytes at src, as dwords
// (Z31 holds 15 in each lane).
#define NIB(src, lo, hi) \
	VPMOVZXBD    src, lo \
	VPSRLD       $4, lo, hi \
	VPANDD       Z31, lo, lo

// Z16 = the 16 lanes of q·x for the 16 bytes of nibbles at src (low
// nibbles: values 0..15 times x's first half in Z20; high: 16..31 times
// Z21); Z31 holds 15 in each lane.
#define NIBDOT(src) \
	NIB(src, Z16, Z17) \
	VCVTDQ2PS    Z16, Z16 \
	VCVTDQ2PS    Z17, Z17 \
	VMULPS       Z20, Z16, Z16 \
	VFMADD231PS  Z21, Z17, Z16

// The kernel's body: groups of four rows (R12 of them), each nb steps of
// STEP (one block of the four rows), then stored.
#define QRUN(grp, lp, done, STEP) \
grp: \
	TESTQ R12, R12 \
	JZ    done \
	QGROUP \
lp: \
	STEP \
	DECQ CX \
	JNZ  lp \
	QSTORE \
	JMP  grp \
done: \
	VZEROUPPER \
	RET

// One Q4_1 row: block at r (d, m, 16 bytes of nibbles: low nibbles are
// values 0..15, high ones 16..31); x halves in Z20/Z21, their pair sums in
// Z22; acc += d·(q·x), accm += m·(x pair sums).
#define Q41ROW(r, acc, accm) \
	NIBDOT(4(r)) \
	MOVWLZX      (r), AX \
	MOVWLZX      2(r), BX \
	VFMADD231PS.BCST (R15)(AX*4), Z16, acc \
	VFMADD231PS.BCST (R15)(BX*4), Z22, accm \
	PREFETCHT0   PFQ4(r) \
	ADDQ         $20, r

// One block of the four rows for the 4-bit kernels: x's halves and pair
// sums loaded, ROW applied to each row.
#define NIBSTEP(ROW) \
	VMOVUPS (SI), Z20 \
	VMOVUPS 64(SI), Z21 \
	VMOVUPS (DI), Z22 \
	ROW(R8, Z0, Z4) \
	ROW(R9, Z1, Z5) \
	ROW(R10, Z2, Z6) \
	ROW(R11, Z3, Z7) \
	ADDQ $128, SI \
	ADDQ $64, DI

#define Q41STEP NIBSTEP(Q41ROW)

// func qdotQ41Z(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32)
// xs holds per block the 16 sums x[i] + x[i+16].
TEXT ·qdotQ41Z(SB), NOSPLIT, $0-64
	QSETUP
	QRUN(q41group, q41, q41done, Q41STEP)

// One Q4_0 row: block at r (d, 16 bytes of nibbles, value q-8); the -8 is
// folded in as -8·Σx (Z22: x's pair sums, Z30: -8).
#define Q40ROW(r, acc, unused) \
	NIBDOT(2(r)) \
	VFMADD231PS  Z30, Z22, Z16 \
	MOVWLZX      (r), AX \
	VFMADD231PS.BCST (R15)(AX*4), Z16, acc \
	PREFETCHT0   PFQ4(r) \
	ADDQ         $18, r

#define Q40STEP NIBSTEP(Q40ROW)

// func qdotQ40Z(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32)
TEXT ·qdotQ40Z(SB), NOSPLIT, $0-64
	QSETUP
	MOVL $0xc1000000, AX // -8.0
	VPBROADCASTD AX, Z30
	QRUN(q40group, q40, q40done, Q40STEP)

// One Q8_0 row: block at r (d, 32 int8).
#define Q80ROW(r, acc) \
	VPMOVSXBD    2(r), Z16 \
	VPMOVSXBD    18(r), Z17 \
	VCVTDQ2PS    Z16, Z16 \
	VCVTDQ2PS    Z17, Z17 \
	VMULPS       Z20, Z16, Z16 \
	VFMADD231PS  Z21, Z17, Z16 \
	MOVWLZX      (r), AX \
	VFMADD231PS.BCST (R15)(AX*4), Z16, acc \
	PREFETCHT0   PFQ8(r) \
	ADDQ         $34, r

#define Q80STEP \
	VMOVUPS (SI), Z20 \
	VMOVUPS 64(SI), Z21 \
	Q80ROW(R8, Z0) \
	Q80ROW(R9, Z1) \
	Q80ROW(R10, Z2) \
	Q80ROW(R11, Z3) \
	ADDQ $128, SI

// func qdotQ80Z(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32)
// xs is unused.
TEXT ·qdotQ80Z(SB), NOSPLIT, $0-64
	QSETUP
	QRUN(q80group, q80, q80done, Q80STEP)

// Q4_K (super-blocks of 256 values, 144 bytes: d, dmin, 12 bytes of 6-bit
// sub-block scales and mins, 128 bytes of nibbles; value = d·sc·q −
// dmin·m per 32-value sub-block). Per super-block of a row: the scales
// and mins are unpacked with vector integer ops into 16 floats on the
// stack (sc 0..7 at 0(SP), m 0..7 at 32(SP)); each 64 values (32 bytes:
// low nibbles sub-block 2j, high 2j+1) are dotted with x (read from
// memory) and added with their scale into Z18; then acc += d·Z18 and
// accm −= dmin·Σ m·(sub-block sums of x, prep at DI).
//
// Constants: Z31 = 15, X29 = 0x3f bytes, X28 = dword shifts [0,4,0,4],
// X27 = 0x0f bytes, X26 = 0x03 bytes.
// End a K-quant super-block of row r (size bytes): acc += d·Z18 (d, f16
// at doff), prefetch, next super-block.
#define KEND(r, doff, acc, size) \
	MOVWLZX          doff(r), AX \
	VFMADD231PS.BCST (R15)(AX*4), Z18, acc \
	PREFETCHT0       PFQ8(r) \
	ADDQ             $size, r

// One super-block of the four rows: ROW on each (its accumulators: Z0..Z3
// and, as ymm, Y4..Y7), then x and the prep (prepBytes a super-block)
// advanced.
#define KSTEP(ROW, prepBytes) \
	ROW(R8, Z0, Y4) \
	ROW(R9, Z1, Y5) \
	ROW(R10, Z2, Y6) \
	ROW(R11, Z3, Y7) \
	ADDQ $1024, SI \
	ADDQ $prepBytes, DI

// The 64 values j of a Q4_K (qs at 16) or Q5_K (qs at 48, FIFTH adds
// the fifth bits) super-block: low nibbles sub-block 2j (Z16: values
// 0..15, Z19: 16..31), high ones 2j+1 (Z17, Z21).
#define K45CHUNK(r, j, qs, FIFTH) \
	K45INTS(r, j, qs, FIFTH) \
	VMULPS           (256*j)(SI), Z16, Z16 \
	VFMADD231PS      (256*j+64)(SI), Z19, Z16 \
	VMULPS           (256*j+128)(SI), Z17, Z17 \
	VFMADD231PS      (256*j+192)(SI), Z21, Z17 \
	VFMADD231PS.BCST (8*j)(SP), Z16, Z18 \
	VFMADD231PS.BCST (8*j+4)(SP), Z17, Z18

// The 64 values j as float32 in Z16, Z19 (sub-block 2j) and Z17, Z21
// (2j+1).
#define K45INTS(r, j, qs, FIFTH) \
	NIB((qs+32*j)(r), Z16, Z17) \
	NIB((qs+16+32*j)(r), Z19, Z21) \
	FIFTH(r, j) \
	VCVTDQ2PS        Z16, Z16 \
	VCVTDQ2PS        Z17, Z17 \
	VCVTDQ2PS        Z19, Z19 \
	VCVTDQ2PS        Z21, Z21

#define NOFIFTH(r, j)

// Bit s of the qh bytes at src (as dwords), moved to bit 4, into dst.
#define QHBIT(src, s, dst) \
	VPMOVZXBD        src, Z22 \
	VPSRLD           $(s), Z22, Z22 \
	VPSLLD           $4, Z22, Z22 \
	VPANDD           Z30, Z22, Z22 \
	VPORD            Z22, dst, dst

// Q5_K's fifth bits of the 64 values j: bit 2j of qh (16 bytes at 16)
// for sub-block 2j, bit 2j+1 for 2j+1.
#define Q5FIFTH(r, j) \
	QHBIT(16(r), 2*j, Z16) \
	QHBIT(32(r), 2*j, Z19) \
	QHBIT(16(r), 2*j+1, Z17) \
	QHBIT(32(r), 2*j+1, Z21)

// Z17 = the 8 sub-block scales then the 8 mins of the Q4_K/Q5_K
// super-block at r, as float32 (6-bit fields of its 12 scale bytes).
#define KSCALES(r) \
	VMOVDQU32        4(r), X16 \
	VPANDD           X29, X16, X17 \
	VPSHUFD          $0xaa, X16, X18 \
	VPSRLVD          X28, X18, X18 \
	VPANDD           X27, X18, X18 \
	VPSRLD           $6, X16, X19 \
	VPANDD           X26, X19, X19 \
	VPSLLD           $4, X19, X19 \
	VPORD            X19, X18, X18 \
	VPUNPCKLDQ       X18, X17, X17 \
	VPMOVZXBD        X17, Z17 \
	VCVTDQ2PS        Z17, Z17

// One super-block of a Q4_K or Q5_K row (qs: offset of the nibbles,
// FIFTH: the fifth bits, size: bytes).
#define K45ROW(r, acc, accmy, qs, FIFTH, size) \
	KSCALES(r) \
	VMOVUPS          Z17, (SP) \
	VEXTRACTF64X4    $1, Z17, Y18 \
	VMULPS           (DI), Y18, Y18 \
	MOVWLZX          2(r), BX \
	VFNMADD231PS.BCST (R15)(BX*4), Y18, accmy \
	VPXORD           Z18, Z18, Z18 \
	K45CHUNK(r, 0, qs, FIFTH) \
	K45CHUNK(r, 1, qs, FIFTH) \
	K45CHUNK(r, 2, qs, FIFTH) \
	K45CHUNK(r, 3, qs, FIFTH) \
	KEND(r, 0, acc, size)

#define Q4KROW(r, acc, accmy) K45ROW(r, acc, accmy, 16, NOFIFTH, 144)
#define Q5KROW(r, acc, accmy) K45ROW(r, acc, accmy, 48, Q5FIFTH, 176)

#define Q4KSTEP KSTEP(Q4KROW, 32)
#define Q5KSTEP KSTEP(Q5KROW, 32)

#define K45SETUP \
	QSETUP \
	K45CONST

#define K45CONST \
	MOVL $0x3f3f3f3f, AX \
	VPBROADCASTD AX, X29 \
	MOVQ $0x0000000400000000, AX \
	VMOVQ AX, X28 \
	VPBROADCASTQ X28, X28 \
	MOVL $0x0f0f0f0f, AX \
	VPBROADCASTD AX, X27 \
	MOVL $0x03030303, AX \
	VPBROADCASTD AX, X26

// func qdotQ4KZ(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32)
// nb super-blocks; xs holds per super-block the 8 sums of x over its
// 32-value sub-blocks.
TEXT ·qdotQ4KZ(SB), NOSPLIT, $64-64
	K45SETUP
	QRUN(q4kgroup, q4k, q4kdone, Q4KSTEP)

// func qdotQ5KZ(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32)
// As qdotQ4KZ.
TEXT ·qdotQ5KZ(SB), NOSPLIT, $64-64
	K45SETUP
	MOVL $16, AX
	VPBROADCASTD AX, Z30
	QRUN(q5kgroup, q5k, q5kdone, Q5KSTEP)

// Q6_K (super-blocks of 256 values, 210 bytes: ql 128, qh 64, 16 int8
// scales, f16 d; value = d·sc·(q − 32) per 16-value group). Per
// super-block of a row: the 16 scales as floats on the stack (0(SP)) and
// Z18 = scales ⊙ prep (prep, at DI: −32 × the sums of x over the 16-value
// groups); each zmm of 16 six-bit values (low 4 bits from ql, high 2 from
// qh) is multiplied by x and added into Z18 with its group's scale; then
// acc += d·Z18. Constants: Z31 = 15, Z25 = 0x30.
// The 16 values in dst times x[off:], into Z18 with scale s.
#define Q6KQ(dst, off, s) \
	VCVTDQ2PS        dst, dst \
	VMULPS           (4*(off))(SI), dst, dst \
	VFMADD231PS.BCST (4*(s))(SP), dst, Z18

// One 64-value part (n: 128-value half, h: 16-value quarter of it): its
// four zmm of six-bit values, each passed to USE(dst, x offset, scale).
#define Q6KPART(r, n, h, USE) \
	VPMOVZXBD        (64*n+16*h)(r), Z16 \
	VPMOVZXBD        (64*n+32+16*h)(r), Z17 \
	VPMOVZXBD        (128+32*n+16*h)(r), Z19 \
	VPANDD           Z31, Z16, Z21 \
	VPSLLD           $4, Z19, Z22 \
	VPANDD           Z25, Z22, Z22 \
	VPORD            Z22, Z21, Z21 \
	USE(Z21, 128*n+16*h, 8*n+h) \
	VPANDD           Z31, Z17, Z21 \
	VPSLLD           $2, Z19, Z22 \
	VPANDD           Z25, Z22, Z22 \
	VPORD            Z22, Z21, Z21 \
	USE(Z21, 128*n+32+16*h, 8*n+2+h) \
	VPSRLD           $4, Z16, Z21 \
	VPANDD           Z25, Z19, Z22 \
	VPORD            Z22, Z21, Z21 \
	USE(Z21, 128*n+64+16*h, 8*n+4+h) \
	VPSRLD           $4, Z17, Z21 \
	VPSRLD           $2, Z19, Z22 \
	VPANDD           Z25, Z22, Z22 \
	VPORD            Z22, Z21, Z21 \
	USE(Z21, 128*n+96+16*h, 8*n+6+h)

#define Q6KROW(r, acc, unused) \
	VPMOVSXBD        192(r), Z20 \
	VCVTDQ2PS        Z20, Z20 \
	VMOVUPS          Z20, (SP) \
	VMULPS           (DI), Z20, Z18 \
	Q6KPART(r, 0, 0, Q6KQ) \
	Q6KPART(r, 0, 1, Q6KQ) \
	Q6KPART(r, 1, 0, Q6KQ) \
	Q6KPART(r, 1, 1, Q6KQ) \
	KEND(r, 208, acc, 210)

#define Q6KSTEP KSTEP(Q6KROW, 64)

// func qdotQ6KZ(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32)
// nb super-blocks; xs holds per super-block −32 × the 16 sums of x over
// its 16-value groups.
TEXT ·qdotQ6KZ(SB), NOSPLIT, $64-64
	QSETUP
	MOVL $0x30, AX
	VPBROADCASTD AX, Z25
	QRUN(q6kgroup, q6k, q6kdone, Q6KSTEP)

// Dequantisation of whole rows (prefill and training widen weights with
// it): each block's integers widened in registers and scaled exactly as
// DequantRow's Go code does (a product rounded to float32, then Q4_1's
// offset added: no fused multiply-add), so the values are bit-identical.

// func dequantQ41Z(nb int, dst *float32, src *byte, tab *float32)
TEXT ·dequantQ41Z(SB), NOSPLIT, $0-32
	DQSETUP
	DQRUN(dq41, dq41done, DQ41WIDEN, DQ41POST, 20)

// func dequantQ40Z(nb int, dst *float32, src *byte, tab *float32)
TEXT ·dequantQ40Z(SB), NOSPLIT, $0-32
	DQSETUP
	MOVL $8, AX
	VPBROADCASTD AX, Z30
	DQRUN(dq40, dq40done, DQ40WIDEN, DQNONE, 18)

// func dequantQ80Z(nb int, dst *float32, src *byte, tab *float32)
TEXT ·dequantQ80Z(SB), NOSPLIT, $0-32
	DQSETUP
	DQRUN(dq80, dq80done, DQ80WIDEN, DQNONE, 34)

// func dequantQ4KZ(nb int, dst *float32, src *byte, tab *float32)
TEXT ·dequantQ4KZ(SB), NOSPLIT, $64-32
	DQSETUP
	K45CONST
	DQK45(dq4k, dq4kdone, 16, NOFIFTH, 144)

// func dequantQ5KZ(nb int, dst *float32, src *byte, tab *float32)
TEXT ·dequantQ5KZ(SB), NOSPLIT, $64-32
	DQSETUP
	K45CONST
	MOVL $16, AX
	VPBROADCASTD AX, Z30
	DQK45(dq5k, dq5kdone, 48, Q5FIFTH, 176)

// func dequantQ6KZ(nb int, dst *float32, src *byte, tab *float32)
TEXT ·dequantQ6KZ(SB), NOSPLIT, $64-32
	DQSETUP
	MOVL $0x30, AX
	VPBROADCASTD AX, Z25
	MOVL $32, AX
	VPBROADCASTD AX, Z24
dq6k:
	TESTQ CX, CX
	JZ    dq6kdone
	VPMOVSXBD        192(SI), Z20
	VCVTDQ2PS        Z20, Z20
	MOVWLZX          208(SI), AX
	VMULPS.BCST      (R15)(AX*4), Z20, Z20
	VMOVUPS          Z20, (SP)
	Q6KPART(SI, 0, 0, Q6KDQ)
	Q6KPART(SI, 0, 1, Q6KDQ)
	Q6KPART(SI, 1, 0, Q6KDQ)
	Q6KPART(SI, 1, 1, Q6KDQ)
	ADDQ             $210, SI
	ADDQ             $1024, DI
	DECQ             CX
	JMP              dq6k
dq6kdone:
	VZEROUPPER
	RET
