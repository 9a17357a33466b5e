//go:build amd64 && !noasm

#include "textflag.h"
#include "zmm_amd64.h"

// Half-precision weight kernels: the 16-bit weights are widened to float32
// in registers (BF16: zero-extend and shift into the high half; F16:
// VCVTPH2PS) and multiplied in float32, so only the 16-bit stream is read
// from memory.

#define BF16Y(src, dst) \
	VPMOVZXWD src, dst \
	VPSLLD    $16, dst, dst

#define F16Y(src, dst) \
	VCVTPH2PS src, dst

#define F16Z(src, dst) \
	VCVTPH2PS src, dst

// dst[i] = LOAD(src[i]) for i < n (a multiple of 8), prefetching pf bytes
// ahead in src: the widening of a group of half rows (streamNT's several
// rows of A on AVX2) is where their weights arrive from memory, and the
// prefetch keeps the next group's coming while the group is multiplied.
// 32 values (one 64-byte line of src) a step and one prefetch, then 8 at a
// time for the rest.
#define CVTHALF(LOAD, l32, l8, done) \
	MOVQ n+0(FP), CX \
	MOVQ dst+8(FP), DI \
	MOVQ src+16(FP), SI \
	MOVQ pf+24(FP), R8 \
	ADDQ SI, R8 \
	XORQ AX, AX \
l32: \
	MOVQ CX, BX \
	SUBQ AX, BX \
	CMPQ BX, $32 \
	JLT  l8 \
	PREFETCHT0 (R8)(AX*2) \
	LOAD((SI)(AX*2), Y0) \
	LOAD(16(SI)(AX*2), Y1) \
	LOAD(32(SI)(AX*2), Y2) \
	LOAD(48(SI)(AX*2), Y3) \
	VMOVUPS Y0, (DI)(AX*4) \
	VMOVUPS Y1, 32(DI)(AX*4) \
	VMOVUPS Y2, 64(DI)(AX*4) \
	VMOVUPS Y3, 96(DI)(AX*4) \
	ADDQ $32, AX \
	JMP  l32 \
l8: \
	CMPQ AX, CX \
	JGE  done \
	LOAD((SI)(AX*2), Y0) \
	VMOVUPS Y0, (DI)(AX*4) \
	ADDQ $8, AX \
	JMP  l8 \
done: \
	VZEROUPPER \
	RET

#define SETUP4 \
	MOVQ n+0(FP), CX \
	MOVQ x+8(FP), SI \
	MOVQ w+16(FP), R8 \
	MOVQ ldw+24(FP), DX \
	ROWS4(1) \
	LEAQ (DX)(DX*1), R12 \
	SHLQ $1, R12 \
	XORQ AX, AX

#define STORE4Y \
	MOVQ   out+32(FP), DI \
	STORE4YDI \
	VZEROUPPER \
	RET

// One 16-element step of the AVX2 dot over 4 rows (x in Y8, Y9).
#define STEP16Y(LOAD) \
	PF4 \
	VMOVUPS     (SI)(AX*4), Y8 \
	VMOVUPS     32(SI)(AX*4), Y9 \
	LOAD((R8)(AX*2), Y10) \
	LOAD(16(R8)(AX*2), Y11) \
	VFMADD231PS Y10, Y8, Y0 \
	VFMADD231PS Y11, Y9, Y1 \
	LOAD((R9)(AX*2), Y12) \
	LOAD(16(R9)(AX*2), Y13) \
	VFMADD231PS Y12, Y8, Y2 \
	VFMADD231PS Y13, Y9, Y3 \
	LOAD((R10)(AX*2), Y10) \
	LOAD(16(R10)(AX*2), Y11) \
	VFMADD231PS Y10, Y8, Y4 \
	VFMADD231PS Y11, Y9, Y5 \
	LOAD((R11)(AX*2), Y12) \
	LOAD(16(R11)(AX*2), Y13) \
	VFMADD231PS Y12, Y8, Y6 \
	VFMADD231PS Y13, Y9, Y7

