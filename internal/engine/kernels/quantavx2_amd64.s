//go:build amd64 && !noasm

#include "textflag.h"

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
lp: \
	TESTQ        CX, CX \
	JZ           done \
	VMOVDQU      (SI), Y5 \
	VMOVDQU      32(SI), Y6 \
	MOVQ         DI, BX \
	ROW(0) \
	LEAQ         (DI)(R12*1), BX \
	ROW(1) \
	LEAQ         (DI)(R12*2), BX \
	ROW(2) \
	LEAQ         (DI)(R13*1), BX \
	ROW(3) \
	ADDQ         size, SI \
	ADDQ         $128, DI \
	DECQ         CX \
	JMP          lp \
done: \
	VZEROUPPER \
	RET

// func dequantQ41Y(nb int, dst *float32, ldd int, src *byte, tab *float32)
TEXT ·dequantQ41Y(SB), NOSPLIT, $0-40
	Y4RUN(y41, y41done, Y41ROW, $80)

// func dequantQ40Y(nb int, dst *float32, ldd int, src *byte, tab *float32)
TEXT ·dequantQ40Y(SB), NOSPLIT, $0-40
	Y4RUN(y40, y40done, Y40ROW, $72)
