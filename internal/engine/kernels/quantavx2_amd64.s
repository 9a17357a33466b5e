//go:build amd64 && !noasm

#include "textflag.h"
#include "zmm_amd64.h"

// AVX2 machines (no AVX-512): the decode kernels of every format (below,
// qdot*Y: the values widened and multiplied in registers; at the end of
// the file, qdot*YV and qdot*YN: integer kernels of the four-row layouts
// of Q4_1, Q4_0, Q5_0, Q5_1, Q4_K and Q5_K, with the prep limbsPrepY)
// and the dequantisers prefill and training widen blocks of rows with,
// for the Q8_0, Q5_0, Q5_1 and K-quant rows and those four-row groups.
// Each value as dequantBlock computes it (no fused multiply-adds):
// bit-identical (TestDequantGGUF, TestRepack4, the "avx2" runs).

// The decode kernels' arguments into registers (defined before any TEXT:
// vet checks a #define's argument names against the TEXT before it): the
// row kernels' (qdot*Y: nb R9, x R14, xs R11, w SI, rows R12, out R13,
// tab R15, pf R10).
#define YRARGS \
	MOVQ nb+0(FP), R9 \
	MOVQ x+8(FP), R14 \
	MOVQ xs+16(FP), R11 \
	MOVQ w+24(FP), SI \
	MOVQ rows+40(FP), R12 \
	MOVQ out+48(FP), R13 \
	MOVQ tab+56(FP), R15 \
	MOVQ pf+64(FP), R10

// The group dequantisers' arguments (nb CX, dst DI, ldd R12, src R8, tab
// R15; R13 = 3·ldd).
#define YGARGS \
	MOVQ nb+0(FP), CX \
	MOVQ dst+8(FP), DI \
	MOVQ ldd+16(FP), R12 \
	MOVQ src+24(FP), R8 \
	MOVQ tab+32(FP), R15 \
	LEAQ (R12)(R12*2), R13

// The K-quant row kernels' YRARGS, their stack scratch in DI and Y15 = 15
// per dword.
#define YKARGS \
	YRARGS \
	MOVQ SP, DI \
	YDWORD($15, X15, Y15)

// The integer kernels' arguments and constants (qdot*YV: limbs R14,
// scales R11, w R8, groups R12, out R13, pf R10, the results' scale 2^e
// R15, at sc + 8·nb floats; Y15 = 0x0f bytes, Y14 = vnniTr, Y13 = 1 in
// every word).
#define YVARGS \
	MOVQ         limbs+8(FP), R14 \
	MOVQ         sc+16(FP), R11 \
	MOVQ         w+24(FP), R8 \
	MOVQ         groups+32(FP), R12 \
	MOVQ         out+40(FP), R13 \
	MOVQ         pf+48(FP), R10 \
	MOVQ         nb+0(FP), AX \
	SHLQ         $5, AX \
	LEAQ         (R11)(AX*1), R15 \
	YDWORD($0x0f0f0f0f, X15, Y15) \
	YDWORD($0x00010001, X13, Y13) \
	VMOVDQU      ·vnniTr(SB), Y14

// y = v in every dword (x: its xmm).
#define YDWORD(v, x, y) \
	MOVL         v, AX \
	VMOVD        AX, x \
	VPBROADCASTD x, y

// The nibble and fifth-bit bytes (Y15: 0x0f, Y11: 0x10), and the Q5
// constants of Y5VALUES (Y12: y5Bits, Y13: y5Spread).
#define Y5NIBCONST \
	YDWORD($0x0f0f0f0f, X15, Y15) \
	YDWORD($0x10101010, X11, Y11)

#define Y5CONST \
	Y5NIBCONST \
	VMOVDQU y5Bits<>(SB), Y12 \
	VMOVDQU y5Spread<>(SB), Y13

// func dequantQ80Y(nb int, dst *float32, src *byte, tab *float32)
TEXT ·dequantQ80Y(SB), NOSPLIT, $0-32
	MOVQ nb+0(FP), CX
	MOVQ dst+8(FP), DI
	MOVQ src+16(FP), SI
	MOVQ tab+24(FP), R15
y80:
	TESTQ        CX, CX
	JZ           y80done
	MOVWLZX      (SI), AX
	VBROADCASTSS (R15)(AX*4), Y0
	VPMOVSXBD    2(SI), Y1
	VPMOVSXBD    10(SI), Y2
	VPMOVSXBD    18(SI), Y3
	VPMOVSXBD    26(SI), Y4
	VCVTDQ2PS    Y1, Y1
	VCVTDQ2PS    Y2, Y2
	VCVTDQ2PS    Y3, Y3
	VCVTDQ2PS    Y4, Y4
	VMULPS       Y0, Y1, Y1
	VMULPS       Y0, Y2, Y2
	VMULPS       Y0, Y3, Y3
	VMULPS       Y0, Y4, Y4
	VMOVUPS      Y1, (DI)
	VMOVUPS      Y2, 32(DI)
	VMOVUPS      Y3, 64(DI)
	VMOVUPS      Y4, 96(DI)
	ADDQ         $34, SI
	ADDQ         $128, DI
	DECQ         CX
	JMP          y80
y80done:
	VZEROUPPER
	RET

// VPSHUFB controls gathering row j's bytes of a 128-bit lane of the
// four-row layout's nibbles (byte 4i+j: row j's byte i): bytes j, 4+j,
// 8+j, 12+j into the lane's first dword, zero elsewhere.
DATA y4Row<>+0(SB)/8, $0x808080800c080400
DATA y4Row<>+8(SB)/8, $0x8080808080808080
DATA y4Row<>+16(SB)/8, $0x808080800d090501
DATA y4Row<>+24(SB)/8, $0x8080808080808080
DATA y4Row<>+32(SB)/8, $0x808080800e0a0602
DATA y4Row<>+40(SB)/8, $0x8080808080808080
DATA y4Row<>+48(SB)/8, $0x808080800f0b0703
DATA y4Row<>+56(SB)/8, $0x8080808080808080
GLOBL y4Row<>(SB), RODATA|NOPTR, $64

// Row j's 16 nibble bytes of the group's block at SI (Y5, Y6: its 64
// bytes) into X1, then its values: 0..7, 8..15 (low nibbles) and 16..23,
// 24..31 (high) as int32 in Y1..Y4 (X15: 0x0f bytes; Y7, X8 scratch).
#define Y4VALUES(j) \
	VBROADCASTI128 y4Row<>+16*j(SB), Y7 \
	VPSHUFB        Y7, Y5, Y1 \
	VPSHUFB        Y7, Y6, Y2 \
	VEXTRACTI128   $1, Y1, X3 \
	VEXTRACTI128   $1, Y2, X4 \
	VPUNPCKLDQ     X3, X1, X1 \
	VPUNPCKLDQ     X4, X2, X2 \
	VPUNPCKLQDQ    X2, X1, X1 \
	VPSRLW         $4, X1, X8 \
	VPAND          X15, X1, X1 \
	VPAND          X15, X8, X8 \
	VPSRLDQ        $8, X1, X2 \
	VPSRLDQ        $8, X8, X4 \
	VPMOVZXBD      X1, Y1 \
	VPMOVZXBD      X2, Y2 \
	VPMOVZXBD      X8, Y3 \
	VPMOVZXBD      X4, Y4

// Y1..Y4 as float32 times Y0 (d).
#define Y4TIMESD \
	VCVTDQ2PS    Y1, Y1 \
	VCVTDQ2PS    Y2, Y2 \
	VCVTDQ2PS    Y3, Y3 \
	VCVTDQ2PS    Y4, Y4 \
	VMULPS       Y0, Y1, Y1 \
	VMULPS       Y0, Y2, Y2 \
	VMULPS       Y0, Y3, Y3 \
	VMULPS       Y0, Y4, Y4

#define Y4STORE \
	VMOVUPS Y1, (BX) \
	VMOVUPS Y2, 32(BX) \
	VMOVUPS Y3, 64(BX) \
	VMOVUPS Y4, 96(BX)

// Q4_1: float32(l·d) + m, row j's d and m at 64 + 4j; to BX.
#define Y41ROW(j) \
	Y4VALUES(j) \
	MOVWLZX      64+4*j(SI), AX \
	VBROADCASTSS (R15)(AX*4), Y0 \
	MOVWLZX      66+4*j(SI), AX \
	VBROADCASTSS (R15)(AX*4), Y9 \
	Y4TIMESD \
	VADDPS       Y9, Y1, Y1 \
	VADDPS       Y9, Y2, Y2 \
	VADDPS       Y9, Y3, Y3 \
	VADDPS       Y9, Y4, Y4 \
	Y4STORE

// Q4_0: float32(l − 8)·d, row j's d at 64 + 2j (Y14: 8 per dword); to
// BX.
#define Y40ROW(j) \
	Y4VALUES(j) \
	MOVWLZX      64+2*j(SI), AX \
	VBROADCASTSS (R15)(AX*4), Y0 \
	VPSUBD       Y14, Y1, Y1 \
	VPSUBD       Y14, Y2, Y2 \
	VPSUBD       Y14, Y3, Y3 \
	VPSUBD       Y14, Y4, Y4 \
	Y4TIMESD \
	Y4STORE

// The group loop (ROW: the format's row; size: bytes a block).
#define Y4RUN(lp, done, ROW, size) \
	MOVQ         nb+0(FP), CX \
	MOVQ         dst+8(FP), DI \
	MOVQ         ldd+16(FP), R12 \
	MOVQ         src+24(FP), SI \
	MOVQ         tab+32(FP), R15 \
	LEAQ         (R12)(R12*2), R13 \
	YDWORD($0x0f0f0f0f, X15, Y15) \
	YDWORD($8, X14, Y14) \
	DQLOOP(lp, done, Y4BLOCK(ROW), SI, size)

// A group's block: its 64 nibble bytes, then each row to BX.
#define Y4BLOCK(ROW) \
	VMOVDQU      (SI), Y5 \
	VMOVDQU      32(SI), Y6 \
	MOVQ         DI, BX \
	ROW(0) \
	LEAQ         (DI)(R12*1), BX \
	ROW(1) \
	LEAQ         (DI)(R12*2), BX \
	ROW(2) \
	LEAQ         (DI)(R13*1), BX \
	ROW(3)

// func dequantQ41Y(nb int, dst *float32, ldd int, src *byte, tab *float32)
TEXT ·dequantQ41Y(SB), NOSPLIT, $0-40
	Y4RUN(y41, y41done, Y41ROW, $80)

// func dequantQ40Y(nb int, dst *float32, ldd int, src *byte, tab *float32)
TEXT ·dequantQ40Y(SB), NOSPLIT, $0-40
	Y4RUN(y40, y40done, Y40ROW, $72)