#define STEP8Y(LOAD) \
	VMOVUPS     (SI)(AX*4), Y8 \
	LOAD((R8)(AX*2), Y10) \
	VFMADD231PS Y10, Y8, Y0 \
	LOAD((R9)(AX*2), Y11) \
	VFMADD231PS Y11, Y8, Y2 \
	LOAD((R10)(AX*2), Y12) \
	VFMADD231PS Y12, Y8, Y4 \
	LOAD((R11)(AX*2), Y13) \
	VFMADD231PS Y13, Y8, Y6

// Prefetch the same 64 bytes of the next group of four rows (R12 = 4 rows).
#define PF4 \
	LEAQ       (R8)(AX*2), R13 \
	PREFETCHT0 (R13)(R12*1) \
	LEAQ       (R9)(AX*2), R13 \
	PREFETCHT0 (R13)(R12*1) \
	LEAQ       (R10)(AX*2), R13 \
	PREFETCHT0 (R13)(R12*1) \
	LEAQ       (R11)(AX*2), R13 \
	PREFETCHT0 (R13)(R12*1)

// Four weight rows (R8..R11) times four rows of x (SI, R12, R13, R14): the
// register-blocked kernel of decode batches. Each 16-element step widens
// the four weight vectors once (Z16..Z19) and does 16 FMAs into Z0..Z15
// (Z[4i+r] accumulates x_i · w_r).
#define MSTEP(LOAD, sh) \
	LEAQ        (R8)(AX*sh), BX \
	PREFETCHT0  (BX)(DX*8) \
	LEAQ        (R9)(AX*sh), BX \
	PREFETCHT0  (BX)(DX*8) \
	LEAQ        (R10)(AX*sh), BX \
	PREFETCHT0  (BX)(DX*8) \
	LEAQ        (R11)(AX*sh), BX \
	PREFETCHT0  (BX)(DX*8) \
	LOAD((R8)(AX*sh), Z16) \
	LOAD((R9)(AX*sh), Z17) \
	LOAD((R10)(AX*sh), Z18) \
	LOAD((R11)(AX*sh), Z19) \
	VMOVUPS     (SI)(AX*4), Z20 \
	VFMADD231PS Z16, Z20, Z0 \
	VFMADD231PS Z17, Z20, Z1 \
	VFMADD231PS Z18, Z20, Z2 \
	VFMADD231PS Z19, Z20, Z3 \
	VMOVUPS     (R12)(AX*4), Z21 \
	VFMADD231PS Z16, Z21, Z4 \
	VFMADD231PS Z17, Z21, Z5 \
	VFMADD231PS Z18, Z21, Z6 \
	VFMADD231PS Z19, Z21, Z7 \
	VMOVUPS     (R13)(AX*4), Z22 \
	VFMADD231PS Z16, Z22, Z8 \
	VFMADD231PS Z17, Z22, Z9 \
	VFMADD231PS Z18, Z22, Z10 \
	VFMADD231PS Z19, Z22, Z11 \
	VMOVUPS     (R14)(AX*4), Z23 \
	VFMADD231PS Z16, Z23, Z12 \
	VFMADD231PS Z17, Z23, Z13 \
	VFMADD231PS Z18, Z23, Z14 \
	VFMADD231PS Z19, Z23, Z15

#define F32Z(src, dst) \
	VMOVUPS src, dst

#define MSETUP(sh) \
	MOVQ n+0(FP), CX \
	MOVQ x+8(FP), SI \
	MOVQ lda+16(FP), DX \
	SHLQ $2, DX \
	LEAQ (SI)(DX*1), R12 \
	LEAQ (R12)(DX*1), R13 \
	LEAQ (R13)(DX*1), R14 \
	MOVQ w+24(FP), R8 \
	MOVQ ldw+32(FP), DX \
	SHLQ $sh, DX \
	LEAQ (R8)(DX*1), R9 \
	LEAQ (R9)(DX*1), R10 \
	LEAQ (R10)(DX*1), R11 \
	XORQ AX, AX \
	ZEROZ4

