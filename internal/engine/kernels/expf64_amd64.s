//go:build amd64 && !noasm

#include "textflag.h"

// The sampler's exponentials in float64 (ExpShift64): x = n·ln2 + r with
// n = round(x·log2e) (the magic-number rounding) and r = x − n·ln2hi −
// n·ln2lo by fused multiply-adds, e^r by its Taylor polynomial of degree
// 13 in Horner's form (|r| ≤ ln2/2: the remainder is below 1e-17 of the
// result, each fused step rounds once), times 2^n built in the exponent
// bits.
DATA expd<>+0(SB)/8, $0x3ff71547652b82fe // log2e 1.4426950408889634
DATA expd<>+8(SB)/8, $0x4338000000000000 // magic 6755399441055744.0
DATA expd<>+16(SB)/8, $0x3fe62e42fee00000 // ln2hi 0.6931471803691238
DATA expd<>+24(SB)/8, $0x3dea39ef35793c76 // ln2lo 1.9082149292705877e-10
DATA expd<>+32(SB)/8, $0xc086200000000000 // lo -708.0
DATA expd<>+40(SB)/8, $0x4086280000000000 // hi 709.0
DATA expd<>+48(SB)/8, $0xc0874910d52d3051 // under -745.1332191019411
DATA expd<>+56(SB)/8, $0x3ff0000000000000 // 1023 << 52
DATA expd<>+64(SB)/8, $0x3de6124613a86d09 // 1/13!
DATA expd<>+72(SB)/8, $0x3e21eed8eff8d898 // 1/12!
DATA expd<>+80(SB)/8, $0x3e5ae64567f544e4 // 1/11!
DATA expd<>+88(SB)/8, $0x3e927e4fb7789f5c // 1/10!
DATA expd<>+96(SB)/8, $0x3ec71de3a556c734 // 1/9!
DATA expd<>+104(SB)/8, $0x3efa01a01a01a01a // 1/8!
DATA expd<>+112(SB)/8, $0x3f2a01a01a01a01a // 1/7!
DATA expd<>+120(SB)/8, $0x3f56c16c16c16c17 // 1/6!
DATA expd<>+128(SB)/8, $0x3f81111111111111 // 1/5!
DATA expd<>+136(SB)/8, $0x3fa5555555555555 // 1/4!
DATA expd<>+144(SB)/8, $0x3fc5555555555555 // 1/3!
DATA expd<>+152(SB)/8, $0x3fe0000000000000 // 1/2!
DATA expd<>+160(SB)/8, $0x3ff0000000000000 // 1/1!
DATA expd<>+168(SB)/8, $0x3ff0000000000000 // 1/0!
GLOBL expd<>(SB), RODATA|NOPTR, $176

// EXPS8: the 8 float32 at SI, z = v·scale and x = z − shift (scale and
// shift in every lane at 0(SP), 32(SP)), to e^x for the lanes with -708 <=
// x <= 709, 0 in the others: the first 4 in Y0 (Y8 all-ones in the lanes
// done: in range, or z NaN, or x below math.Exp's underflow, whose result
// is 0 too), the next 4 in Y4 (done: Y15); two chains of dependent steps
// interleaved, so that each runs while the other waits. Clobbers Y1..Y3,
// Y5..Y7, Y9..Y12.
// One Horner step of both chains: p = p·r + the coefficient at off
// (p: Y2 and Y6, r: Y1 and Y5).
#define HORNER(off) \
	VBROADCASTSD expd<>+off(SB), Y9 \
	VFMADD213PD  Y9, Y1, Y2 \
	VFMADD213PD  Y9, Y5, Y6