// Q5_0 and Q5_1 rows (the K-quant mixes' fallbacks): a block's 32 fifth
// bits spread to bytes (VPSHUFB replicating qh's byte k/8 to byte k, an
// AND with bit k%8, a compare) and or-ed, as 16, into the nibbles.
DATA y5Spread<>+0(SB)/8, $0x0000000000000000
DATA y5Spread<>+8(SB)/8, $0x0101010101010101
DATA y5Spread<>+16(SB)/8, $0x0202020202020202
DATA y5Spread<>+24(SB)/8, $0x0303030303030303
GLOBL y5Spread<>(SB), RODATA|NOPTR, $32
DATA y5Bits<>+0(SB)/8, $0x8040201008040201
DATA y5Bits<>+8(SB)/8, $0x8040201008040201
DATA y5Bits<>+16(SB)/8, $0x8040201008040201
DATA y5Bits<>+24(SB)/8, $0x8040201008040201
GLOBL y5Bits<>(SB), RODATA|NOPTR, $32

// The block at SI's values (qh at SI + hoff, the nibbles after it) as
// int32 in Y1..Y4: values 0..7, 8..15, 16..23, 24..31 (X15/Y15 0x0f and
// Y11 0x10 bytes, Y12 y5Bits, Y13 y5Spread; Y9, X8 scratch).
#define Y5VALUES(hoff) \
	VMOVDQU      hoff+4(SI), X1 \
	VPSRLW       $4, X1, X8 \
	VPAND        X15, X1, X1 \
	VPAND        X15, X8, X8 \
	VINSERTI128  $1, X8, Y1, Y1 \
	VPBROADCASTD hoff(SI), Y9 \
	VPSHUFB      Y13, Y9, Y9 \
	VPAND        Y12, Y9, Y9 \
	VPCMPEQB     Y12, Y9, Y9 \
	VPAND        Y11, Y9, Y9 \
	VPOR         Y9, Y1, Y1 \
	VEXTRACTI128 $1, Y1, X3 \
	VPSRLDQ      $8, X1, X2 \
	VPSRLDQ      $8, X3, X4 \
	VPMOVZXBD    X1, Y1 \
	VPMOVZXBD    X2, Y2 \
	VPMOVZXBD    X3, Y3 \
	VPMOVZXBD    X4, Y4

#define Y5STORE \
	VMOVUPS Y1, (DI) \
	VMOVUPS Y2, 32(DI) \
	VMOVUPS Y3, 64(DI) \
	VMOVUPS Y4, 96(DI)

// The Q5 row loop (BLOCK: one block's floats computed and stored; size:
// bytes a block).
#define Y5RUN(lp, done, BLOCK, size) \
	MOVQ         nb+0(FP), CX \
	MOVQ         dst+8(FP), DI \
	MOVQ         src+16(FP), SI \
	MOVQ         tab+24(FP), R15 \
	Y5CONST \
	YDWORD($16, X14, Y14) \
	DQLOOP(lp, done, BLOCK, SI, size)

// Q5_0: float32(l − 16)·d.
#define Y50BLOCK \
	Y5VALUES(2) \
	MOVWLZX      (SI), AX \
	VBROADCASTSS (R15)(AX*4), Y0 \
	VPSUBD       Y14, Y1, Y1 \
	VPSUBD       Y14, Y2, Y2 \
	VPSUBD       Y14, Y3, Y3 \
	VPSUBD       Y14, Y4, Y4 \
	Y4TIMESD \
	Y5STORE

// Q5_1: float32(l·d) + m.
#define Y51BLOCK \
	Y5VALUES(4) \
	MOVWLZX      (SI), AX \
	VBROADCASTSS (R15)(AX*4), Y0 \
	MOVWLZX      2(SI), AX \
	VBROADCASTSS (R15)(AX*4), Y9 \
	Y4TIMESD \
	VADDPS       Y9, Y1, Y1 \
	VADDPS       Y9, Y2, Y2 \
	VADDPS       Y9, Y3, Y3 \
	VADDPS       Y9, Y4, Y4 \
	Y5STORE

// func dequantQ50Y(nb int, dst *float32, src *byte, tab *float32)
TEXT ·dequantQ50Y(SB), NOSPLIT, $0-32
	Y5RUN(y50, y50done, Y50BLOCK, $22)

// func dequantQ51Y(nb int, dst *float32, src *byte, tab *float32)
TEXT ·dequantQ51Y(SB), NOSPLIT, $0-32
	Y5RUN(y51, y51done, Y51BLOCK, $24)

// The K-quants' rows on AVX2, one super-block a call: the scale products
// come from Go (dequantKY: Q4_K/Q5_K sc[k] = d·scale and sc[8+k] =
// dmin·min of sub-block k; Q6_K sc[g] = d·scale of 16-value group g), the
// values from here: each float32(sc·l) − min, or sc·float32(q − 32), as
// dequantBlock computes it.

// A vector vy (its lower half vx) of 32 byte values to floats at off(DI):
// lo, hi: the byte offsets at DX of its first and last 16's scale products
// (numbers, not expressions: the macros multiply nothing),
// and OP the value's form (KY45 or KY6). Y0, Y3..Y6, Y9, Y10 scratch.
#define KYSTORE(vy, vx, lo, hi, off, OP) \
	VEXTRACTI128 $1, vy, X3 \
	VPSRLDQ      $8, vx, X4 \
	VPSRLDQ      $8, X3, X5 \
	VPMOVZXBD    vx, Y6 \
	VPMOVZXBD    X4, Y4 \
	VPMOVZXBD    X3, Y3 \
	VPMOVZXBD    X5, Y5 \
	OP(lo, Y6, Y4) \
	OP(hi, Y3, Y5) \
	VMOVUPS      Y6, off(DI) \
	VMOVUPS      Y4, off+32(DI) \
	VMOVUPS      Y3, off+64(DI) \
	VMOVUPS      Y5, off+96(DI)

// Q4_K/Q5_K: float32(d1·l) − o1, d1 at k(DX), o1 at 32+k(DX).
#define KY45(k, a, b) \
	VBROADCASTSS k(DX), Y0 \
	VBROADCASTSS 32+k(DX), Y9 \
	VCVTDQ2PS    a, a \
	VCVTDQ2PS    b, b \
	VMULPS       Y0, a, a \
	VMULPS       Y0, b, b \
	VSUBPS       Y9, a, a \
	VSUBPS       Y9, b, b

// Q6_K: ds·float32(q − 32), ds at g(DX) (Y14: 32 per dword).
#define KY6(g, a, b) \
	VBROADCASTSS g(DX), Y0 \
	VPSUBD       Y14, a, a \
	VPSUBD       Y14, b, b \
	VCVTDQ2PS    a, a \
	VCVTDQ2PS    b, b \
	VMULPS       Y0, a, a \
	VMULPS       Y0, b, b

// The fifth bit of a Q5_K value: qh (Y8) bit bit of each byte, as 16,
// or-ed into v (Y7 scratch; Y11 = 0x10 bytes).
#define KY5BIT(bits, v) \
	MOVL         bits, AX \
	VMOVD        AX, X7 \
	VPBROADCASTD X7, Y7 \
	VPAND        Y8, Y7, Y10 \
	VPCMPEQB     Y7, Y10, Y10 \
	VPAND        Y11, Y10, Y10 \
	VPOR         Y10, v, v

// Q4_K's (FIFTH: nothing) or Q5_K's values 64m..64m+63: qs bytes at
// SI + q (32m), low nibbles sub-block 2m (its scale products at s0 =
// 8m, its floats at o0 = 256m), high 2m+1 (s1, o1).
#define KY45M(q, s0, s1, o0, o1, FIFTH_LO, FIFTH_HI) \
	VMOVDQU      q(SI), Y1 \
	VPSRLW       $4, Y1, Y2 \
	VPAND        Y15, Y1, Y1 \
	VPAND        Y15, Y2, Y2 \
	FIFTH_LO \
	FIFTH_HI \
	KYSTORE(Y1, X1, s0, s0, o0, KY45) \
	KYSTORE(Y2, X2, s1, s1, o1, KY45)

#define KYNONE

#define KYSETUP \
	Y5NIBCONST \
	YDWORD($32, X14, Y14)

// func dequantK4Y(qs *byte, qh *byte, sc *float32, dst *float32)
TEXT ·dequantK4Y(SB), NOSPLIT, $0-32
	MOVQ         qs+0(FP), SI
	MOVQ         qh+8(FP), R9
	MOVQ         sc+16(FP), DX
	MOVQ         dst+24(FP), DI
	KYSETUP
	KY45M(0, 0, 4, 0, 128, KYNONE, KYNONE)
	KY45M(32, 8, 12, 256, 384, KYNONE, KYNONE)
	KY45M(64, 16, 20, 512, 640, KYNONE, KYNONE)
	KY45M(96, 24, 28, 768, 896, KYNONE, KYNONE)
	VZEROUPPER
	RET

// func dequantK5Y(qs *byte, qh *byte, sc *float32, dst *float32)
TEXT ·dequantK5Y(SB), NOSPLIT, $0-32
	MOVQ         qs+0(FP), SI
	MOVQ         qh+8(FP), R9
	MOVQ         sc+16(FP), DX
	MOVQ         dst+24(FP), DI
	KYSETUP
	VMOVDQU      (R9), Y8
	KY45M(0, 0, 4, 0, 128, KY5BIT($0x01010101, Y1), KY5BIT($0x02020202, Y2))
	KY45M(32, 8, 12, 256, 384, KY5BIT($0x04040404, Y1), KY5BIT($0x08080808, Y2))
	KY45M(64, 16, 20, 512, 640, KY5BIT($0x10101010, Y1), KY5BIT($0x20202020, Y2))
	KY45M(96, 24, 28, 768, 896, KY5BIT($0x40404040, Y1), KY5BIT($0x80808080, Y2))
	VZEROUPPER
	RET

// Q6_K's values 128n..128n+127 from ql at SI + l (64n) and qh at R9 +
// h (32n), group g's scale product at DX + gk (4g: g0 = 8n, ..., g7),
// floats at DI + o (512n) on:
// q1 (values +0..31) = ql[0:32] low nibbles | qh bits 0-1, q2 (+32) =
// ql[32:64] low | bits 2-3, q3 (+64) = ql[0:32] high | bits 4-5, q4 (+96)
// = ql[32:64] high | bits 6-7, each high pair shifted to bits 4-5 by a
// word shift (Y12 = 0x30 bytes).
#define KY6N(l, h, g0, g1, g2, g3, g4, g5, g6, g7, o) \
	VMOVDQU      l(SI), Y1 \
	VMOVDQU      l+32(SI), Y2 \
	VMOVDQU      h(R9), Y8 \
	VPSLLW       $4, Y8, Y10 \
	VPAND        Y12, Y10, Y10 \
	VPAND        Y15, Y1, Y13 \
	VPOR         Y10, Y13, Y13 \
	KYSTORE(Y13, X13, g0, g1, o, KY6) \
	VPSLLW       $2, Y8, Y10 \
	VPAND        Y12, Y10, Y10 \
	VPAND        Y15, Y2, Y13 \
	VPOR         Y10, Y13, Y13 \
	KYSTORE(Y13, X13, g2, g3, o+128, KY6) \
	VPAND        Y12, Y8, Y10 \
	VPSRLW       $4, Y1, Y13 \
	VPAND        Y15, Y13, Y13 \
	VPOR         Y10, Y13, Y13 \
	KYSTORE(Y13, X13, g4, g5, o+256, KY6) \
	VPSRLW       $2, Y8, Y10 \
	VPAND        Y12, Y10, Y10 \
	VPSRLW       $4, Y2, Y13 \
	VPAND        Y15, Y13, Y13 \
	VPOR         Y10, Y13, Y13 \
	KYSTORE(Y13, X13, g6, g7, o+384, KY6)