#define MSTORE \
	MOVQ out+40(FP), DI \
	RED4(Z0, Y0, X0, Z1, Y1, X1, Z2, Y2, X2, Z3, Y3, X3, 0) \
	RED4(Z4, Y4, X4, Z5, Y5, X5, Z6, Y6, X6, Z7, Y7, X7, 16) \
	RED4(Z8, Y8, X8, Z9, Y9, X9, Z10, Y10, X10, Z11, Y11, X11, 32) \
	RED4(Z12, Y12, X12, Z13, Y13, X13, Z14, Y14, X14, Z15, Y15, X15, 48) \
	VZEROUPPER \
	RET

// The AVX-512 kernels below sum in one order for every batch size: each
// output (row of x, weight row) has one accumulator that takes one FMA per
// 16 columns (F32, F16) or two, even then odd, per 32 columns (BF16), and
// is reduced by RED4. So a row's results do not depend on how many rows
// share its pass (n choices of a request equal separate requests).

// BF16 4x4 step over 32 columns: weight row r's even values (shift) in
// Z16+2r, odd values (AND with the high-half mask Z26) in Z17+2r; x row i
// permuted even/odd (see evenOdd) at SI, R12, R13, R14.
#define EOW(src, ze, zo) \
	VPSLLD $16, src, ze \
	VPANDD src, Z26, zo

#define EOX(xr, a0, a1, a2, a3) \
	VMOVUPS     (xr)(AX*4), Z24 \
	VMOVUPS     64(xr)(AX*4), Z25 \
	VFMADD231PS Z16, Z24, a0 \
	VFMADD231PS Z17, Z25, a0 \
	VFMADD231PS Z18, Z24, a1 \
	VFMADD231PS Z19, Z25, a1 \
	VFMADD231PS Z20, Z24, a2 \
	VFMADD231PS Z21, Z25, a2 \
	VFMADD231PS Z22, Z24, a3 \
	VFMADD231PS Z23, Z25, a3

// One-row kernels: x at SI, weight rows R8..R11, accumulators Z0..Z3.
#define SETUP1(sh) \
	MOVQ n+0(FP), CX \
	MOVQ x+8(FP), SI \
	MOVQ w+16(FP), R8 \
	MOVQ ldw+24(FP), DX \
	ROWS4(sh) \
	LEAQ (DX)(DX*1), R12 \
	SHLQ $2, R12 \
	XORQ AX, AX \
	VPXORD Z0, Z0, Z0 \
	VPXORD Z1, Z1, Z1 \
	VPXORD Z2, Z2, Z2 \
	VPXORD Z3, Z3, Z3

// Prefetch the line at column AX of the rows eight ahead (R12 = 8 rows; sh:
// element size): far enough ahead to cover the memory latency at the
// speed the rows stream.
#define PF4S(sh) \
	LEAQ       (R8)(AX*sh), R13 \
	PREFETCHT0 (R13)(R12*1) \
	LEAQ       (R9)(AX*sh), R13 \
	PREFETCHT0 (R13)(R12*1) \
	LEAQ       (R10)(AX*sh), R13 \
	PREFETCHT0 (R13)(R12*1) \
	LEAQ       (R11)(AX*sh), R13 \
	PREFETCHT0 (R13)(R12*1)

// One 16-column step of the one-row F16 and F32 kernels: x at SI, weight
// rows R8..R11 at column AX read with LOAD (elements of sh bytes),
// accumulators Z0..Z3; AX += 16.
#define S1STEP(LOAD, sh) \
	PF4S(sh) \
	VMOVUPS     (SI)(AX*4), Z20 \
	LOAD((R8)(AX*sh), Z16) \
	LOAD((R9)(AX*sh), Z17) \
	LOAD((R10)(AX*sh), Z18) \
	LOAD((R11)(AX*sh), Z19) \
	VFMADD231PS Z16, Z20, Z0 \
	VFMADD231PS Z17, Z20, Z1 \
	VFMADD231PS Z18, Z20, Z2 \
	VFMADD231PS Z19, Z20, Z3 \
	ADDQ $16, AX

#define STORE1 \
	MOVQ out+32(FP), DI \
	RED4(Z0, Y0, X0, Z1, Y1, X1, Z2, Y2, X2, Z3, Y3, X3, 0) \
	VZEROUPPER \
	RET

