//go:build amd64 && !noasm

#include "textflag.h"
#include "zmm_amd64.h"

// Dequantisation on AVX2 machines (no AVX-512): where no decode kernel of
// a format runs, decode dequantises four rows at a time into a buffer and
// multiplies them with the float kernels; prefill and training dequantise
// blocks of rows into the GEMM. These are the formats of the real Q4_1
// and Q8_0 files: Q8_0 rows and the Q4_1x4/Q4_0x4 groups (Repack4 holds
// Q4_1 and Q4_0 in them on every machine). Each value as dequantBlock
// computes it (no fused multiply-adds): bit-identical (TestDequantGGUF,
// TestRepack4, the "avx2" runs).

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
	MOVL         $0x0f0f0f0f, AX \
	VMOVD        AX, X15 \
	VPBROADCASTD X15, X15 \
	MOVL         $8, AX \
	VMOVD        AX, X14 \
	VPBROADCASTD X14, Y14 \
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
	MOVL         $0x0f0f0f0f, AX \
	VMOVD        AX, X15 \
	VPBROADCASTD X15, Y15 \
	MOVL         $0x10101010, AX \
	VMOVD        AX, X11 \
	VPBROADCASTD X11, Y11 \
	MOVL         $16, AX \
	VMOVD        AX, X14 \
	VPBROADCASTD X14, Y14 \
	VMOVDQU      y5Bits<>(SB), Y12 \
	VMOVDQU      y5Spread<>(SB), Y13 \
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
	MOVL         $0x0f0f0f0f, AX \
	VMOVD        AX, X15 \
	VPBROADCASTD X15, Y15 \
	MOVL         $0x10101010, AX \
	VMOVD        AX, X11 \
	VPBROADCASTD X11, Y11 \
	MOVL         $32, AX \
	VMOVD        AX, X14 \
	VPBROADCASTD X14, Y14

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