// func dequantK6Y(qs *byte, qh *byte, sc *float32, dst *float32)
// qs: ql, qh: qh.
TEXT ·dequantK6Y(SB), NOSPLIT, $0-32
	MOVQ         qs+0(FP), SI
	MOVQ         qh+8(FP), R9
	MOVQ         sc+16(FP), DX
	MOVQ         dst+24(FP), DI
	KYSETUP
	MOVL         $0x30303030, AX
	VMOVD        AX, X12
	VPBROADCASTD X12, Y12
	KY6N(0, 0, 0, 4, 8, 12, 16, 20, 24, 28, 0)
	KY6N(64, 32, 32, 36, 40, 44, 48, 52, 56, 60, 512)
	VZEROUPPER
	RET

// Decode kernels on AVX2 machines: each weight block's values widened to
// int32 and converted to float32 in registers and multiplied with x there
// (no dequantised copy in memory), the block's sum then scaled by its d
// (and its min or offset taken from the prep's Σx per 32-value block).
// Σ_b d_b·Σ_i l_i·x_i + m_b·Σ_i x_i is the value DequantRow's gives,
// rounded differently: TestQuantDecodeExact holds them to the exact sum
// as every kernel.

// The nibble mask as a memory operand (Y5XVALS, and the K-quant rows).
DATA y0F<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA y0F<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA y0F<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA y0F<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL y0F<>(SB), RODATA|NOPTR, $32

// The row kernels (Q5_0, Q5_1 rows; Q8_0's, qdotQ80Y, is this loop four
// blocks a step): one row at a time, a block's values (BLOCK: as int32
// into Y1..Y4) dotted with x (BX) by YDOT4 and added with its d into Y7;
// Q5_1's m·Σx (Σx from the prep, DX) and Q5_0's d·(−16·Σx) into X10.
// YDOTX is YDOT4 for the block at off(SI) (d at its start) against x at
// xoff(BX): d·Σ into acc, d left in s (Y5, Y6 scratch).
#define YDOTX(off, xoff, s, acc) \
	VCVTDQ2PS    Y1, Y1 \
	VCVTDQ2PS    Y2, Y2 \
	VCVTDQ2PS    Y3, Y3 \
	VCVTDQ2PS    Y4, Y4 \
	VMULPS       xoff(BX), Y1, Y5 \
	VMULPS       xoff+32(BX), Y2, Y6 \
	VFMADD231PS  xoff+64(BX), Y3, Y5 \
	VFMADD231PS  xoff+96(BX), Y4, Y6 \
	VADDPS       Y6, Y5, Y5 \
	MOVWLZX      off(SI), AX \
	VBROADCASTSS (R15)(AX*4), s \
	VFMADD231PS  s, Y5, acc

#define YDOT4 YDOTX(0, 0, Y0, Y7)

// One Q8_0 block at off(SI) against x at xoff(BX), its d·Σ added into
// acc (Y1..Y6 and AX scratch).
#define Q80BLK(off, xoff, acc) \
	VPMOVSXBD off+2(SI), Y1 \
	VPMOVSXBD off+10(SI), Y2 \
	VPMOVSXBD off+18(SI), Y3 \
	VPMOVSXBD off+26(SI), Y4 \
	YDOTX(off, xoff, Y6, acc)

// Q5_0: l − 16, the offset's d·(−16·Σx) (the prep's) into X10.
#define Y50DOT \
	Y5VALUES(2) \
	YDOT4 \
	VFMADD231SS (DX), X0, X10

#define Y51DOT \
	Y5VALUES(4) \
	YDOT4 \
	MOVWLZX     2(SI), AX \
	VMOVSS      (R15)(AX*4), X0 \
	VFMADD231SS (DX), X0, X10

// The row loop: rows (R12) of nb blocks (size bytes) at SI, out (R13)
// one float a row (Y7's sum and X10's: BLOCK's two accumulators); x (BX) and the prep (DX) advanced xstep and pstep
// bytes a block, PF its prefetches (nb in R9, x R14, the prep R11).
#define YRRUN(row, lp, done, BLOCK, size, xstep, pstep, PF) \
row: \
	TESTQ  R12, R12 \
	JZ     done \
	MOVQ   R9, CX \
	MOVQ   R14, BX \
	MOVQ   R11, DX \
	VXORPS Y7, Y7, Y7 \
	VXORPS X10, X10, X10 \
lp: \
	BLOCK \
	PF \
	ADDQ       $size, SI \
	ADDQ       $xstep, BX \
	ADDQ       $pstep, DX \
	DECQ       CX \
	JNZ        lp \
	VEXTRACTF128 $1, Y7, X0 \
	VADDPS       X0, X7, X7 \
	VHADDPS      X7, X7, X7 \
	VHADDPS      X7, X7, X7 \
	VADDSS       X10, X7, X7 \
	VMOVSS       X7, (R13) \
	ADDQ         $4, R13 \
	DECQ         R12 \
	JMP          row \
done: \
	VZEROUPPER \
	RET

// A block's prefetch pf (R10) ahead; a K-quant super-block's, each of
// its lines.
#define YPF1 \
	PREFETCHT0 (SI)(R10*1)

#define YPF3 \
	PREFETCHT0 (SI)(R10*1) \
	PREFETCHT0 64(SI)(R10*1) \
	PREFETCHT0 128(SI)(R10*1)

#define YPF4 \
	YPF3 \
	PREFETCHT0 192(SI)(R10*1)

// func qdotQ80Y(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32, pf int)
// The Q8_0 row kernel (xs unused): YRRUN's loop, four blocks a step
// (Q80BLK), their sums in four accumulators (Y7..Y10) added at the row's
// end: four short chains of dependent adds instead of one long one. In L1
// it runs as fast as one block a step into one accumulator (the
// instructions bound both; why the chains matter once the blocks come
// from farther away was not pinned down), but from L2 and from memory
// — where decode reads it: the token embeddings of SmolLM2's GGUF files,
// a third of a token's bytes, are Q8_0 — 1.05–1.5× (two threads, 128 MiB
// of copies of a 768×576 matrix, AMD EPYC Zen 3, alternated in one
// process). Two rows' blocks side by side in a step instead streamed
// worse from memory than one row (two streams a thread).
TEXT ·qdotQ80Y(SB), NOSPLIT, $0-72
	YRARGS

y80r:
	TESTQ  R12, R12
	JZ     y80done
	MOVQ   R9, CX
	MOVQ   R14, BX
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10

y80:
	CMPQ       CX, $4
	JLT        y80tail
	Q80BLK(0, 0, Y7)
	Q80BLK(34, 128, Y8)
	Q80BLK(68, 256, Y9)
	Q80BLK(102, 384, Y10)
	PREFETCHT0 (SI)(R10*1)
	PREFETCHT0 64(SI)(R10*1)
	PREFETCHT0 128(SI)(R10*1)
	ADDQ       $136, SI
	ADDQ       $512, BX
	SUBQ       $4, CX
	JMP        y80

y80tail:
	TESTQ      CX, CX
	JZ         y80end
	Q80BLK(0, 0, Y7)
	PREFETCHT0 (SI)(R10*1)
	ADDQ       $34, SI
	ADDQ       $128, BX
	DECQ       CX
	JMP        y80tail

y80end:
	VADDPS       Y8, Y7, Y7
	VADDPS       Y10, Y9, Y9
	VADDPS       Y9, Y7, Y7
	VEXTRACTF128 $1, Y7, X0
	VADDPS       X0, X7, X7
	VHADDPS      X7, X7, X7
	VHADDPS      X7, X7, X7
	VMOVSS       X7, (R13)
	ADDQ         $4, R13
	DECQ         R12
	JMP          y80r

y80done:
	VZEROUPPER
	RET

// func qdotQ50Y(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32, pf int)
// xs holds −16 × the sum of x over each block.
TEXT ·qdotQ50Y(SB), NOSPLIT, $0-72
	YRARGS
	Y5CONST
	YRRUN(y50r, y50, y50done, Y50DOT, 22, 128, 4, YPF1)

// func qdotQ51Y(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32, pf int)
TEXT ·qdotQ51Y(SB), NOSPLIT, $0-72
	YRARGS
	Y5CONST
	YRRUN(y51r, y51, y51done, Y51DOT, 24, 128, 4, YPF1)

// The K-quants' row kernels (super-blocks of 256 values; the prep as the
// AVX-512 kernels': the 8 sub-block sums of x for Q4_K and Q5_K, −32 ×
// the 16 group sums for Q6_K). Per super-block of a row: its scales as
// float32 on the stack, each 8 values widened, converted, multiplied with
// x and added into their sub-block's (group's) sum, each sum added with
// its scale into Y8, then Y7 += d·Y8; Q4_K's and Q5_K's mins
// (dmin·m·Σx) subtracted from Y7 directly.

DATA y3F<>+0(SB)/8, $0x3f3f3f3f3f3f3f3f
DATA y3F<>+8(SB)/8, $0x3f3f3f3f3f3f3f3f
GLOBL y3F<>(SB), RODATA|NOPTR, $16
DATA y03<>+0(SB)/8, $0x0303030303030303
DATA y03<>+8(SB)/8, $0x0303030303030303
GLOBL y03<>(SB), RODATA|NOPTR, $16
DATA yK04<>+0(SB)/8, $0x0000000400000000
DATA yK04<>+8(SB)/8, $0x0000000400000000
GLOBL yK04<>(SB), RODATA|NOPTR, $16