// func hdot4BF16Y(n int, x *float32, w *uint16, ldw int, out *[4]float32)
// out[r] = sum_{i<n} x[i]*bf16(w[r*ldw+i]) for r = 0..3; n a multiple of 8.
TEXT ·hdot4BF16Y(SB), NOSPLIT, $0-40
	SETUP4
	ZEROY
hb16:
	MOVQ CX, BX
	SUBQ AX, BX
	CMPQ BX, $16
	JLT  hb8
	STEP16Y(BF16Y)
	ADDQ $16, AX
	JMP  hb16
hb8:
	CMPQ BX, $8
	JLT  hbdone
	STEP8Y(BF16Y)
hbdone:
	STORE4Y

// func hdot4F16Y(n int, x *float32, w *uint16, ldw int, out *[4]float32)
// As hdot4BF16Y for IEEE half precision (F16C).
TEXT ·hdot4F16Y(SB), NOSPLIT, $0-40
	SETUP4
	ZEROY
hf16:
	MOVQ CX, BX
	SUBQ AX, BX
	CMPQ BX, $16
	JLT  hf8
	STEP16Y(F16Y)
	ADDQ $16, AX
	JMP  hf16
hf8:
	CMPQ BX, $8
	JLT  hfdone
	STEP8Y(F16Y)
hfdone:
	STORE4Y

// func cvtBF16Y(n int, dst *float32, src *uint16, pf int)
TEXT ·cvtBF16Y(SB), NOSPLIT, $0-32
	CVTHALF(BF16Y, cb, cb8, cbdone)

// func cvtF16Y(n int, dst *float32, src *uint16, pf int)
// (F16C)
TEXT ·cvtF16Y(SB), NOSPLIT, $0-32
	CVTHALF(F16Y, cf, cf8, cfdone)

// func mdotF16Z(n int, x *float32, lda int, w *uint16, ldw int, out *[16]float32)
// As mdotBF16Z for IEEE half precision.
TEXT ·mdotF16Z(SB), NOSPLIT, $0-48
	MSETUP(1)
mf:
	CMPQ AX, CX
	JGE  mfdone
	MSTEP(F16Z, 2)
	ADDQ $16, AX
	JMP  mf
mfdone:
	MSTORE

// func mdotF32Z(n int, x *float32, lda int, w *float32, ldw int, out *[16]float32)
// As mdotBF16Z for float32 weights.
TEXT ·mdotF32Z(SB), NOSPLIT, $0-48
	MSETUP(2)
ms:
	CMPQ AX, CX
	JGE  msdone
	MSTEP(F32Z, 4)
	ADDQ $16, AX
	JMP  ms
msdone:
	MSTORE


// func mdotBF16Z(n int, x *float32, lda int, w *uint16, ldw int, out *[16]float32)
// out[4i+r] = sum_{p<n} x_i[p]*bf16(w[r*ldw+p]), i, r < 4, with x's rows
// (row stride lda) permuted even/odd per 32 columns (evenOdd); n a
// multiple of 32.
TEXT ·mdotBF16Z(SB), NOSPLIT, $0-48
	MSETUP(1)
	MOVL         $0xffff0000, BX
	VPBROADCASTD BX, Z26
mb:
	CMPQ AX, CX
	JGE  mbdone
	LEAQ       (R8)(AX*2), BX
	PREFETCHT0 (BX)(DX*8)
	LEAQ       (R9)(AX*2), BX
	PREFETCHT0 (BX)(DX*8)
	LEAQ       (R10)(AX*2), BX
	PREFETCHT0 (BX)(DX*8)
	LEAQ       (R11)(AX*2), BX
	PREFETCHT0 (BX)(DX*8)
	EOW((R8)(AX*2), Z16, Z17)
	EOW((R9)(AX*2), Z18, Z19)
	EOW((R10)(AX*2), Z20, Z21)
	EOW((R11)(AX*2), Z22, Z23)
	EOX(SI, Z0, Z1, Z2, Z3)
	EOX(R12, Z4, Z5, Z6, Z7)
	EOX(R13, Z8, Z9, Z10, Z11)
	EOX(R14, Z12, Z13, Z14, Z15)
	ADDQ $32, AX
	JMP  mb