#define EXPS8 \
	VCVTPS2PD    0(SI), Y0 \
	VCVTPS2PD    16(SI), Y4 \
	VMULPD       0(SP), Y0, Y0 \
	VMULPD       0(SP), Y4, Y4 \
	VCMPPD       $3, Y0, Y0, Y8 \
	VCMPPD       $3, Y4, Y4, Y15 \
	VSUBPD       32(SP), Y0, Y0 \
	VSUBPD       32(SP), Y4, Y4 \
	VBROADCASTSD expd<>+32(SB), Y9 \
	VBROADCASTSD expd<>+32(SB), Y11 \
	VCMPPD       $13, Y9, Y0, Y10 \
	VCMPPD       $13, Y11, Y4, Y12 \
	VMAXPD       Y9, Y0, Y1 \
	VMAXPD       Y11, Y4, Y5 \
	VBROADCASTSD expd<>+40(SB), Y9 \
	VBROADCASTSD expd<>+40(SB), Y11 \
	VMINPD       Y9, Y1, Y1 \
	VMINPD       Y11, Y5, Y5 \
	VCMPPD       $2, Y9, Y0, Y9 \
	VCMPPD       $2, Y11, Y4, Y11 \
	VANDPD       Y9, Y10, Y10 \
	VANDPD       Y11, Y12, Y12 \
	VBROADCASTSD expd<>+48(SB), Y9 \
	VBROADCASTSD expd<>+48(SB), Y11 \
	VCMPPD       $1, Y9, Y0, Y9 \
	VCMPPD       $1, Y11, Y4, Y11 \
	VORPD        Y9, Y8, Y8 \
	VORPD        Y11, Y15, Y15 \
	VORPD        Y10, Y8, Y8 \
	VORPD        Y12, Y15, Y15 \
	VBROADCASTSD expd<>+8(SB), Y9 \
	VBROADCASTSD expd<>+8(SB), Y11 \
	VBROADCASTSD expd<>+0(SB), Y3 \
	VBROADCASTSD expd<>+0(SB), Y7 \
	VFMADD213PD  Y9, Y1, Y3 \
	VFMADD213PD  Y11, Y5, Y7 \
	VSUBPD       Y9, Y3, Y2 \
	VSUBPD       Y11, Y7, Y6 \
	VBROADCASTSD expd<>+16(SB), Y9 \
	VBROADCASTSD expd<>+16(SB), Y11 \
	VFNMADD231PD Y9, Y2, Y1 \
	VFNMADD231PD Y11, Y6, Y5 \
	VBROADCASTSD expd<>+24(SB), Y9 \
	VBROADCASTSD expd<>+24(SB), Y11 \
	VFNMADD231PD Y9, Y2, Y1 \
	VFNMADD231PD Y11, Y6, Y5 \
	VBROADCASTSD expd<>+64(SB), Y2 \
	VBROADCASTSD expd<>+64(SB), Y6 \
	HORNER(72) \
	HORNER(80) \
	HORNER(88) \
	HORNER(96) \
	HORNER(104) \
	HORNER(112) \
	HORNER(120) \
	HORNER(128) \
	HORNER(136) \
	HORNER(144) \
	HORNER(152) \
	HORNER(160) \
	HORNER(168) \
	VPSLLQ       $52, Y3, Y3 \
	VPSLLQ       $52, Y7, Y7 \
	VBROADCASTSD expd<>+56(SB), Y9 \
	VBROADCASTSD expd<>+56(SB), Y11 \
	VPADDQ       Y9, Y3, Y3 \
	VPADDQ       Y11, Y7, Y7 \
	VMULPD       Y3, Y2, Y0 \
	VMULPD       Y7, Y6, Y4 \
	VANDPD       Y10, Y0, Y0 \
	VANDPD       Y12, Y4, Y4

// The lanes of y (x: its lower half) added to the sum in X14, in index
// order, as a scalar loop adds them; X13 scratch.
#define SUM4(y, x) \
	VADDSD       x, X14, X14 \
	VPERMILPD    $1, x, X13 \
	VADDSD       X13, X14, X14 \
	VEXTRACTF128 $1, y, X13 \
	VADDSD       X13, X14, X14 \
	VPERMILPD    $1, X13, X13 \
	VADDSD       X13, X14, X14

// The lanes not done (mask y) added to DX (AX scratch).
#define NOTDONE(y) \
	VMOVMSKPD y, AX \
	XORL      $15, AX \
	POPCNTL   AX, AX \
	ADDQ      AX, DX

// func expShift64AVX(n int, dst *float64, x *float32, scale, shift float64) (sum float64, out int)
// dst[i] = e^(float64(x[i])·scale − shift) for i < n (n a multiple of 8):
// 0 where the product is NaN; returns their sum in index order and the
// number of lanes out of range (x − shift in [−745.13…, −708) or above
// 709, or NaN from a finite product), which it leaves 0.
TEXT ·expShift64AVX(SB), NOSPLIT, $64-56
	MOVQ         n+0(FP), CX
	MOVQ         dst+8(FP), DI
	MOVQ         x+16(FP), SI
	VBROADCASTSD scale+24(FP), Y13
	VMOVUPD      Y13, 0(SP)
	VBROADCASTSD shift+32(FP), Y13
	VMOVUPD      Y13, 32(SP)
	VXORPD       X14, X14, X14
	XORQ         DX, DX

esloop:
	CMPQ    CX, $0
	JLE     esdone
	EXPS8
	VMOVUPD Y0, (DI)
	VMOVUPD Y4, 32(DI)
	SUM4(Y0, X0)
	SUM4(Y4, X4)
	NOTDONE(Y8)
	NOTDONE(Y15)
	ADDQ    $32, SI
	ADDQ    $64, DI
	SUBQ    $8, CX
	JMP     esloop

esdone:
	VZEROUPPER
	MOVSD X14, sum+40(FP)
	MOVQ  DX, out+48(FP)
	RET