// The Q4_K/Q5_K super-block's 8 sub-block scales as float32 to (SP)
// (6-bit fields of its 12 scale bytes at 4, unpacked as KSCALES does);
// Y7 −= dmin · Σ_k m_k·Σx_k.
#define YKSCALES \
	VMOVDQU      4(SI), X1 \
	VPAND        y3F<>(SB), X1, X2 \
	VPSHUFD      $0xaa, X1, X3 \
	VPSRLVD      yK04<>(SB), X3, X3 \
	VPAND        y0F<>(SB), X3, X3 \
	VPSRLD       $6, X1, X4 \
	VPAND        y03<>(SB), X4, X4 \
	VPSLLD       $4, X4, X4 \
	VPOR         X4, X3, X3 \
	VPUNPCKLDQ   X3, X2, X2 \
	VPMOVZXBD    X2, Y3 \
	VCVTDQ2PS    Y3, Y3 \
	VMOVUPS      Y3, (DI) \
	VPSRLDQ      $8, X2, X2 \
	VPMOVZXBD    X2, Y4 \
	VCVTDQ2PS    Y4, Y4 \
	VMULPS       (DX), Y4, Y4 \
	MOVWLZX      2(SI), AX \
	VBROADCASTSS (R15)(AX*4), Y0 \
	VFNMADD231PS Y0, Y4, Y7

// Values 8v..8v+7 of sub-blocks 2j (low nibbles, into Y5's sum) and
// 2j+1 (high, into Y6's) of the nibbles at qs (FIFTH: Q5_K's fifth bits;
// Y15: 15 per dword).
#define YKVEC(v, j, qs, FIFTH) \
	VPMOVZXBD   (qs+32*j+8*v)(SI), Y1 \
	VPAND       Y15, Y1, Y2 \
	VPSRLD      $4, Y1, Y3 \
	FIFTH(v, j) \
	VCVTDQ2PS   Y2, Y2 \
	VCVTDQ2PS   Y3, Y3 \
	VFMADD231PS (256*j+32*v)(BX), Y2, Y5 \
	VFMADD231PS (256*j+128+32*v)(BX), Y3, Y6

#define YNOFIFTH(v, j)

// Q5_K: bits 2j and 2j+1 of qh's bytes 8v.. (at 16) as 16 into Y2, Y3
// (Y13: 16 per dword).
#define Y5KFIFTH(v, j) \
	VPMOVZXBD (16+8*v)(SI), Y4 \
	VPSRLD    $(2*j), Y4, Y4 \
	VPSLLD    $4, Y4, Y0 \
	VPAND     Y13, Y0, Y0 \
	VPOR      Y0, Y2, Y2 \
	VPSLLD    $3, Y4, Y0 \
	VPAND     Y13, Y0, Y0 \
	VPOR      Y0, Y3, Y3

// Sub-blocks 2j and 2j+1 into Y8 with their scales.
#define YKCHUNK(j, qs, FIFTH) \
	VXORPS       Y5, Y5, Y5 \
	VXORPS       Y6, Y6, Y6 \
	YKVEC(0, j, qs, FIFTH) \
	YKVEC(1, j, qs, FIFTH) \
	YKVEC(2, j, qs, FIFTH) \
	YKVEC(3, j, qs, FIFTH) \
	VBROADCASTSS (8*j)(DI), Y0 \
	VFMADD231PS  Y0, Y5, Y8 \
	VBROADCASTSS (8*j+4)(DI), Y0 \
	VFMADD231PS  Y0, Y6, Y8

// Y7 += d·Y8 (d: the f16 at doff).
#define YKEND(doff) \
	MOVWLZX      doff(SI), AX \
	VBROADCASTSS (R15)(AX*4), Y0 \
	VFMADD231PS  Y0, Y8, Y7

#define YK45ROW(qs, FIFTH) \
	YKSCALES \
	VXORPS Y8, Y8, Y8 \
	YKCHUNK(0, qs, FIFTH) \
	YKCHUNK(1, qs, FIFTH) \
	YKCHUNK(2, qs, FIFTH) \
	YKCHUNK(3, qs, FIFTH) \
	YKEND(0)

#define Y4KROW YK45ROW(16, YNOFIFTH)
#define Y5KROW YK45ROW(48, Y5KFIFTH)

// Q6_K: 8 values in v times x at xoff (floats), into acc with the scale
// at s (floats) on the stack.
#define Y6Q(v, xoff, s, acc) \
	VCVTDQ2PS    v, v \
	VMULPS       (4*(xoff))(BX), v, v \
	VBROADCASTSS (4*(s))(DI), Y0 \
	VFMADD231PS  Y0, v, acc

// Values l = 8p..8p+7 (of 16-value group g = p/2) of the super-block's
// half n and each of its four quarters (ql's low and high nibbles with qh's bit pairs; Y15: 15, Y14:
// 0x30 per dword), as Q6KPART.
#define Y6PART(n, p, g) \
	VPMOVZXBD (64*n+8*p)(SI), Y1 \
	VPMOVZXBD (64*n+32+8*p)(SI), Y2 \
	VPMOVZXBD (128+32*n+8*p)(SI), Y3 \
	VPAND     Y15, Y1, Y4 \
	VPSLLD    $4, Y3, Y5 \
	VPAND     Y14, Y5, Y5 \
	VPOR      Y5, Y4, Y4 \
	Y6Q(Y4, 128*n+8*p, 8*n+g, Y8) \
	VPAND     Y15, Y2, Y4 \
	VPSLLD    $2, Y3, Y5 \
	VPAND     Y14, Y5, Y5 \
	VPOR      Y5, Y4, Y4 \
	Y6Q(Y4, 128*n+32+8*p, 8*n+2+g, Y9) \
	VPSRLD    $4, Y1, Y4 \
	VPAND     Y14, Y3, Y5 \
	VPOR      Y5, Y4, Y4 \
	Y6Q(Y4, 128*n+64+8*p, 8*n+4+g, Y12) \
	VPSRLD    $4, Y2, Y4 \
	VPSRLD    $2, Y3, Y5 \
	VPAND     Y14, Y5, Y5 \
	VPOR      Y5, Y4, Y4 \
	Y6Q(Y4, 128*n+96+8*p, 8*n+6+g, Y13)

// The 16 int8 scales as float32 to (SP); Y8 = scales ⊙ prep (the
// offset's −32·Σx per group).
#define Y6KROW \
	VPMOVSXBD 192(SI), Y1 \
	VPMOVSXBD 200(SI), Y2 \
	VCVTDQ2PS Y1, Y1 \
	VCVTDQ2PS Y2, Y2 \
	VMOVUPS   Y1, (DI) \
	VMOVUPS   Y2, 32(DI) \
	VMULPS    (DX), Y1, Y8 \
	VMULPS    32(DX), Y2, Y9 \
	VXORPS    Y12, Y12, Y12 \
	VXORPS    Y13, Y13, Y13 \
	Y6PART(0, 0, 0) \
	Y6PART(0, 1, 0) \
	Y6PART(0, 2, 1) \
	Y6PART(0, 3, 1) \
	Y6PART(1, 0, 0) \
	Y6PART(1, 1, 0) \
	Y6PART(1, 2, 1) \
	Y6PART(1, 3, 1) \
	VADDPS    Y9, Y8, Y8 \
	VADDPS    Y13, Y12, Y12 \
	VADDPS    Y12, Y8, Y8 \
	YKEND(208)

// func qdotQ4KY(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32, pf int)
TEXT ·qdotQ4KY(SB), NOSPLIT, $64-72
	YKARGS
	YRRUN(y4kr, y4k, y4kdone, Y4KROW, 144, 1024, 32, YPF3)

// func qdotQ5KY(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32, pf int)
TEXT ·qdotQ5KY(SB), NOSPLIT, $64-72
	YKARGS
	YDWORD($16, X13, Y13)
	YRRUN(y5kr, y5k, y5kdone, Y5KROW, 176, 1024, 32, YPF3)

// func qdotQ6KY(nb int, x *float32, xs *float32, w *byte, ldw int, rows int, out *float32, tab *float32, pf int)
TEXT ·qdotQ6KY(SB), NOSPLIT, $64-72
	YKARGS
	YDWORD($0x30, X14, Y14)
	YRRUN(y6kr, y6k, y6kdone, Y6KROW, 210, 1024, 64, YPF4)

// Q5_0x4 and Q5_1x4 (Repack4: per block of four rows, 64 bytes of
// nibbles, dword j of 16-byte chunk c holding row j's bytes 4c..4c+3; the fifth bits as two 64-bit masks, bit p the fifth bit
// of byte p's low (at 64) or high (at 72) nibble; then the rows' scales at
// 80): each nibble byte's fifth bit or-ed in as 16 (VPSHUFB spreading a
// mask dword's byte k/8 to byte k, an AND with bit k%8, a compare), then
// row j's values are dword j of each 128-bit lane, widened by one VPSHUFB
// a vector: values 0..7 of the low nibbles of bytes 0..31, 8..15 of bytes
// 32..63, 16..31 the high nibbles likewise (Y5XVALS' Y8..Y11).
DATA y5Row<>+0(SB)/8, $0x8080800180808000
DATA y5Row<>+8(SB)/8, $0x8080800380808002
DATA y5Row<>+16(SB)/8, $0x8080800180808000
DATA y5Row<>+24(SB)/8, $0x8080800380808002
DATA y5Row<>+32(SB)/8, $0x8080800580808004
DATA y5Row<>+40(SB)/8, $0x8080800780808006
DATA y5Row<>+48(SB)/8, $0x8080800580808004
DATA y5Row<>+56(SB)/8, $0x8080800780808006
DATA y5Row<>+64(SB)/8, $0x8080800980808008
DATA y5Row<>+72(SB)/8, $0x8080800b8080800a
DATA y5Row<>+80(SB)/8, $0x8080800980808008
DATA y5Row<>+88(SB)/8, $0x8080800b8080800a
DATA y5Row<>+96(SB)/8, $0x8080800d8080800c
DATA y5Row<>+104(SB)/8, $0x8080800f8080800e
DATA y5Row<>+112(SB)/8, $0x8080800d8080800c
DATA y5Row<>+120(SB)/8, $0x8080800f8080800e
GLOBL y5Row<>(SB), RODATA|NOPTR, $128
DATA y10<>+0(SB)/8, $0x1010101010101010
DATA y10<>+8(SB)/8, $0x1010101010101010
DATA y10<>+16(SB)/8, $0x1010101010101010
DATA y10<>+24(SB)/8, $0x1010101010101010
GLOBL y10<>(SB), RODATA|NOPTR, $32
DATA y65536<>+0(SB)/8, $0x4780000047800000
DATA y65536<>+8(SB)/8, $0x4780000047800000
DATA y65536<>+16(SB)/8, $0x4780000047800000
DATA y65536<>+24(SB)/8, $0x4780000047800000
GLOBL y65536<>(SB), RODATA|NOPTR, $32
DATA y16d<>+0(SB)/8, $0x0000001000000010
DATA y16d<>+8(SB)/8, $0x0000001000000010
DATA y16d<>+16(SB)/8, $0x0000001000000010
DATA y16d<>+24(SB)/8, $0x0000001000000010
GLOBL y16d<>(SB), RODATA|NOPTR, $32