mbdone:
	MSTORE

// func dot1BF16Z(n int, x *float32, w *uint16, ldw int, out *[4]float32)
// The one-row mdotBF16Z: out[r] = sum_{p<n} x[p]*bf16(w[r*ldw+p]), r < 4,
// x permuted even/odd; n a multiple of 32.
TEXT ·dot1BF16Z(SB), NOSPLIT, $0-40
	SETUP1(1)
	MOVL         $0xffff0000, BX
	VPBROADCASTD BX, Z26
b1:
	CMPQ AX, CX
	JGE  b1done
	PF4S(2)
	VMOVUPS     (SI)(AX*4), Z24
	VMOVUPS     64(SI)(AX*4), Z25
	EOW((R8)(AX*2), Z16, Z17)
	EOW((R9)(AX*2), Z18, Z19)
	VFMADD231PS Z16, Z24, Z0
	VFMADD231PS Z17, Z25, Z0
	VFMADD231PS Z18, Z24, Z1
	VFMADD231PS Z19, Z25, Z1
	EOW((R10)(AX*2), Z20, Z21)
	EOW((R11)(AX*2), Z22, Z23)
	VFMADD231PS Z20, Z24, Z2
	VFMADD231PS Z21, Z25, Z2
	VFMADD231PS Z22, Z24, Z3
	VFMADD231PS Z23, Z25, Z3
	ADDQ $32, AX
	JMP  b1
b1done:
	STORE1

// func dot1F16Z(n int, x *float32, w *uint16, ldw int, out *[4]float32)
// The one-row mdotF16Z; n a multiple of 16.
TEXT ·dot1F16Z(SB), NOSPLIT, $0-40
	SETUP1(1)
h1:
	CMPQ AX, CX
	JGE  h1done
	S1STEP(F16Z, 2)
	JMP  h1
h1done:
	STORE1

// func dot1F32Z(n int, x *float32, w *float32, ldw int, out *[4]float32)
// The one-row mdotF32Z; n a multiple of 16.
TEXT ·dot1F32Z(SB), NOSPLIT, $0-40
	SETUP1(2)
s1:
	CMPQ AX, CX
	JGE  s1done
	S1STEP(F32Z, 4)
	JMP  s1
s1done:
	STORE1

// Lane indices of the even (0, 2, .., 30) and odd (1, 3, .., 31) values of
// a pair of zmm registers for VPERMI2PS.
DATA eoIdx<>+0(SB)/4, $0
DATA eoIdx<>+4(SB)/4, $2
DATA eoIdx<>+8(SB)/4, $4
DATA eoIdx<>+12(SB)/4, $6
DATA eoIdx<>+16(SB)/4, $8
DATA eoIdx<>+20(SB)/4, $10
DATA eoIdx<>+24(SB)/4, $12
DATA eoIdx<>+28(SB)/4, $14
DATA eoIdx<>+32(SB)/4, $16
DATA eoIdx<>+36(SB)/4, $18
DATA eoIdx<>+40(SB)/4, $20
DATA eoIdx<>+44(SB)/4, $22
DATA eoIdx<>+48(SB)/4, $24
DATA eoIdx<>+52(SB)/4, $26
DATA eoIdx<>+56(SB)/4, $28
DATA eoIdx<>+60(SB)/4, $30
GLOBL eoIdx<>(SB), RODATA|NOPTR, $64

// func evenOddZ(blocks int, dst, x *float32)
// evenOdd for blocks blocks of 32 values.
TEXT ·evenOddZ(SB), NOSPLIT, $0-24
	MOVQ    blocks+0(FP), CX
	MOVQ    dst+8(FP), DI
	MOVQ    x+16(FP), SI
	VMOVDQU32 eoIdx<>(SB), Z4
	MOVL    $1, AX
	VPBROADCASTD AX, Z5
	VPADDD  Z5, Z4, Z5               // odd indices