// The fifth bits of the mask dword at off(R8) or-ed into v's bytes as 16
// (sp, bi, b10: y5Spread, y5Bits and the bytes 0x10, as memory operands
// or registers).
#define Y5XHIGHM(off, v, sp, bi, b10) \
	VPBROADCASTD off(R8), Y12 \
	VPSHUFB      sp, Y12, Y12 \
	VPAND        bi, Y12, Y12 \
	VPCMPEQB     bi, Y12, Y12 \
	VPAND        b10, Y12, Y12 \
	VPOR         Y12, v, v

// The nibbles of the bytes in Y8, Y9 as bytes: Y8, Y9 the low ones, Y10,
// Y11 the high ones (m: the nibble mask, a memory operand or Y15 as
// YVARGS sets it).
#define YNIBSPLIT(m) \
	VPSRLW   $4, Y8, Y10 \
	VPSRLW   $4, Y9, Y11 \
	VPAND    m, Y8, Y8 \
	VPAND    m, Y9, Y9 \
	VPAND    m, Y10, Y10 \
	VPAND    m, Y11, Y11

// The nibbles of the 64 bytes at off(R8) as bytes: Y8 (low nibbles of
// bytes 0..31), Y9 (32..63), Y10, Y11 (the high ones); Y5XVALS: with the
// fifth bits of the masks after them (the Q5 layouts, Q5_Kx4's
// sub-blocks). The constants as memory operands (YXNIBS, Y5XVALS) or in
// registers (YXNIBSR, Y5XVALSR; Y5RCONST: Y6 y5Spread, Y7 y5Bits, Y14 the
// bytes 0x10, and Y15 the nibble mask as YVARGS sets it): the VPMADDUBSW
// decode kernels of the Q5 layouts, which read twenty constants a block
// from memory otherwise.
#define YXNIBSM(off, m) \
	VMOVDQU  off(R8), Y8 \
	VMOVDQU  off+32(R8), Y9 \
	YNIBSPLIT(m)

#define Y5XVALSM(off, m, sp, bi, b10) \
	YXNIBSM(off, m) \
	Y5XHIGHM(off+64, Y8, sp, bi, b10) \
	Y5XHIGHM(off+68, Y9, sp, bi, b10) \
	Y5XHIGHM(off+72, Y10, sp, bi, b10) \
	Y5XHIGHM(off+76, Y11, sp, bi, b10)

#define YXNIBS(off) YXNIBSM(off, y0F<>(SB))
#define YXNIBSR(off) YXNIBSM(off, Y15)
#define Y5XVALS(off) Y5XVALSM(off, y0F<>(SB), y5Spread<>(SB), y5Bits<>(SB), y10<>(SB))
#define Y5XVALSR(off) Y5XVALSM(off, Y15, Y6, Y7, Y14)

#define Y5RCONST \
	Y5RCONST67 \
	VMOVDQU y10<>(SB), Y14

// Y5RCONST's Y6 and Y7 (again in Q5_Kx4's super-blocks, after YKXSCALES
// has used them).
#define Y5RCONST67 \
	VMOVDQU y5Spread<>(SB), Y6 \
	VMOVDQU y5Bits<>(SB), Y7

// Dequantisation of the four-row layouts whose values YXNIBS, Y5XVALS
// or Y6XVALS leave in Y8..Y11: row j's 32 values to BX (VLO, VHI: the
// float32 of the int32 in Y12, values 0..15 and 16..31; Y5XDQROW: the
// same for both, the row's d in Y4 and m in Y5).
#define YXDQROW(j, VLO, VHI) \
	VPSHUFB y5Row<>+32*j(SB), Y8, Y12 \
	VLO \
	VMOVUPS Y12, (BX) \
	VPSHUFB y5Row<>+32*j(SB), Y9, Y12 \
	VLO \
	VMOVUPS Y12, 32(BX) \
	VPSHUFB y5Row<>+32*j(SB), Y10, Y12 \
	VHI \
	VMOVUPS Y12, 64(BX) \
	VPSHUFB y5Row<>+32*j(SB), Y11, Y12 \
	VHI \
	VMOVUPS Y12, 96(BX)

#define Y5XDQROW(j, VAL) YXDQROW(j, VAL, VAL)

// Q5_0: float32(l − 16)·d.
#define Y50XVAL \
	VPSUBD    y16d<>(SB), Y12, Y12 \
	VCVTDQ2PS Y12, Y12 \
	VMULPS    Y4, Y12, Y12

// Q5_1: float32(l·d) + m.
#define Y51XVAL \
	VCVTDQ2PS Y12, Y12 \
	VMULPS    Y4, Y12, Y12 \
	VADDPS    Y5, Y12, Y12

// Row j's d (and m) from the f16 at doff (moff) into Y4 (Y5).
#define Y5XD(doff) \
	MOVWLZX      doff(R8), AX \
	VBROADCASTSS (R15)(AX*4), Y4

#define Y5XDM(doff) \
	Y5XD(doff) \
	MOVWLZX      doff+2(R8), AX \
	VBROADCASTSS (R15)(AX*4), Y5

#define Y50XDQ \
	Y5XVALS(0) \
	Y5XD(80) \
	MOVQ DI, BX \
	Y5XDQROW(0, Y50XVAL) \
	Y5XD(82) \
	LEAQ (DI)(R12*1), BX \
	Y5XDQROW(1, Y50XVAL) \
	Y5XD(84) \
	LEAQ (DI)(R12*2), BX \
	Y5XDQROW(2, Y50XVAL) \
	Y5XD(86) \
	LEAQ (DI)(R13*1), BX \
	Y5XDQROW(3, Y50XVAL)

#define Y51XDQ \
	Y5XVALS(0) \
	Y5XDM(80) \
	MOVQ DI, BX \
	Y5XDQROW(0, Y51XVAL) \
	Y5XDM(84) \
	LEAQ (DI)(R12*1), BX \
	Y5XDQROW(1, Y51XVAL) \
	Y5XDM(88) \
	LEAQ (DI)(R12*2), BX \
	Y5XDQROW(2, Y51XVAL) \
	Y5XDM(92) \
	LEAQ (DI)(R13*1), BX \
	Y5XDQROW(3, Y51XVAL)

// func dequantQ50YX(nb int, dst *float32, ldd int, src *byte, tab *float32)
TEXT ·dequantQ50YX(SB), NOSPLIT, $0-40
	YGARGS
	DQLOOP(dy50x, dy50xdone, Y50XDQ, R8, $88)

// func dequantQ51YX(nb int, dst *float32, ldd int, src *byte, tab *float32)
TEXT ·dequantQ51YX(SB), NOSPLIT, $0-40
	YGARGS
	DQLOOP(dy51x, dy51xdone, Y51XDQ, R8, $96)

// Integer decode kernels of the four-row layouts Q4_1x4, Q4_0x4, Q5_0x4
// and Q5_1x4 (qdot*YV): quantvnni_amd64.s's algorithm with VPMADDUBSW
// and VPMADDWD, which every AVX2 CPU has, in place of VPDPBUSD. x is
// prepared as there (limbsPrepY, below, writes limbsPrep's layout: each
// 32-value block as v·s, v an integer of 23 bits split into the signed
// bytes A, B, C, v = A·2^16 + B·2^8 + C, after x is scaled exactly by
// the power of two that brings its largest |x| near 1), so what is
// rounded is x, to 2^-24 of its block's largest value, and the products
// stay within float32 summation noise of the exact ones
// (TestQuantDecodeExact). The float kernels these replaced spent a
// conversion and a multiply-add per eight values of each row; here a
// limb of the four rows' 128 values is four VPMADDUBSW, some word adds
// and VPMADDWD (or four VPDPBUSD: qdot*YN, with AVX-VNNI): 1.7x (2.1x)
// their rate from L2 (Q4_1x4, EPYC).
//
// The block's nibbles, transposed within each 128-bit lane (Q4: the
// VNNI kernels' shuffle; Q5: stored so), are two vectors of low values
// (lanes c = 0, 1 and 2, 3: row j's values 4c..4c+3 in dword j) in Y8,
// Y9 and two of high ones (16 + 4c..) in Y10, Y11, each against the
// limb's 32 bytes at the same place in the prep. A VPMADDUBSW word l·A +
// l'·A' is at most 2·31·128 = 7936; four of them are added as words
// without saturating (31744), and after VPMADDWD a dword holds 16
// products of row j. With four-bit values |Σ l·v| ≤ 16·15·(127·2^16 +
// 128·257) < 2^31, so the limbs' combination (Σ l·A)·2^16 + (Σ l·B)·2^8 +
// Σ l·C is exact in int32; with five-bit ones it is not, and YV5SUMS
// joins Σ l·A and the rest, each exact as float32, by one FMA (AVX-VNNI's
// YN5SUMS keeps the low and high values apart, 8 a dword, exact in int32,
// as before). A lane's dword j and the other lane's are row j's halves:
// added at the end.

// One limb's Σ l·v over two of the block's value vectors (v0, v1: their
// limb bytes at off(SI), off+32(SI)) into acc as words (t scratch).
#define YVPAIR(off, v0, v1, acc, t) \
	VPMADDUBSW off(SI), v0, acc \
	VPMADDUBSW off+32(SI), v1, t \
	VPADDW     t, acc, acc

// The limbs' sums (SUM(off, acc, x): the limb at off's, dwords into acc;
// x is SUM's scratch or acc's number) in a, b, c, combined into a as
// float32.
#define YVLIMBS(SUM, a, xa, b, xb, c, xc) \
	SUM(0, a, xa) \
	SUM(128, b, xb) \
	SUM(256, c, xc) \
	VPSLLD     $8, a, a \
	VPADDD     b, a, a \
	VPSLLD     $8, a, a \
	VPADDD     c, a, a \
	VCVTDQ2PS  a, a

// Four-bit values: the four vectors' words added (16 values a dword).
#define YV4SUM(off, acc, t) \
	YVPAIR(off, Y8, Y9, acc, t) \
	YVPAIR(off+64, Y10, Y11, t, Y12) \
	VPADDW     t, acc, acc \
	VPMADDWD   Y13, acc, acc


// With AVX-VNNI (no AVX-512: Intel's client cores since 2021), the same
// sums by VPDPBUSD in its VEX form, which Go's assembler does not encode
// (it writes the EVEX form, an AVX-512 instruction): VEXDP(acc, src,
// disp) is VPDPBUSD disp(SI), Y<src>, Y<acc> (registers by number, disp
// as a 32-bit displacement).
#define VEXDP(acc, src, disp) \
	BYTE $0xC4; BYTE $(0xE2 ^ ((acc>>3)<<7)); BYTE $(((15-src)<<3) | 5); BYTE $0x50; BYTE $(0x86 | ((acc&7)<<3)); LONG $disp

#define YN4SUM(off, acc, n) \
	VPXOR      acc, acc, acc \
	VEXDP(n, 8, off) \
	VEXDP(n, 9, off+32) \
	VEXDP(n, 10, off+64) \
	VEXDP(n, 11, off+96)

#define YN5LO(off, acc, n) \
	VPXOR      acc, acc, acc \
	VEXDP(n, 8, off) \
	VEXDP(n, 9, off+32)

#define YN5HI(off, acc, n) \
	VPXOR      acc, acc, acc \
	VEXDP(n, 10, off+64) \
	VEXDP(n, 11, off+96)

// The four rows' Q4 block at R8 as bytes in Y8..Y11.
#define YV4VALS \
	VMOVDQU    (R8), Y8 \
	VMOVDQU    32(R8), Y9 \
	VPSHUFB    Y14, Y8, Y8 \
	VPSHUFB    Y14, Y9, Y9 \
	YNIBSPLIT(Y15)

// Σ l·v of the block's values in Y8..Y11 against the limbs at SI, per
// (lane, dword j = row j), as float32 into Y2: four-bit values (YV4SUMS,
// YN4SUMS: 16 a dword) and five-bit ones (YV5SUMS: 16 a dword, joined
// in float32; YN5SUMS: the halves apart).
#define YV4SUMS \
	YVLIMBS(YV4SUM, Y2, Y5, Y3, Y5, Y4, Y5)

#define YN4SUMS \
	YVLIMBS(YN4SUM, Y2, 2, Y3, 3, Y4, 4)

// Five-bit values as four-bit ones (16 a dword: the words' sums stay
// below 4·7936), but the int32 combination of the limbs would overflow
// (16·31·(127·2^16 + 128·257) > 2^31): Σ l·A (|·| ≤ 16·31·128) and
// (Σ l·B)·2^8 + Σ l·C (< 2^24) are each exact as float32, and one FMA
// joins them, Σ l·A·2^16 + the rest, rounding the exact sum once (six
// instructions fewer a block than the halves apart, YN5SUMS).
#define YV5SUMS \
	YV4SUM(0, Y2, Y5) \
	YV4SUM(128, Y3, Y5) \
	YV4SUM(256, Y4, Y5) \
	YVJOIN(Y2, Y3, Y4)

// The limbs' sums a = Σ l·A, b = Σ l·B, c = Σ l·C (dwords) joined in
// float32 as a·2^16 + (b·2^8 + c), into a: exact as long as |a| and
// |b·2^8 + c| stay below 2^24, rounded once by the FMA.
#define YVJOIN(a, b, c) \
	VPSLLD      $8, b, b \
	VPADDD      c, b, b \
	VCVTDQ2PS   a, a \
	VCVTDQ2PS   b, b \
	VFMADD132PS y65536<>(SB), b, a

#define YN5SUMS \
	YVLIMBS(YN5LO, Y2, 2, Y3, 3, Y4, 4) \
	YVLIMBS(YN5HI, Y6, 6, Y3, 3, Y4, 4) \
	VADDPS     Y6, Y2, Y2

// The four rows' block at R8 summed so (Q4: transposed by YV4VALS; Q5:
// stored transposed).
#define YV4BLOCK \
	YV4VALS \
	YV4SUMS

#define YN4BLOCK \
	YV4VALS \
	YN4SUMS

#define YV5BLOCK \
	PREFETCHT0 64(R8)(R10*1) \
	Y5XVALSR(0) \
	YV5SUMS

#define YN5BLOCK \
	PREFETCHT0 64(R8)(R10*1) \
	Y5XVALS(0) \
	YN5SUMS

// The rows' block scales: Q4_1 and Q5_1 (scale pairs (d, m) at off(R8)):
// Y0 += d·s·Σ l·v per lane, Y1 += m·Σx in the odd lanes.
#define YVDMSCALE(off) \
	VCVTPH2PS   off(R8), Y3 \
	VMULPS      (DI), Y3, Y3 \
	VMOVDQU     ·vnniD(SB), Y4 \
	VPERMPS     Y3, Y4, Y4 \
	VADDPS      Y3, Y1, Y1 \
	VFMADD231PS Y4, Y2, Y0

// Q4_0 and Q5_0 (d at off(R8)): Y0 += d·s·Σ l·v, X1 += d·Σx.
#define YVDSCALE(off) \
	VCVTPH2PS    off(R8), X3 \
	VBROADCASTSS 4(DI), X4 \
	VFMADD231PS  X4, X3, X1 \
	VBROADCASTSS (DI), X4 \
	VMULPS       X4, X3, X3 \
	VINSERTF128  $1, X3, Y3, Y3 \
	VFMADD231PS  Y3, Y2, Y0

// Q4_1's and Q5_1's end: Y0's two lanes plus the odd lanes of Y1, times
// 2^e, to X0.
#define YVDMEND \
	VMOVDQU       ·vnniD+64(SB), Y2 \
	VPERMPS       Y1, Y2, Y2 \
	VEXTRACTF128  $1, Y0, X3 \
	VADDPS        X3, X0, X0 \
	VADDPS        X2, X0, X0 \
	VBROADCASTSS  (R15), X3 \
	VMULPS        X3, X0, X0

// Q4_0's and Q5_0's: Y0's two lanes plus off·X1 (off: the float32 bits
// of the values' offset, −8 or −16), times 2^e, to X0.
#define YVDEND(off) \
	YDWORD(off, X2, X2) \
	VEXTRACTF128  $1, Y0, X3 \
	VADDPS        X3, X0, X0 \
	VFMADD231PS   X2, X1, X0 \
	VBROADCASTSS  (R15), X3 \
	VMULPS        X3, X0, X0

// Each format's loop with the block sums of BLOCK (YV: VPMADDUBSW, YN:
// AVX-VNNI): its scales' place and kind, its offset, its block size
// (labels are the function's own).
#define YVQ41(BLOCK) LIMBRUN(grp, lp, done, BLOCK, YVDMSCALE(64), YVDMEND, 80, 384)
#define YVQ40(BLOCK) LIMBRUN(grp, lp, done, BLOCK, YVDSCALE(64), YVDEND($0xc1000000), 72, 384)
#define YVQ51(BLOCK) LIMBRUN(grp, lp, done, BLOCK, YVDMSCALE(80), YVDMEND, 96, 384)
#define YVQ50(BLOCK) LIMBRUN(grp, lp, done, BLOCK, YVDSCALE(80), YVDEND($0xc1800000), 88, 384)

// func qdotQ41YV(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)
TEXT ·qdotQ41YV(SB), NOSPLIT, $0-56
	YVARGS
	YVQ41(YV4BLOCK)

// func qdotQ40YV(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)
TEXT ·qdotQ40YV(SB), NOSPLIT, $0-56
	YVARGS
	YVQ40(YV4BLOCK)

// func qdotQ51YV(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)
TEXT ·qdotQ51YV(SB), NOSPLIT, $0-56
	YVARGS
	Y5RCONST
	YVQ51(YV5BLOCK)

// func qdotQ50YV(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)
TEXT ·qdotQ50YV(SB), NOSPLIT, $0-56
	YVARGS
	Y5RCONST
	YVQ50(YV5BLOCK)

// func qdotQ41YN(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)
TEXT ·qdotQ41YN(SB), NOSPLIT, $0-56
	YVARGS
	YVQ41(YN4BLOCK)

// func qdotQ40YN(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)
TEXT ·qdotQ40YN(SB), NOSPLIT, $0-56
	YVARGS
	YVQ40(YN4BLOCK)

// func qdotQ51YN(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)
TEXT ·qdotQ51YN(SB), NOSPLIT, $0-56
	YVARGS
	YVQ51(YN5BLOCK)

// func qdotQ50YN(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)
TEXT ·qdotQ50YN(SB), NOSPLIT, $0-56
	YVARGS
	YVQ50(YN5BLOCK)

// Q4_Kx4 and Q5_Kx4 (repack.go: per 256-value super-block eight
// sub-blocks in Q5_0x4's order, then the scales), as qdotQ4KV and
// qdotQ5KV do: per super-block the four rows' d·scale and dmin·min of
// its eight sub-blocks (YKXSCALES, into the frame: d·scale of row j,
// sub-block k at 16k + 4j, dmin·min 128 after it, each as DequantRow
// rounds it), then each sub-block's sums scaled into Y0 and its mins'
// part into X1: the value d·scale·l − dmin·min (the end subtracts X1).

// VPAND mask: 3 per dword (the scales' high bits).
DATA yK3<>+0(SB)/8, $0x0000000300000003
DATA yK3<>+8(SB)/8, $0x0000000300000003
DATA yK3<>+16(SB)/8, $0x0000000300000003
DATA yK3<>+24(SB)/8, $0x0000000300000003
GLOBL yK3<>(SB), RODATA|NOPTR, $32

// The 6-bit values of the entries e = 4k + j in [8q, 8q+8) (low bits
// the bytes at lo(R8), the scales' in their low nibble, the mins' in the
// high; the high bits two at 2·(e mod 16) of the dwords at sc(R8), m(R8):
// VPSRLVD counts ·vnniK2 + cnt), times the rows' d (Y9) and dmin (Y10),
// into the frame at st and 128 + st (Y15: 0x0f bytes; Y6..Y8 scratch).
#define YKXSCQ(lo, sc, m, cnt, st) \
	VPMOVZXBD    lo(R8), Y6 \
	VPAND        Y15, Y6, Y7 \
	VPSRLD       $4, Y6, Y6 \
	VPBROADCASTD sc(R8), Y8 \
	VPSRLVD      ·vnniK2+cnt(SB), Y8, Y8 \
	VPAND        yK3<>(SB), Y8, Y8 \
	VPSLLD       $4, Y8, Y8 \
	VPOR         Y8, Y7, Y7 \
	VPBROADCASTD m(R8), Y8 \
	VPSRLVD      ·vnniK2+cnt(SB), Y8, Y8 \
	VPAND        yK3<>(SB), Y8, Y8 \
	VPSLLD       $4, Y8, Y8 \
	VPOR         Y8, Y6, Y6 \
	VCVTDQ2PS    Y7, Y7 \
	VCVTDQ2PS    Y6, Y6 \
	VMULPS       Y9, Y7, Y7 \
	VMULPS       Y10, Y6, Y6 \
	VMOVUPS      Y7, st(SP) \
	VMOVUPS      Y6, 128+st(SP)

// The super-block's scales at at(R8) into the frame.
#define YKXSCALES(at) \
	VCVTPH2PS    at+48(R8), Y6 \
	VMOVDQU      ·vnniD(SB), Y7 \
	VPERMPS      Y6, Y7, Y9 \
	VMOVDQU      ·vnniD+64(SB), Y7 \
	VPERMPS      Y6, Y7, Y10 \
	YKXSCQ(at, at+32, at+40, 0, 0) \
	YKXSCQ(at+8, at+32, at+40, 32, 32) \
	YKXSCQ(at+16, at+36, at+44, 0, 64) \
	YKXSCQ(at+24, at+36, at+44, 32, 96)