eo:
	TESTQ   CX, CX
	JZ      eodone
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVAPS Z4, Z2
	VPERMI2PS Z1, Z0, Z2
	VMOVAPS Z5, Z3
	VPERMI2PS Z1, Z0, Z3
	VMOVUPS Z2, (DI)
	VMOVUPS Z3, 64(DI)
	ADDQ    $128, SI
	ADDQ    $128, DI
	DECQ    CX
	JMP     eo
eodone:
	VZEROUPPER
	RET

// Row-at-a-time twins of the one-row kernels: the same sums in the same
// order (each accumulator takes the same FMAs in the same sequence and is
// reduced by the same RED4), but the four weight rows are read one after
// another instead of in lockstep, so a thread follows one stream (rows are
// back to back when ldw equals the row length) rather than four that
// restart every four rows, and prefetches ahead in it. Which order streams
// faster depends on the machine (see order.go). The 4x4 kernels keep the
// lockstep order: read one weight row at a time they load each x vector
// once per weight row instead of once per four, and measured 0.6-0.93x of
// lockstep at batch 8 (docs/benchmarks.md).

// The AVX-512 row kernels take their software-prefetch distance, bytes
// ahead in the stream (past a row's end it reaches into the next row,
// which follows), as the argument pf, calibrated per machine (order.go),
// into R14; ROW1 and ROW1B keep a row's prefetch pointer (r + pf) in R13.

// Dot x (SI) with weight row r over n (CX) columns into acc: F32 and F16.
#define ROW1(LOAD, sh, r, acc, lp, done) \
	XORQ AX, AX \
	LEAQ (r)(R14*1), R13 \
lp: \
	CMPQ AX, CX \
	JGE  done \
	PREFETCHT0  (R13)(AX*sh) \
	VMOVUPS     (SI)(AX*4), Z20 \
	LOAD((r)(AX*sh), Z16) \
	VFMADD231PS Z16, Z20, acc \
	ADDQ $16, AX \
	JMP  lp \
done:

// As ROW1 for BF16 (x permuted even/odd, Z26 the high-half mask).
#define ROW1B(r, acc, lp, done) \
	XORQ AX, AX \
	LEAQ (r)(R14*1), R13 \
lp: \
	CMPQ AX, CX \
	JGE  done \
	PREFETCHT0  (R13)(AX*2) \
	VMOVUPS     (SI)(AX*4), Z24 \
	VMOVUPS     64(SI)(AX*4), Z25 \
	EOW((r)(AX*2), Z16, Z17) \
	VFMADD231PS Z16, Z24, acc \
	VFMADD231PS Z17, Z25, acc \
	ADDQ $32, AX \
	JMP  lp \
done:

// func dot1F32R(n int, x *float32, w *float32, ldw int, out *[4]float32, pf int)
// dot1F32Z reading one row at a time.
TEXT ·dot1F32R(SB), NOSPLIT, $0-48
	SETUP1(2)
	MOVQ pf+40(FP), R14
	ROW1(F32Z, 4, R8, Z0, s1r0, s1r0d)
	ROW1(F32Z, 4, R9, Z1, s1r1, s1r1d)
	ROW1(F32Z, 4, R10, Z2, s1r2, s1r2d)
	ROW1(F32Z, 4, R11, Z3, s1r3, s1r3d)
	STORE1

// func dot1F16R(n int, x *float32, w *uint16, ldw int, out *[4]float32, pf int)
// dot1F16Z reading one row at a time.
TEXT ·dot1F16R(SB), NOSPLIT, $0-48
	SETUP1(1)
	MOVQ pf+40(FP), R14
	ROW1(F16Z, 2, R8, Z0, h1r0, h1r0d)
	ROW1(F16Z, 2, R9, Z1, h1r1, h1r1d)
	ROW1(F16Z, 2, R10, Z2, h1r2, h1r2d)
	ROW1(F16Z, 2, R11, Z3, h1r3, h1r3d)
	STORE1

// func dot1BF16R(n int, x *float32, w *uint16, ldw int, out *[4]float32, pf int)
// dot1BF16Z reading one row at a time.
TEXT ·dot1BF16R(SB), NOSPLIT, $0-48
	SETUP1(1)
	MOVQ pf+40(FP), R14
	MOVL         $0xffff0000, BX
	VPBROADCASTD BX, Z26
	ROW1B(R8, Z0, b1r0, b1r0d)
	ROW1B(R9, Z1, b1r1, b1r1d)
	ROW1B(R10, Z2, b1r2, b1r2d)
	ROW1B(R11, Z3, b1r3, b1r3d)
	STORE1