// Sub-block k at off(R8) (VALS: its values into Y8..Y11, SUMS: their
// sums into Y2): Y0 += d·scale·s·Σ l·v, X1 += dmin·min·Σx; the limbs
// (SI) and scales (DI) of the next 32-value block.
#define YKXSUB(off, k, VALS, SUMS) \
	PREFETCHT0     off(R8)(R10*1) \
	VALS(off) \
	SUMS \
	VBROADCASTF128 16*k(SP), Y3 \
	VBROADCASTSS   (DI), Y4 \
	VMULPS         Y4, Y3, Y3 \
	VFMADD231PS    Y3, Y2, Y0 \
	VMOVUPS        128+16*k(SP), X3 \
	VBROADCASTSS   4(DI), X4 \
	VFMADD231PS    X4, X3, X1 \
	ADDQ           $384, SI \
	ADDQ           $32, DI

// Q5_Kx4's sub-block values: the fifth bits' second line prefetched too.
#define Y5KVALS(off) \
	PREFETCHT0 off+64(R8)(R10*1) \
	Y5XVALS(off)

#define Y5KVALSR(off) \
	PREFETCHT0 off+64(R8)(R10*1) \
	Y5XVALSR(off)

// A super-block of eight sub-blocks of SZ bytes, their scales at SC:
// Q4_Kx4 (64, 512; values YXNIBS or YXNIBSR) and Q5_Kx4 (80, 640;
// Y5KVALS or Y5KVALSR); AFTER follows the scales (KYNONE, or Y5RCONST67
// where YKXSCALES took Y5XVALSR's registers).
#define YKSB(SC, SZ, VALS, SUMS, AFTER) \
	PREFETCHT0 SC(R8)(R10*1) \
	YKXSCALES(SC) \
	AFTER \
	YKXSUB(0, 0, VALS, SUMS) \
	YKXSUB(SZ, 1, VALS, SUMS) \
	YKXSUB(2*SZ, 2, VALS, SUMS) \
	YKXSUB(3*SZ, 3, VALS, SUMS) \
	YKXSUB(4*SZ, 4, VALS, SUMS) \
	YKXSUB(5*SZ, 5, VALS, SUMS) \
	YKXSUB(6*SZ, 6, VALS, SUMS) \
	YKXSUB(7*SZ, 7, VALS, SUMS)

// func qdotQ4KYV(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)
// nb: 32-value blocks (eight a super-block).
TEXT ·qdotQ4KYV(SB), NOSPLIT, $256-56
	YVARGS
	KLIMBRUN(grp, lp, done, YKSB(512, 64, YXNIBSR, YV4SUMS, KYNONE), $576, YVDEND($0xbf800000))

// func qdotQ5KYV(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)
TEXT ·qdotQ5KYV(SB), NOSPLIT, $256-56
	YVARGS
	Y5RCONST
	KLIMBRUN(grp, lp, done, YKSB(640, 80, Y5KVALSR, YV5SUMS, Y5RCONST67), $704, YVDEND($0xbf800000))

// func qdotQ4KYN(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)
TEXT ·qdotQ4KYN(SB), NOSPLIT, $256-56
	YVARGS
	KLIMBRUN(grp, lp, done, YKSB(512, 64, YXNIBS, YN4SUMS, KYNONE), $576, YVDEND($0xbf800000))

// func qdotQ5KYN(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)
TEXT ·qdotQ5KYN(SB), NOSPLIT, $256-56
	YVARGS
	KLIMBRUN(grp, lp, done, YKSB(640, 80, Y5KVALS, YN5SUMS, KYNONE), $704, YVDEND($0xbf800000))

// Their group dequantisers (prefill, training): each sub-block's values
// as DequantRow computes them, float32(d·scale)·l − float32(dmin·min),
// row j's to dst + j·ldd (R12 = ldd, R13 = 3·ldd).
#define YKXVAL \
	VCVTDQ2PS Y12, Y12 \
	VMULPS    Y4, Y12, Y12 \
	VSUBPS    Y5, Y12, Y12

#define YKXDQROW(k, j, dst) \
	VBROADCASTSS 16*k+4*j(SP), Y4 \
	VBROADCASTSS 128+16*k+4*j(SP), Y5 \
	LEAQ         dst, BX \
	Y5XDQROW(j, YKXVAL)

// A sub-block's values (VALS) to the four rows (ROW(k, j, dst): row j's).
#define YXDQSUB(off, k, VALS, ROW) \
	VALS(off) \
	ROW(k, 0, (DI)) \
	ROW(k, 1, (DI)(R12*1)) \
	ROW(k, 2, (DI)(R12*2)) \
	ROW(k, 3, (DI)(R13*1)) \
	ADDQ $128, DI

#define YKXDQSUB(off, k, VALS) YXDQSUB(off, k, VALS, YKXDQROW)

#define YK4DQ \
	YKXSCALES(512) \
	YKXDQSUB(0, 0, YXNIBS) \
	YKXDQSUB(64, 1, YXNIBS) \
	YKXDQSUB(128, 2, YXNIBS) \
	YKXDQSUB(192, 3, YXNIBS) \
	YKXDQSUB(256, 4, YXNIBS) \
	YKXDQSUB(320, 5, YXNIBS) \
	YKXDQSUB(384, 6, YXNIBS) \
	YKXDQSUB(448, 7, YXNIBS)

#define YK5DQ \
	YKXSCALES(640) \
	YKXDQSUB(0, 0, Y5XVALS) \
	YKXDQSUB(80, 1, Y5XVALS) \
	YKXDQSUB(160, 2, Y5XVALS) \
	YKXDQSUB(240, 3, Y5XVALS) \
	YKXDQSUB(320, 4, Y5XVALS) \
	YKXDQSUB(400, 5, Y5XVALS) \
	YKXDQSUB(480, 6, Y5XVALS) \
	YKXDQSUB(560, 7, Y5XVALS)

// func dequantQ4KYX(nb int, dst *float32, ldd int, src *byte, tab *float32)
TEXT ·dequantQ4KYX(SB), NOSPLIT, $256-40
	YGARGS
	YDWORD($0x0f0f0f0f, X15, Y15)
	DQKRUN(lp, done, YK4DQ, $576)

// func dequantQ5KYX(nb int, dst *float32, ldd int, src *byte, tab *float32)
TEXT ·dequantQ5KYX(SB), NOSPLIT, $256-40
	YGARGS
	YDWORD($0x0f0f0f0f, X15, Y15)
	DQKRUN(lp, done, YK5DQ, $704)

// Q6_Kx4 (repack.go, q6kx4), as qdotQ6KV does: per super-block the four
// rows' d·scale of its sixteen 16-value groups (Y6KYSCALES, into the
// frame: group g, row j at 16g + 4j, each as DequantRow rounds it); per
// sub-block its six-bit values q (0..63, the value plus 32) as bytes in
// Y8..Y11 (Y6XVALS: the nibbles and, from the 32 bytes after them, the
// high two bits, each by one word shift and the mask 0x30), values 0..15
// (Y8, Y9) one group, 16..31 (Y10, Y11) the other; each group's sums its
// own (a group's scale is its own), two VPMADDUBSW a limb: a word is at
// most 2·2·63·128 = 32256, a dword after VPMADDWD 8 products of row j,
// and the limbs joined in float32 by YVJOIN (|Σ q·A| ≤ 8·63·128 and
// |(Σ q·B)·2^8 + Σ q·C| ≤ 8·63·128·257 < 2^24: exact before the FMA's
// one rounding). Y0 += d·scale·s·Σ q·v, X1 += d·scale·Σx of the group
// (the prep's half sums, q6vPrepY); the end subtracts 32·X1. Where a
// plain Q6_K row took ~120 instructions per 32 values of four rows
// (qdotQ6KY, widening every value to float32), this takes ~70.

// The Q6_Kx4 sub-block at off(R8)'s values as bytes 0..63 in Y8..Y11 (Y15:
// 0x0f bytes, Y14: 0x30 bytes; Y2, Y12 scratch).
#define Y6XVALS(off) \
	YXNIBSM(off, Y15) \
	VMOVDQU  off+64(R8), Y12 \
	VPSLLW   $4, Y12, Y2 \
	VPAND    Y14, Y2, Y2 \
	VPOR     Y2, Y8, Y8 \
	VPSLLW   $2, Y12, Y2 \
	VPAND    Y14, Y2, Y2 \
	VPOR     Y2, Y9, Y9 \
	VPAND    Y14, Y12, Y2 \
	VPOR     Y2, Y10, Y10 \
	VPSRLW   $2, Y12, Y2 \
	VPAND    Y14, Y2, Y2 \
	VPOR     Y2, Y11, Y11

// One group's Σ q·v (its values v0, v1; limbs at off(SI), A, B and C 128
// apart) as float32 into a (b, c, t scratch).
#define Y6GROUP(off, v0, v1, a, b, c, t) \
	YVPAIR(off, v0, v1, a, t) \
	VPMADDWD    Y13, a, a \
	YVPAIR(off+128, v0, v1, b, t) \
	VPMADDWD    Y13, b, b \
	YVPAIR(off+256, v0, v1, c, t) \
	VPMADDWD    Y13, c, c \
	YVJOIN(a, b, c)

// The super-block's d·scale of its groups into the frame (Y6, Y7
// scratch).
#define Y6KYSC(i) \
	VPMOVSXBD 768+8*i(R8), Y6 \
	VCVTDQ2PS Y6, Y6 \
	VMULPS    Y7, Y6, Y6 \
	VMOVUPS   Y6, 32*i(SP)

#define Y6KYSCALES \
	VCVTPH2PS   832(R8), X7 \
	VINSERTF128 $1, X7, Y7, Y7 \
	Y6KYSC(0) \
	Y6KYSC(1) \
	Y6KYSC(2) \
	Y6KYSC(3) \
	Y6KYSC(4) \
	Y6KYSC(5) \
	Y6KYSC(6) \
	Y6KYSC(7)

// Sub-block k at off(R8), against the limbs (SI) and scales (DI) of the
// next 32-value block of x.
#define Y6KYSUB(off, k) \
	PREFETCHT0     off(R8)(R10*1) \
	PREFETCHT0     off+64(R8)(R10*1) \
	Y6XVALS(off) \
	Y6GROUP(0, Y8, Y9, Y2, Y3, Y4, Y5) \
	Y6GROUP(64, Y10, Y11, Y3, Y4, Y5, Y6) \
	VBROADCASTF128 32*k(SP), Y4 \
	VMULPS         Y4, Y2, Y2 \
	VBROADCASTF128 32*k+16(SP), Y5 \
	VFMADD231PS    Y5, Y3, Y2 \
	VBROADCASTSS   (DI), Y6 \
	VFMADD231PS    Y6, Y2, Y0 \
	VBROADCASTSS   4(DI), X6 \
	VFMADD231PS    32*k(SP), X6, X1 \
	VBROADCASTSS   8(DI), X6 \
	VFMADD231PS    32*k+16(SP), X6, X1 \
	ADDQ           $384, SI \
	ADDQ           $32, DI

#define Y6KYSB \
	PREFETCHT0 768(R8)(R10*1) \
	Y6KYSCALES \
	Y6KYSUB(0, 0) \
	Y6KYSUB(96, 1) \
	Y6KYSUB(192, 2) \
	Y6KYSUB(288, 3) \
	Y6KYSUB(384, 4) \
	Y6KYSUB(480, 5) \
	Y6KYSUB(576, 6) \
	Y6KYSUB(672, 7)

// func qdotQ6KYV(nb int, limbs *byte, sc *float32, w *byte, groups int, out *float32, pf int)
// nb: 32-value blocks (eight a super-block); sc as q6vPrepY writes it.
TEXT ·qdotQ6KYV(SB), NOSPLIT, $256-56
	YVARGS
	YDWORD($0x30303030, X14, Y14)
	KLIMBRUN(grp, lp, done, Y6KYSB, $840, YVDEND($0xc2000000))

// Its group dequantiser: each value as DequantRow computes it,
// float32(d·scale)·float32(q − 32) (Y13: 32 per dword).
#define Y6XVAL(s) \
	VPSUBD    Y13, Y12, Y12 \
	VCVTDQ2PS Y12, Y12 \
	VMULPS    s, Y12, Y12

#define Y6XVALLO Y6XVAL(Y4)
#define Y6XVALHI Y6XVAL(Y5)

#define Y6KDQROW(k, j, dst) \
	VBROADCASTSS 32*k+4*j(SP), Y4 \
	VBROADCASTSS 32*k+16+4*j(SP), Y5 \
	LEAQ         dst, BX \
	YXDQROW(j, Y6XVALLO, Y6XVALHI)

#define Y6KDQSUB(off, k) YXDQSUB(off, k, Y6XVALS, Y6KDQROW)

#define Y6KDQ \
	Y6KYSCALES \
	Y6KDQSUB(0, 0) \
	Y6KDQSUB(96, 1) \
	Y6KDQSUB(192, 2) \
	Y6KDQSUB(288, 3) \
	Y6KDQSUB(384, 4) \
	Y6KDQSUB(480, 5) \
	Y6KDQSUB(576, 6) \
	Y6KDQSUB(672, 7)

// func dequantQ6KYX(nb int, dst *float32, ldd int, src *byte, tab *float32)
TEXT ·dequantQ6KYX(SB), NOSPLIT, $256-40
	YGARGS
	YDWORD($0x0f0f0f0f, X15, Y15)
	YDWORD($0x30303030, X14, Y14)
	YDWORD($32, X13, Y13)
	DQKRUN(lp, done, Y6KDQ, $840)

// VPERMD indices replicating limbsPrepY's packed dwords: the packs leave
// the eight 4-value groups g0..g7 of a block in the order g0 g2 g4 g6 g1
// g3 g5 g7; the prep's lane c of the low (high) values holds g_c
// (g_4+c) in each of its four dwords.
DATA yvRep<>+0(SB)/8, $0
DATA yvRep<>+8(SB)/8, $0
DATA yvRep<>+16(SB)/8, $0x0000000400000004
DATA yvRep<>+24(SB)/8, $0x0000000400000004
DATA yvRep<>+32(SB)/8, $0x0000000100000001
DATA yvRep<>+40(SB)/8, $0x0000000100000001
DATA yvRep<>+48(SB)/8, $0x0000000500000005
DATA yvRep<>+56(SB)/8, $0x0000000500000005
DATA yvRep<>+64(SB)/8, $0x0000000200000002
DATA yvRep<>+72(SB)/8, $0x0000000200000002
DATA yvRep<>+80(SB)/8, $0x0000000600000006
DATA yvRep<>+88(SB)/8, $0x0000000600000006
DATA yvRep<>+96(SB)/8, $0x0000000300000003
DATA yvRep<>+104(SB)/8, $0x0000000300000003
DATA yvRep<>+112(SB)/8, $0x0000000700000007
DATA yvRep<>+120(SB)/8, $0x0000000700000007
GLOBL yvRep<>(SB), RODATA|NOPTR, $128

// The horizontal op (VADDPS, VMAXPS) of y into every lane of x (its
// xmm; xt scratch).
#define YVHREDUCE(op, y, x, xt) \
	VEXTRACTF128 $1, y, xt \
	op           xt, x, x \
	VPERMILPS    $0x4e, x, xt \
	op           xt, x, x \
	VPERMILPS    $0xb1, x, xt \
	op           xt, x, x

// One limb of the integer v: its signed low byte c = ((v + 128) & 255)
// − 128 (Y12 = 128s, Y13 = 255s), v = (v − c) >> 8.
#define YVLIMB1(v, c) \
	VPADDD Y12, v, c \
	VPAND  Y13, c, c \
	VPSUBD Y12, c, c \
	VPSUBD c, v, v \
	VPSRAD $8, v, v

// The bytes of the 32 integers in a, b, c, d (values 0..7, .., 24..31)
// stored at off(DI) as the kernels read them: the low values' lanes 0..3
// (64 bytes), then the high ones' (Y8..Y11: yvRep).
#define YVSTORE(a, b, c, d, off) \
	VPACKSSDW b, a, a \
	VPACKSSDW d, c, c \
	VPACKSSWB c, a, a \
	VPERMD    a, Y8, b \
	VMOVDQU   b, off(DI) \
	VPERMD    a, Y9, b \
	VMOVDQU   b, off+32(DI) \
	VPERMD    a, Y10, b \
	VMOVDQU   b, off+64(DI) \
	VPERMD    a, Y11, b \
	VMOVDQU   b, off+96(DI)

// The low limb of the block's integers in Y0..Y3, stored at off(DI).
#define YVLIMB(off) \
	YVLIMB1(Y0, Y4) \
	YVLIMB1(Y1, Y5) \
	YVLIMB1(Y2, Y6) \
	YVLIMB1(Y3, Y7) \
	YVSTORE(Y4, Y5, Y6, Y7, off)

// func limbsPrepY(nb int, x *float32, limbs *byte, sc *float32)
//
// limbsPrep (quantvnni_amd64.s, corr = 0) for AVX2: for each block b of
// 32 values of x·2^-e (e: the exponent of x's largest |x|, clamped to
// [-126, 126], so that 2^-e is a normal float; the blocks' largest
// values then stay below 4) at limbs + 384·b the six 64-byte vectors A,
// B, C of values 0..15 (offsets 0, 128, 256) and 16..31 (64, 192, 320),
// each 4-value group replicated over its lane's four dwords; at sc + 8·b
// the floats s, Σx four times over; at sc + 8·nb, 2^e.
TEXT ·limbsPrepY(SB), NOSPLIT, $0-32
	MOVQ         nb+0(FP), CX
	TESTQ        CX, CX               // no blocks: nothing to write (the max loop runs at least once)
	JZ           done
	MOVQ         x+8(FP), SI
	MOVQ         limbs+16(FP), DI
	MOVQ         sc+24(FP), DX
	YDWORD($128, X12, Y12)
	YDWORD($255, X13, Y13)
	YDWORD($0x7fffffff, X14, Y14)
	VMOVDQU      yvRep<>(SB), Y8
	VMOVDQU      yvRep<>+32(SB), Y9
	VMOVDQU      yvRep<>+64(SB), Y10
	VMOVDQU      yvRep<>+96(SB), Y11

	MOVQ         CX, BX
	MOVQ         SI, R8
	VXORPS       Y4, Y4, Y4
mx:
	VANDPS       (R8), Y14, Y5
	VMAXPS       Y5, Y4, Y4
	VANDPS       32(R8), Y14, Y5
	VMAXPS       Y5, Y4, Y4
	VANDPS       64(R8), Y14, Y5
	VMAXPS       Y5, Y4, Y4
	VANDPS       96(R8), Y14, Y5
	VMAXPS       Y5, Y4, Y4
	ADDQ         $128, R8
	DECQ         BX
	JNZ          mx
	YVHREDUCE(VMAXPS, Y4, X4, X5)
	VMOVD        X4, AX
	SHRL         $23, AX              // the biased exponent E (|x|: no sign bit)
	CMPL         AX, $1
	JGE          lo
	MOVL         $1, AX
lo:
	CMPL         AX, $253
	JLE          hi
	MOVL         $253, AX
hi:
	MOVL         AX, BX
	SHLL         $23, BX              // 2^e, e = E − 127
	MOVQ         CX, R9
	SHLQ         $5, R9
	MOVL         BX, (DX)(R9*1)
	MOVL         $254, BX
	SUBL         AX, BX
	SHLL         $23, BX              // 2^-e
	YDWORD(BX, X15, Y15)

lp:
	VMULPS       (SI), Y15, Y0
	VMULPS       32(SI), Y15, Y1
	VMULPS       64(SI), Y15, Y2
	VMULPS       96(SI), Y15, Y3
	VADDPS       Y1, Y0, Y4
	VADDPS       Y3, Y2, Y5
	VADDPS       Y5, Y4, Y4
	YVHREDUCE(VADDPS, Y4, X4, X5)     // Σx
	VANDPS       Y14, Y0, Y5
	VANDPS       Y14, Y1, Y6
	VMAXPS       Y6, Y5, Y5
	VANDPS       Y14, Y2, Y6
	VMAXPS       Y6, Y5, Y5
	VANDPS       Y14, Y3, Y6
	VMAXPS       Y6, Y5, Y5
	YVHREDUCE(VMAXPS, Y5, X5, X6)
	MOVL         $0x00800000, AX      // 2^-126: an all-zero block keeps finite scales
	VMOVD        AX, X6
	VMAXSS       X6, X5, X5
	MOVL         $0x4afe0000, AX      // 127·2^16
	VMOVD        AX, X6
	VDIVSS       X5, X6, X7           // 1/s
	VDIVSS       X6, X5, X5           // s
	VBROADCASTSS X7, Y7
	VMULPS       Y7, Y0, Y0
	VMULPS       Y7, Y1, Y1
	VMULPS       Y7, Y2, Y2
	VMULPS       Y7, Y3, Y3
	VCVTPS2DQ    Y0, Y0
	VCVTPS2DQ    Y1, Y1
	VCVTPS2DQ    Y2, Y2
	VCVTPS2DQ    Y3, Y3
	VUNPCKLPS    X4, X5, X5           // s, Σx
	VMOVLHPS     X5, X5, X5
	VINSERTF128  $1, X5, Y5, Y5
	VMOVUPS      Y5, (DX)
	YVLIMB(256)                       // C
	YVLIMB(128)                       // B
	YVSTORE(Y0, Y1, Y2, Y3, 0)        // A
	ADDQ         $128, SI
	ADDQ         $384, DI
	ADDQ         $32, DX
	DECQ         CX
	JNZ          lp

done:
	VZEROUPPER
	RET