// AVX2 row-order twins of hdot4BF16Y, hdot4F16Y and dot4 (float32): the
// same two accumulators per row (Y2r: the 16-element steps' first half and
// the 8-element tail, Y2r+1: the second half), the same FMAs in the same
// sequence and the same reduction (STORE4Y), so bit-identical results; the
// rows are read one after another with a software prefetch pf bytes ahead
// (R13; calibrated as the AVX-512 kernels' distance is, order.go).

#define F32Y(src, dst) \
	VMOVUPS src, dst

#define ROWY(LOAD, sh, r, ya, yb, l16, l8, done) \
	XORQ AX, AX \
	LEAQ (r)(R13*1), R14 \
l16: \
	MOVQ CX, BX \
	SUBQ AX, BX \
	CMPQ BX, $16 \
	JLT  l8 \
	PREFETCHT0  (R14)(AX*sh) \
	VMOVUPS     (SI)(AX*4), Y8 \
	VMOVUPS     32(SI)(AX*4), Y9 \
	LOAD((r)(AX*sh), Y10) \
	LOAD((8*sh)(r)(AX*sh), Y11) \
	VFMADD231PS Y10, Y8, ya \
	VFMADD231PS Y11, Y9, yb \
	ADDQ $16, AX \
	JMP  l16 \
l8: \
	CMPQ BX, $8 \
	JLT  done \
	VMOVUPS     (SI)(AX*4), Y8 \
	LOAD((r)(AX*sh), Y10) \
	VFMADD231PS Y10, Y8, ya \
done:

// func hdot4BF16R(n int, x *float32, w *uint16, ldw int, out *[4]float32, pf int)
TEXT ·hdot4BF16R(SB), NOSPLIT, $0-48
	SETUP4
	MOVQ pf+40(FP), R13
	ZEROY
	ROWY(BF16Y, 2, R8, Y0, Y1, hbr0, hbr0t, hbr0d)
	ROWY(BF16Y, 2, R9, Y2, Y3, hbr1, hbr1t, hbr1d)
	ROWY(BF16Y, 2, R10, Y4, Y5, hbr2, hbr2t, hbr2d)
	ROWY(BF16Y, 2, R11, Y6, Y7, hbr3, hbr3t, hbr3d)
	STORE4Y

// func hdot4F16R(n int, x *float32, w *uint16, ldw int, out *[4]float32, pf int)
TEXT ·hdot4F16R(SB), NOSPLIT, $0-48
	SETUP4
	MOVQ pf+40(FP), R13
	ZEROY
	ROWY(F16Y, 2, R8, Y0, Y1, hfr0, hfr0t, hfr0d)
	ROWY(F16Y, 2, R9, Y2, Y3, hfr1, hfr1t, hfr1d)
	ROWY(F16Y, 2, R10, Y4, Y5, hfr2, hfr2t, hfr2d)
	ROWY(F16Y, 2, R11, Y6, Y7, hfr3, hfr3t, hfr3d)
	STORE4Y

// func dot4R(n int, x, w *float32, ldw int, out *[4]float32, pf int)
TEXT ·dot4R(SB), NOSPLIT, $0-48
	MOVQ pf+40(FP), R13
	MOVQ n+0(FP), CX
	MOVQ x+8(FP), SI
	MOVQ w+16(FP), R8
	MOVQ ldw+24(FP), DX
	ROWS4(2)
	ZEROY
	ROWY(F32Y, 4, R8, Y0, Y1, sr0, sr0t, sr0d)
	ROWY(F32Y, 4, R9, Y2, Y3, sr1, sr1t, sr1d)
	ROWY(F32Y, 4, R10, Y4, Y5, sr2, sr2t, sr2d)
	ROWY(F32Y, 4, R11, Y6, Y7, sr3, sr3t, sr3d)
	STORE4Y

