//go:build amd64 && !noasm

#include "textflag.h"
#include "zmm_amd64.h"

// One k step of the 6x16 micro-kernel: B row (16 floats) in Y12/Y13,
// six broadcasts of A, twelve FMAs into Y0..Y11.
#define STEP(oa, ob) \
	VMOVUPS      ob(BX), Y12 \
	VMOVUPS      ob+32(BX), Y13 \
	VBROADCASTSS oa(AX), Y14 \
	VFMADD231PS  Y12, Y14, Y0 \
	VFMADD231PS  Y13, Y14, Y1 \
	VBROADCASTSS oa+4(AX), Y15 \
	VFMADD231PS  Y12, Y15, Y2 \
	VFMADD231PS  Y13, Y15, Y3 \
	VBROADCASTSS oa+8(AX), Y14 \
	VFMADD231PS  Y12, Y14, Y4 \
	VFMADD231PS  Y13, Y14, Y5 \
	VBROADCASTSS oa+12(AX), Y15 \
	VFMADD231PS  Y12, Y15, Y6 \
	VFMADD231PS  Y13, Y15, Y7 \
	VBROADCASTSS oa+16(AX), Y14 \
	VFMADD231PS  Y12, Y14, Y8 \
	VFMADD231PS  Y13, Y14, Y9 \
	VBROADCASTSS oa+20(AX), Y15 \
	VFMADD231PS  Y12, Y15, Y10 \
	VFMADD231PS  Y13, Y15, Y11

// C row (16 floats at DI) += alpha(Y12) * (lo, hi); DI += DX.
#define STOREROW(lo, hi) \
	VMOVUPS     (DI), Y13 \
	VFMADD231PS lo, Y12, Y13 \
	VMOVUPS     Y13, (DI) \
	VMOVUPS     32(DI), Y14 \
	VFMADD231PS hi, Y12, Y14 \
	VMOVUPS     Y14, 32(DI) \
	ADDQ        DX, DI

// C row (16 floats at DI) = alpha(Y12) * (lo, hi) as STOREROW computes it
// on a C of zeros (a multiply-add onto +0, so a zero product is +0 too);
// DI += DX.
#define SETROW(lo, hi) \
	VXORPS      Y13, Y13, Y13 \
	VFMADD231PS lo, Y12, Y13 \
	VMOVUPS     Y13, (DI) \
	VXORPS      Y14, Y14, Y14 \
	VFMADD231PS hi, Y12, Y14 \
	VMOVUPS     Y14, 32(DI) \
	ADDQ        DX, DI

// func sgemmKernel6x16(kc int, a, b, c *float32, ldc int, alpha float32, set bool)
// C[0:6, 0:16] += alpha * Apanel(6 x kc) * Bpanel(kc x 16), packed panels;
// with set, C = that product (C is only written: no pass clearing it first).
TEXT ·sgemmKernel6x16(SB), NOSPLIT, $0-45
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ b+16(FP), BX
	MOVQ c+24(FP), DI
	MOVQ ldc+32(FP), DX
	SHLQ $2, DX
	MOVQ       DI, R8
	PREFETCHT0 (R8)
	PREFETCHT0 60(R8)
	ADDQ       DX, R8
	PREFETCHT0 (R8)
	PREFETCHT0 60(R8)
	ADDQ       DX, R8
	PREFETCHT0 (R8)
	PREFETCHT0 60(R8)
	ADDQ       DX, R8
	PREFETCHT0 (R8)
	PREFETCHT0 60(R8)
	ADDQ       DX, R8
	PREFETCHT0 (R8)
	PREFETCHT0 60(R8)
	ADDQ       DX, R8
	PREFETCHT0 (R8)
	PREFETCHT0 60(R8)
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

loop4:
	CMPQ CX, $4
	JLT  loop1
	PREFETCHT0 384(AX)
	STEP(0, 0)
	STEP(24, 64)
	PREFETCHT0 512(BX)
	STEP(48, 128)
	STEP(72, 192)
	ADDQ $96, AX
	ADDQ $256, BX
	SUBQ $4, CX
	JMP  loop4

loop1:
	TESTQ CX, CX
	JEQ   store
	STEP(0, 0)
	ADDQ $24, AX
	ADDQ $64, BX
	DECQ CX
	JMP  loop1

store:
	VBROADCASTSS alpha+40(FP), Y12
	CMPB set+44(FP), $0
	JNE  set
	STOREROW(Y0, Y1)
	STOREROW(Y2, Y3)
	STOREROW(Y4, Y5)
	STOREROW(Y6, Y7)
	STOREROW(Y8, Y9)
	STOREROW(Y10, Y11)
	VZEROUPPER
	RET

set:
	SETROW(Y0, Y1)
	SETROW(Y2, Y3)
	SETROW(Y4, Y5)
	SETROW(Y6, Y7)
	SETROW(Y8, Y9)
	SETROW(Y10, Y11)
	VZEROUPPER
	RET

// func dot4M(n int, x *float32, ldx, m int, w *float32, ldw int, out *float32, pf unsafe.Pointer, pfn int)
// The dots of each of the m >= 1 rows of x (stride ldx) with the same four
// rows of w over n elements (a multiple of 8), row i's at out[4i:4i+4]: two
// accumulators a weight row (Y2r: the 16-element steps' first half and the
// 8-element tail; Y2r+1: their second half), four rows in lockstep. dot4
// is its one-row case; several rows of A against weights in L1 take one
// call. Each 16-element step also prefetches the next 64 of the pfn bytes
// at pf until they are all requested (the next weights a decode product
// reads, fetched while these are multiplied; pfn 0: none).
TEXT ·dot4M(SB), NOSPLIT, $0-72
	MOVQ n+0(FP), CX
	MOVQ x+8(FP), SI
	MOVQ ldx+16(FP), R12
	SHLQ $2, R12
	MOVQ m+24(FP), R13
	MOVQ w+32(FP), R8
	MOVQ ldw+40(FP), DX
	ROWS4(2)
	MOVQ out+48(FP), DI
	MOVQ pf+56(FP), R14
	MOVQ pfn+64(FP), R15
	ADDQ R14, R15

d4mrow:
	ZEROY
	XORQ AX, AX

	DOT4Y(d4mloop16, d4mloop8, d4mdone)

d4mdone:
	STORE4YDI
	ADDQ $16, DI
	ADDQ R12, SI
	DECQ R13
	JNZ  d4mrow
	VZEROUPPER
	RET

// func dotAVX(n int, x, y *float32) float32
// sum_{i<n} x[i]*y[i]; n must be a multiple of 8.
TEXT ·dotAVX(SB), NOSPLIT, $0-28
	MOVQ   n+0(FP), CX
	MOVQ   x+8(FP), SI
	MOVQ   y+16(FP), DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ   AX, AX

dloop32:
	MOVQ CX, BX
	SUBQ AX, BX
	CMPQ BX, $32
	JLT  dloop8
	VMOVUPS     (SI)(AX*4), Y4
	VMOVUPS     32(SI)(AX*4), Y5
	VMOVUPS     64(SI)(AX*4), Y6
	VMOVUPS     96(SI)(AX*4), Y7
	VFMADD231PS (DI)(AX*4), Y4, Y0
	VFMADD231PS 32(DI)(AX*4), Y5, Y1
	VFMADD231PS 64(DI)(AX*4), Y6, Y2
	VFMADD231PS 96(DI)(AX*4), Y7, Y3
	ADDQ        $32, AX
	JMP         dloop32

dloop8:
	CMPQ BX, $8
	JLT  ddone
	VMOVUPS     (SI)(AX*4), Y4
	VFMADD231PS (DI)(AX*4), Y4, Y0
	ADDQ        $8, AX
	SUBQ        $8, BX
	JMP         dloop8

ddone:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUM(Y0, X0)
	VZEROUPPER
	MOVSS  X0, ret+24(FP)
	RET

// func axpyAVX(n int, alpha float32, x, y *float32)
// y[i] += alpha*x[i] for i < n; n must be a multiple of 8.
TEXT ·axpyAVX(SB), NOSPLIT, $0-32
	MOVQ         n+0(FP), CX
	VBROADCASTSS alpha+8(FP), Y15
	MOVQ         x+16(FP), SI
	MOVQ         y+24(FP), DI
	XORQ         AX, AX

aloop32:
	MOVQ CX, BX
	SUBQ AX, BX
	CMPQ BX, $32
	JLT  aloop8
	VMOVUPS     (DI)(AX*4), Y0
	VMOVUPS     32(DI)(AX*4), Y1
	VMOVUPS     64(DI)(AX*4), Y2
	VMOVUPS     96(DI)(AX*4), Y3
	VFMADD231PS (SI)(AX*4), Y15, Y0
	VFMADD231PS 32(SI)(AX*4), Y15, Y1
	VFMADD231PS 64(SI)(AX*4), Y15, Y2
	VFMADD231PS 96(SI)(AX*4), Y15, Y3
	VMOVUPS     Y0, (DI)(AX*4)
	VMOVUPS     Y1, 32(DI)(AX*4)
	VMOVUPS     Y2, 64(DI)(AX*4)
	VMOVUPS     Y3, 96(DI)(AX*4)
	ADDQ        $32, AX
	JMP         aloop32

aloop8:
	CMPQ BX, $8
	JLT  adone
	VMOVUPS     (DI)(AX*4), Y0
	VFMADD231PS (SI)(AX*4), Y15, Y0
	VMOVUPS     Y0, (DI)(AX*4)
	ADDQ        $8, AX
	SUBQ        $8, BX
	JMP         aloop8

adone:
	VZEROUPPER
	RET

// func axpy4(n int, a *[4]float32, w *float32, ldw int, y *float32)
// y[i] += sum_r a[r]*w[r*ldw+i] for i < n; n must be a multiple of 8.
TEXT ·axpy4(SB), NOSPLIT, $0-40
	MOVQ         n+0(FP), CX
	MOVQ         a+8(FP), SI
	VBROADCASTSS 0(SI), Y12
	VBROADCASTSS 4(SI), Y13
	VBROADCASTSS 8(SI), Y14
	VBROADCASTSS 12(SI), Y15
	MOVQ         w+16(FP), R8
	MOVQ         ldw+24(FP), DX
	ROWS4(2)
	MOVQ         y+32(FP), DI
	XORQ         AX, AX

x4loop16:
	MOVQ CX, BX
	SUBQ AX, BX
	CMPQ BX, $16
	JLT  x4loop8
	VMOVUPS     (DI)(AX*4), Y0
	VMOVUPS     32(DI)(AX*4), Y1
	VFMADD231PS (R8)(AX*4), Y12, Y0
	VFMADD231PS 32(R8)(AX*4), Y12, Y1
	VFMADD231PS (R9)(AX*4), Y13, Y0
	VFMADD231PS 32(R9)(AX*4), Y13, Y1
	VFMADD231PS (R10)(AX*4), Y14, Y0
	VFMADD231PS 32(R10)(AX*4), Y14, Y1
	VFMADD231PS (R11)(AX*4), Y15, Y0
	VFMADD231PS 32(R11)(AX*4), Y15, Y1
	VMOVUPS     Y0, (DI)(AX*4)
	VMOVUPS     Y1, 32(DI)(AX*4)
	ADDQ        $16, AX
	JMP         x4loop16

x4loop8:
	CMPQ BX, $8
	JLT  x4done
	VMOVUPS     (DI)(AX*4), Y0
	VFMADD231PS (R8)(AX*4), Y12, Y0
	VFMADD231PS (R9)(AX*4), Y13, Y0
	VFMADD231PS (R10)(AX*4), Y14, Y0
	VFMADD231PS (R11)(AX*4), Y15, Y0
	VMOVUPS     Y0, (DI)(AX*4)

x4done:
	VZEROUPPER
	RET

// func scaleAVX(n int, alpha float32, x *float32)
// x[i] *= alpha for i < n; n must be a multiple of 8.
TEXT ·scaleAVX(SB), NOSPLIT, $0-24
	MOVQ         n+0(FP), CX
	VBROADCASTSS alpha+8(FP), Y15
	MOVQ         x+16(FP), DI
	XORQ         AX, AX

sloop:
	CMPQ    AX, CX
	JGE     sdone
	VMULPS  (DI)(AX*4), Y15, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     sloop

sdone:
	VZEROUPPER
	RET

// func addAVX(n int, dst, x *float32)
// dst[i] += x[i] for i < n; n must be a multiple of 8.
TEXT ·addAVX(SB), NOSPLIT, $0-24
	MOVQ n+0(FP), CX
	MOVQ dst+8(FP), DI
	MOVQ x+16(FP), SI
	XORQ AX, AX

adloop:
	CMPQ    AX, CX
	JGE     addone
	VMOVUPS (DI)(AX*4), Y0
	VADDPS  (SI)(AX*4), Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     adloop

addone:
	VZEROUPPER
	RET

// func sumAVX(n int, x *float32) float32
// sum_{i<n} x[i]; n must be a multiple of 32. Used for the bandwidth probe.
TEXT ·sumAVX(SB), NOSPLIT, $0-20
	MOVQ   n+0(FP), CX
	MOVQ   x+8(FP), SI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ   AX, AX

suloop:
	CMPQ   AX, CX
	JGE    sudone
	VADDPS (SI)(AX*4), Y0, Y0
	VADDPS 32(SI)(AX*4), Y1, Y1
	VADDPS 64(SI)(AX*4), Y2, Y2
	VADDPS 96(SI)(AX*4), Y3, Y3
	ADDQ   $32, AX
	JMP    suloop

sudone:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUM(Y0, X0)
	VZEROUPPER
	MOVSS  X0, ret+16(FP)
	RET

// AVX-512 6x32 micro-kernel over strided panels, one k step: B row (32
// floats at ob) in Z28/Z29, broadcasts of the six A values at oa in
// Z30/Z31, accumulators Z0..Z11. oa and ob are address operands
// ((AX)(R9*1) etc.) that the displacements are prefixed to.
#define STEP512(oa, ob) \
	VMOVUPS      ob, Z28 \
	VMOVUPS      64 ob, Z29 \
	VBROADCASTSS oa, Z30 \
	VFMADD231PS  Z28, Z30, Z0 \
	VFMADD231PS  Z29, Z30, Z1 \
	VBROADCASTSS 4 oa, Z31 \
	VFMADD231PS  Z28, Z31, Z2 \
	VFMADD231PS  Z29, Z31, Z3 \
	VBROADCASTSS 8 oa, Z30 \
	VFMADD231PS  Z28, Z30, Z4 \
	VFMADD231PS  Z29, Z30, Z5 \
	VBROADCASTSS 12 oa, Z31 \
	VFMADD231PS  Z28, Z31, Z6 \
	VFMADD231PS  Z29, Z31, Z7 \
	VBROADCASTSS 16 oa, Z30 \
	VFMADD231PS  Z28, Z30, Z8 \
	VFMADD231PS  Z29, Z30, Z9 \
	VBROADCASTSS 20 oa, Z31 \
	VFMADD231PS  Z28, Z31, Z10 \
	VFMADD231PS  Z29, Z31, Z11

// C row (32 floats at DI) += alpha(Z12) * (lo, hi); DI += DX.
#define STOREROW512(lo, hi) \
	VMOVUPS     (DI), Z13 \
	VFMADD231PS lo, Z12, Z13 \
	VMOVUPS     Z13, (DI) \
	VMOVUPS     64(DI), Z14 \
	VFMADD231PS hi, Z12, Z14 \
	VMOVUPS     Z14, 64(DI) \
	ADDQ        DX, DI

// C row (32 floats at DI) = alpha(Z12) * (lo, hi); DI += DX.
#define SETROW512(lo, hi) \
	VMULPS  lo, Z12, Z13 \
	VMOVUPS Z13, (DI) \
	VMULPS  hi, Z12, Z14 \
	VMOVUPS Z14, 64(DI) \
	ADDQ    DX, DI

// The 6x32 kernels' accumulators Z0..Z11: cleared; added to C (alpha in
// Z12); written to C.
#define ZEROACC512 \
	ZEROZ \
	VPXORD Z8, Z8, Z8 \
	VPXORD Z9, Z9, Z9 \
	VPXORD Z10, Z10, Z10 \
	VPXORD Z11, Z11, Z11

#define ADDC512 \
	STOREROW512(Z0, Z1) \
	STOREROW512(Z2, Z3) \
	STOREROW512(Z4, Z5) \
	STOREROW512(Z6, Z7) \
	STOREROW512(Z8, Z9) \
	STOREROW512(Z10, Z11)

#define SETC512 \
	SETROW512(Z0, Z1) \
	SETROW512(Z2, Z3) \
	SETROW512(Z4, Z5) \
	SETROW512(Z6, Z7) \
	SETROW512(Z8, Z9) \
	SETROW512(Z10, Z11)

// func sgemmKernel6x32(kc int, a *float32, as int, b *float32, bs int, c *float32, ldc int, alpha float32, set bool)
// C[0:6, 0:32] (+)= alpha * A(6 x kc) * B(kc x 32), where step p's six A
// values are a[p*as : p*as+6] and its B row b[p*bs : p*bs+32] (packed
// panels: as = 6, bs = 32; unpacked op(A) = Aᵀ: as = lda; unpacked B:
// bs = ldb). set overwrites C instead of adding to it.
TEXT ·sgemmKernel6x32(SB), NOSPLIT, $0-61
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ as+16(FP), R9
	SHLQ $2, R9
	MOVQ b+24(FP), BX
	MOVQ bs+32(FP), R10
	SHLQ $2, R10
	LEAQ (R9)(R9*2), R11  // 3 A steps
	LEAQ (R10)(R10*2), R12 // 3 B rows
	MOVQ c+40(FP), DI
	MOVQ ldc+48(FP), DX
	SHLQ $2, DX
	MOVQ       DI, R8
	PREFETCHT0 (R8)
	PREFETCHT0 64(R8)
	PREFETCHT0 124(R8)
	ADDQ       DX, R8
	PREFETCHT0 (R8)
	PREFETCHT0 64(R8)
	PREFETCHT0 124(R8)
	ADDQ       DX, R8
	PREFETCHT0 (R8)
	PREFETCHT0 64(R8)
	PREFETCHT0 124(R8)
	ADDQ       DX, R8
	PREFETCHT0 (R8)
	PREFETCHT0 64(R8)
	PREFETCHT0 124(R8)
	ADDQ       DX, R8
	PREFETCHT0 (R8)
	PREFETCHT0 64(R8)
	PREFETCHT0 124(R8)
	ADDQ       DX, R8
	PREFETCHT0 (R8)
	PREFETCHT0 64(R8)
	PREFETCHT0 124(R8)
	ZEROACC512

loop4z:
	CMPQ       CX, $4
	JLT        loop1z
	PREFETCHT0 (AX)(R11*4)
	PREFETCHT0 (BX)(R10*8)
	STEP512((AX), (BX))
	PREFETCHT0 64(BX)(R10*8)
	STEP512((AX)(R9*1), (BX)(R10*1))
	STEP512((AX)(R9*2), (BX)(R10*2))
	STEP512((AX)(R11*1), (BX)(R12*1))
	LEAQ       (AX)(R9*4), AX
	LEAQ       (BX)(R10*4), BX
	SUBQ       $4, CX
	JMP        loop4z

loop1z:
	TESTQ CX, CX
	JEQ   storez
	STEP512((AX), (BX))
	ADDQ  R9, AX
	ADDQ  R10, BX
	DECQ  CX
	JMP   loop1z

storez:
	VBROADCASTSS alpha+56(FP), Z12
	MOVBLZX      set+60(FP), CX
	TESTQ        CX, CX
	JNE          setz
	ADDC512
	VZEROUPPER
	RET

setz:
	SETC512
	VZEROUPPER
	RET

// One k step of the 6x32 kernel with A read from six rows in place: the
// step's A values are at d(AX), d(AX)(R9*1), d(AX)(R9*2), d(R13),
// d(R13)(R9*1), d(R13)(R9*2) (row stride R9, R13 = row 3); B row at ob.
#define STEP512R(d, ob) \
	VMOVUPS      ob, Z28 \
	VMOVUPS      64 ob, Z29 \
	VBROADCASTSS d(AX), Z30 \
	VFMADD231PS  Z28, Z30, Z0 \
	VFMADD231PS  Z29, Z30, Z1 \
	VBROADCASTSS d(AX)(R9*1), Z31 \
	VFMADD231PS  Z28, Z31, Z2 \
	VFMADD231PS  Z29, Z31, Z3 \
	VBROADCASTSS d(AX)(R9*2), Z30 \
	VFMADD231PS  Z28, Z30, Z4 \
	VFMADD231PS  Z29, Z30, Z5 \
	VBROADCASTSS d(R13), Z31 \
	VFMADD231PS  Z28, Z31, Z6 \
	VFMADD231PS  Z29, Z31, Z7 \
	VBROADCASTSS d(R13)(R9*1), Z30 \
	VFMADD231PS  Z28, Z30, Z8 \
	VFMADD231PS  Z29, Z30, Z9 \
	VBROADCASTSS d(R13)(R9*2), Z31 \
	VFMADD231PS  Z28, Z31, Z10 \
	VFMADD231PS  Z29, Z31, Z11

// func sgemmKernel6x32r(kc int, a *float32, lda int, b *float32, bs int, c *float32, ldc int, alpha float32, set bool)
// sgemmKernel6x32 with A read in place from six rows of a row-major matrix:
// step p's A values are a[r*lda + p], r < 6 (op(A) = A, not packed).
TEXT ·sgemmKernel6x32r(SB), NOSPLIT, $0-61
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ lda+16(FP), R9
	SHLQ $2, R9
	LEAQ (AX)(R9*2), R13
	ADDQ R9, R13
	MOVQ b+24(FP), BX
	MOVQ bs+32(FP), R10
	SHLQ $2, R10
	LEAQ (R10)(R10*2), R12 // 3 B rows
	MOVQ c+40(FP), DI
	MOVQ ldc+48(FP), DX
	SHLQ $2, DX
	ZEROACC512

loop4r:
	CMPQ       CX, $4
	JLT        loop1r
	PREFETCHT0 (BX)(R10*8)
	STEP512R(0, (BX))
	PREFETCHT0 64(BX)(R10*8)
	STEP512R(4, (BX)(R10*1))
	STEP512R(8, (BX)(R10*2))
	STEP512R(12, (BX)(R12*1))
	ADDQ       $16, AX
	ADDQ       $16, R13
	LEAQ       (BX)(R10*4), BX
	SUBQ       $4, CX
	JMP        loop4r

loop1r:
	TESTQ CX, CX
	JEQ   storer
	STEP512R(0, (BX))
	ADDQ  $4, AX
	ADDQ  $4, R13
	ADDQ  R10, BX
	DECQ  CX
	JMP   loop1r

storer:
	VBROADCASTSS alpha+56(FP), Z12
	MOVBLZX      set+60(FP), CX
	TESTQ        CX, CX
	JNE          setr
	ADDC512
	VZEROUPPER
	RET

setr:
	SETC512
	VZEROUPPER
	RET

// 8x8 transpose: rows in Y0..Y7 -> columns in Y8..Y15 (Y8 = column 0).
#define TRANSPOSE8 \
	VUNPCKLPS  Y1, Y0, Y8 \
	VUNPCKHPS  Y1, Y0, Y9 \
	VUNPCKLPS  Y3, Y2, Y10 \
	VUNPCKHPS  Y3, Y2, Y11 \
	VUNPCKLPS  Y5, Y4, Y12 \
	VUNPCKHPS  Y5, Y4, Y13 \
	VUNPCKLPS  Y7, Y6, Y14 \
	VUNPCKHPS  Y7, Y6, Y15 \
	VSHUFPS    $0x44, Y10, Y8, Y0 \
	VSHUFPS    $0xEE, Y10, Y8, Y1 \
	VSHUFPS    $0x44, Y11, Y9, Y2 \
	VSHUFPS    $0xEE, Y11, Y9, Y3 \
	VSHUFPS    $0x44, Y14, Y12, Y4 \
	VSHUFPS    $0xEE, Y14, Y12, Y5 \
	VSHUFPS    $0x44, Y15, Y13, Y6 \
	VSHUFPS    $0xEE, Y15, Y13, Y7 \
	VPERM2F128 $0x20, Y4, Y0, Y8 \
	VPERM2F128 $0x20, Y5, Y1, Y9 \
	VPERM2F128 $0x20, Y6, Y2, Y10 \
	VPERM2F128 $0x20, Y7, Y3, Y11 \
	VPERM2F128 $0x31, Y4, Y0, Y12 \
	VPERM2F128 $0x31, Y5, Y1, Y13 \
	VPERM2F128 $0x31, Y6, Y2, Y14 \
	VPERM2F128 $0x31, Y7, Y3, Y15

// func packBT8(n8 int, src *float32, lds int, dst *float32, ldd int)
// For 8 source rows (stride lds floats) and p < 8*n8:
// dst[p*ldd + j] = src[j*lds + p], j < 8.
TEXT ·packBT8(SB), NOSPLIT, $0-40
	MOVQ n8+0(FP), CX
	MOVQ src+8(FP), SI
	MOVQ lds+16(FP), DX
	SHLQ $2, DX
	MOVQ dst+24(FP), DI
	MOVQ ldd+32(FP), R8
	SHLQ $2, R8
	LEAQ (DX)(DX*2), R9  // 3*lds
	LEAQ (R8)(R8*2), R10 // 3*ldd

bt8loop:
	TESTQ CX, CX
	JEQ   bt8done
	MOVQ    SI, R11
	VMOVUPS (R11), Y0
	VMOVUPS (R11)(DX*1), Y1
	VMOVUPS (R11)(DX*2), Y2
	VMOVUPS (R11)(R9*1), Y3
	LEAQ    (R11)(DX*4), R11
	VMOVUPS (R11), Y4
	VMOVUPS (R11)(DX*1), Y5
	VMOVUPS (R11)(DX*2), Y6
	VMOVUPS (R11)(R9*1), Y7
	TRANSPOSE8
	MOVQ    DI, R11
	VMOVUPS Y8, (R11)
	VMOVUPS Y9, (R11)(R8*1)
	VMOVUPS Y10, (R11)(R8*2)
	VMOVUPS Y11, (R11)(R10*1)
	LEAQ    (R11)(R8*4), R11
	VMOVUPS Y12, (R11)
	VMOVUPS Y13, (R11)(R8*1)
	VMOVUPS Y14, (R11)(R8*2)
	VMOVUPS Y15, (R11)(R10*1)
	LEAQ    (R11)(R8*4), DI
	ADDQ    $32, SI
	DECQ    CX
	JMP     bt8loop

bt8done:
	VZEROUPPER
	RET

#define STORE6(y, x, off) \
	VMOVUPS      x, off(DI) \
	VEXTRACTF128 $1, y, X0 \
	VMOVQ        X0, off+16(DI)

// func packA6(n8 int, src *float32, lds int, dst *float32)
// For 6 source rows (stride lds floats) and p < 8*n8:
// dst[p*6 + r] = src[r*lds + p], r < 6.
TEXT ·packA6(SB), NOSPLIT, $0-32
	MOVQ n8+0(FP), CX
	MOVQ src+8(FP), SI
	MOVQ lds+16(FP), DX
	SHLQ $2, DX
	MOVQ dst+24(FP), DI
	LEAQ (DX)(DX*2), R9 // 3*lds

a6loop:
	TESTQ CX, CX
	JEQ   a6done
	MOVQ    SI, R11
	VMOVUPS (R11), Y0
	VMOVUPS (R11)(DX*1), Y1
	VMOVUPS (R11)(DX*2), Y2
	VMOVUPS (R11)(R9*1), Y3
	LEAQ    (R11)(DX*4), R11
	VMOVUPS (R11), Y4
	VMOVUPS (R11)(DX*1), Y5
	VXORPS  Y6, Y6, Y6
	VXORPS  Y7, Y7, Y7
	TRANSPOSE8
	STORE6(Y8, X8, 0)
	STORE6(Y9, X9, 24)
	STORE6(Y10, X10, 48)
	STORE6(Y11, X11, 72)
	STORE6(Y12, X12, 96)
	STORE6(Y13, X13, 120)
	STORE6(Y14, X14, 144)
	STORE6(Y15, X15, 168)
	ADDQ    $192, DI
	ADDQ    $32, SI
	DECQ    CX
	JMP     a6loop

a6done:
	VZEROUPPER
	RET

// func packA6T(n int, src *float32, lds int, dst *float32)
// dst[p*6 + r] = src[p*lds + r] for p < n, r < 6.
TEXT ·packA6T(SB), NOSPLIT, $0-32
	MOVQ n+0(FP), CX
	MOVQ src+8(FP), SI
	MOVQ lds+16(FP), DX
	SHLQ $2, DX
	MOVQ dst+24(FP), DI

a6tloop:
	TESTQ  CX, CX
	JEQ    a6tdone
	MOVUPS (SI), X0
	MOVQ   16(SI), X1
	MOVUPS X0, (DI)
	MOVQ   X1, 16(DI)
	ADDQ   DX, SI
	ADDQ   $24, DI
	DECQ   CX
	JMP    a6tloop

a6tdone:
	RET

// Constants for the vector exp: each is 8 copies (32 bytes).
// hi at 0
DATA expc<>+0(SB)/4, $0x42b17217
DATA expc<>+4(SB)/4, $0x42b17217
DATA expc<>+8(SB)/4, $0x42b17217
DATA expc<>+12(SB)/4, $0x42b17217
DATA expc<>+16(SB)/4, $0x42b17217
DATA expc<>+20(SB)/4, $0x42b17217
DATA expc<>+24(SB)/4, $0x42b17217
DATA expc<>+28(SB)/4, $0x42b17217
// lo at 32
DATA expc<>+32(SB)/4, $0xc2aeac4f
DATA expc<>+36(SB)/4, $0xc2aeac4f
DATA expc<>+40(SB)/4, $0xc2aeac4f
DATA expc<>+44(SB)/4, $0xc2aeac4f
DATA expc<>+48(SB)/4, $0xc2aeac4f
DATA expc<>+52(SB)/4, $0xc2aeac4f
DATA expc<>+56(SB)/4, $0xc2aeac4f
DATA expc<>+60(SB)/4, $0xc2aeac4f
// log2e at 64
DATA expc<>+64(SB)/4, $0x3fb8aa3b
DATA expc<>+68(SB)/4, $0x3fb8aa3b
DATA expc<>+72(SB)/4, $0x3fb8aa3b
DATA expc<>+76(SB)/4, $0x3fb8aa3b
DATA expc<>+80(SB)/4, $0x3fb8aa3b
DATA expc<>+84(SB)/4, $0x3fb8aa3b
DATA expc<>+88(SB)/4, $0x3fb8aa3b
DATA expc<>+92(SB)/4, $0x3fb8aa3b
// ln2hi at 96
DATA expc<>+96(SB)/4, $0x3f318000
DATA expc<>+100(SB)/4, $0x3f318000
DATA expc<>+104(SB)/4, $0x3f318000
DATA expc<>+108(SB)/4, $0x3f318000
DATA expc<>+112(SB)/4, $0x3f318000
DATA expc<>+116(SB)/4, $0x3f318000
DATA expc<>+120(SB)/4, $0x3f318000
DATA expc<>+124(SB)/4, $0x3f318000
// ln2lo at 128
DATA expc<>+128(SB)/4, $0xb95e8083
DATA expc<>+132(SB)/4, $0xb95e8083
DATA expc<>+136(SB)/4, $0xb95e8083
DATA expc<>+140(SB)/4, $0xb95e8083
DATA expc<>+144(SB)/4, $0xb95e8083
DATA expc<>+148(SB)/4, $0xb95e8083
DATA expc<>+152(SB)/4, $0xb95e8083
DATA expc<>+156(SB)/4, $0xb95e8083
// c0 at 160
DATA expc<>+160(SB)/4, $0x39506967
DATA expc<>+164(SB)/4, $0x39506967
DATA expc<>+168(SB)/4, $0x39506967
DATA expc<>+172(SB)/4, $0x39506967
DATA expc<>+176(SB)/4, $0x39506967
DATA expc<>+180(SB)/4, $0x39506967
DATA expc<>+184(SB)/4, $0x39506967
DATA expc<>+188(SB)/4, $0x39506967
// c1 at 192
DATA expc<>+192(SB)/4, $0x3ab743ce
DATA expc<>+196(SB)/4, $0x3ab743ce
DATA expc<>+200(SB)/4, $0x3ab743ce
DATA expc<>+204(SB)/4, $0x3ab743ce
DATA expc<>+208(SB)/4, $0x3ab743ce
DATA expc<>+212(SB)/4, $0x3ab743ce
DATA expc<>+216(SB)/4, $0x3ab743ce
DATA expc<>+220(SB)/4, $0x3ab743ce
// c2 at 224
DATA expc<>+224(SB)/4, $0x3c088908
DATA expc<>+228(SB)/4, $0x3c088908
DATA expc<>+232(SB)/4, $0x3c088908
DATA expc<>+236(SB)/4, $0x3c088908
DATA expc<>+240(SB)/4, $0x3c088908
DATA expc<>+244(SB)/4, $0x3c088908
DATA expc<>+248(SB)/4, $0x3c088908
DATA expc<>+252(SB)/4, $0x3c088908
// c3 at 256
DATA expc<>+256(SB)/4, $0x3d2aa9c1
DATA expc<>+260(SB)/4, $0x3d2aa9c1
DATA expc<>+264(SB)/4, $0x3d2aa9c1
DATA expc<>+268(SB)/4, $0x3d2aa9c1
DATA expc<>+272(SB)/4, $0x3d2aa9c1
DATA expc<>+276(SB)/4, $0x3d2aa9c1
DATA expc<>+280(SB)/4, $0x3d2aa9c1
DATA expc<>+284(SB)/4, $0x3d2aa9c1
// c4 at 288
DATA expc<>+288(SB)/4, $0x3e2aaaaa
DATA expc<>+292(SB)/4, $0x3e2aaaaa
DATA expc<>+296(SB)/4, $0x3e2aaaaa
DATA expc<>+300(SB)/4, $0x3e2aaaaa
DATA expc<>+304(SB)/4, $0x3e2aaaaa
DATA expc<>+308(SB)/4, $0x3e2aaaaa
DATA expc<>+312(SB)/4, $0x3e2aaaaa
DATA expc<>+316(SB)/4, $0x3e2aaaaa
// c5 at 320
DATA expc<>+320(SB)/4, $0x3f000000
DATA expc<>+324(SB)/4, $0x3f000000
DATA expc<>+328(SB)/4, $0x3f000000
DATA expc<>+332(SB)/4, $0x3f000000
DATA expc<>+336(SB)/4, $0x3f000000
DATA expc<>+340(SB)/4, $0x3f000000
DATA expc<>+344(SB)/4, $0x3f000000
DATA expc<>+348(SB)/4, $0x3f000000
// one at 352
DATA expc<>+352(SB)/4, $0x3f800000
DATA expc<>+356(SB)/4, $0x3f800000
DATA expc<>+360(SB)/4, $0x3f800000
DATA expc<>+364(SB)/4, $0x3f800000
DATA expc<>+368(SB)/4, $0x3f800000
DATA expc<>+372(SB)/4, $0x3f800000
DATA expc<>+376(SB)/4, $0x3f800000
DATA expc<>+380(SB)/4, $0x3f800000
// i127 at 384
DATA expc<>+384(SB)/4, $0x0000007f
DATA expc<>+388(SB)/4, $0x0000007f
DATA expc<>+392(SB)/4, $0x0000007f
DATA expc<>+396(SB)/4, $0x0000007f
DATA expc<>+400(SB)/4, $0x0000007f
DATA expc<>+404(SB)/4, $0x0000007f
DATA expc<>+408(SB)/4, $0x0000007f
DATA expc<>+412(SB)/4, $0x0000007f
// sign at 416
DATA expc<>+416(SB)/4, $0x80000000
DATA expc<>+420(SB)/4, $0x80000000
DATA expc<>+424(SB)/4, $0x80000000
DATA expc<>+428(SB)/4, $0x80000000
DATA expc<>+432(SB)/4, $0x80000000
DATA expc<>+436(SB)/4, $0x80000000
DATA expc<>+440(SB)/4, $0x80000000
DATA expc<>+444(SB)/4, $0x80000000
GLOBL expc<>(SB), RODATA|NOPTR, $448

// EXP8: Y0 = exp(Y0) lane-wise (Cephes expf polynomial; NaN propagates,
// inputs below -87.33654 give 0, overflow gives +Inf). Needs Y14 = hi
// clamp, Y15 = lo clamp; clobbers Y1..Y6.
#define EXP8 \
	VMAXPS      Y0, Y15, Y1 \
	VMINPS      Y1, Y14, Y1 \
	VMULPS      expc<>+64(SB), Y1, Y2 \
	VROUNDPS    $0, Y2, Y2 \
	VFNMADD231PS expc<>+96(SB), Y2, Y1 \
	VFNMADD231PS expc<>+128(SB), Y2, Y1 \
	VMOVUPS     expc<>+160(SB), Y3 \
	VFMADD213PS expc<>+192(SB), Y1, Y3 \
	VFMADD213PS expc<>+224(SB), Y1, Y3 \
	VFMADD213PS expc<>+256(SB), Y1, Y3 \
	VFMADD213PS expc<>+288(SB), Y1, Y3 \
	VFMADD213PS expc<>+320(SB), Y1, Y3 \
	VMULPS      Y1, Y1, Y4 \
	VFMADD213PS Y1, Y4, Y3 \
	VADDPS      expc<>+352(SB), Y3, Y3 \
	VCVTPS2DQ   Y2, Y5 \
	VPADDD      expc<>+384(SB), Y5, Y5 \
	VPSLLD      $23, Y5, Y5 \
	VCMPPS      $1, Y15, Y0, Y6 \
	VMULPS      Y5, Y3, Y0 \
	VANDNPS     Y0, Y6, Y0

#define EXPSETUP \
	VMOVUPS expc<>+0(SB), Y14 \
	VMOVUPS expc<>+32(SB), Y15

// func expSumAVX(n int, x *float32, shift float32) float32
// x[i] = exp(x[i] - shift) for i < n (n a multiple of 8); returns the sum.
TEXT ·expSumAVX(SB), NOSPLIT, $0-28
	MOVQ         n+0(FP), CX
	MOVQ         x+8(FP), DI
	VBROADCASTSS shift+16(FP), Y8
	EXPSETUP
	VXORPS       Y7, Y7, Y7

esloop:
	CMPQ    CX, $0
	JLE     esdone
	VMOVUPS (DI), Y0
	VSUBPS  Y8, Y0, Y0
	EXP8
	VMOVUPS Y0, (DI)
	VADDPS  Y0, Y7, Y7
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     esloop

esdone:
	HSUM(Y7, X7)
	VZEROUPPER
	MOVSS X7, ret+24(FP)
	RET

// func swigluAVX(n int, dst, gate, up *float32)
// dst[i] = gate[i]/(1+exp(-gate[i])) * up[i] for i < n (n a multiple of 8);
// up == nil means SiLU (no product).
TEXT ·swigluAVX(SB), NOSPLIT, $0-32
	MOVQ n+0(FP), CX
	MOVQ dst+8(FP), DI
	MOVQ gate+16(FP), SI
	MOVQ up+24(FP), DX
	EXPSETUP

sgloop:
	CMPQ    CX, $0
	JLE     sgdone
	VMOVUPS (SI), Y9
	VXORPS  expc<>+416(SB), Y9, Y0
	EXP8
	VADDPS  expc<>+352(SB), Y0, Y0
	VDIVPS  Y0, Y9, Y0
	TESTQ   DX, DX
	JEQ     sgstore
	VMULPS  (DX), Y0, Y0
	ADDQ    $32, DX

sgstore:
	VMOVUPS Y0, (DI)
	ADDQ    $32, DI
	ADDQ    $32, SI
	SUBQ    $8, CX
	JMP     sgloop

sgdone:
	VZEROUPPER
	RET

// func expSumDotAVX(n int, x *float32, shift float32) (sum, sumED float64)
// With d = x[i] - shift: x[i] = exp(d) for i < n (n a multiple of 8);
// returns Σ exp(d) and Σ exp(d)·d, accumulated in float64 (the training
// log-softmax's normaliser and entropy, without a copy of the logits).
TEXT ·expSumDotAVX(SB), NOSPLIT, $0-40
	MOVQ         n+0(FP), CX
	MOVQ         x+8(FP), DI
	VBROADCASTSS shift+16(FP), Y8
	EXPSETUP
	VXORPD       Y7, Y7, Y7
	VXORPD       Y13, Y13, Y13

edloop:
	CMPQ         CX, $0
	JLE          eddone
	VMOVUPS      (DI), Y0
	VSUBPS       Y8, Y0, Y0
	VMOVAPS      Y0, Y9
	EXP8
	VMOVUPS      Y0, (DI)
	VMULPS       Y9, Y0, Y10
	VCVTPS2PD    X0, Y11
	VADDPD       Y11, Y7, Y7
	VEXTRACTF128 $1, Y0, X11
	VCVTPS2PD    X11, Y11
	VADDPD       Y11, Y7, Y7
	VCVTPS2PD    X10, Y11
	VADDPD       Y11, Y13, Y13
	VEXTRACTF128 $1, Y10, X11
	VCVTPS2PD    X11, Y11
	VADDPD       Y11, Y13, Y13
	ADDQ         $32, DI
	SUBQ         $8, CX
	JMP          edloop

eddone:
	VEXTRACTF128 $1, Y7, X1
	VADDPD       X1, X7, X7
	VHADDPD      X7, X7, X7
	VEXTRACTF128 $1, Y13, X1
	VADDPD       X1, X13, X13
	VHADDPD      X13, X13, X13
	VZEROUPPER
	MOVSD        X7, sum+24(FP)
	MOVSD        X13, sumED+32(FP)
	RET

// func swigluBackAVX(n int, dg, du, gate, up, dh *float32)
// The SwiGLU backward for i < n (n a multiple of 8), with s = σ(gate[i]):
// du[i] = dh[i]·gate[i]·s, dg[i] = dh[i]·up[i]·s·(1 + gate[i]·(1−s)).
TEXT ·swigluBackAVX(SB), NOSPLIT, $0-48
	MOVQ    n+0(FP), CX
	MOVQ    dg+8(FP), DI
	MOVQ    du+16(FP), R8
	MOVQ    gate+24(FP), SI
	MOVQ    up+32(FP), DX
	MOVQ    dh+40(FP), BX
	EXPSETUP
	VMOVUPS expc<>+352(SB), Y11

sbloop:
	CMPQ    CX, $0
	JLE     sbdone
	VMOVUPS (SI), Y9
	VXORPS  expc<>+416(SB), Y9, Y0
	EXP8
	VADDPS  Y11, Y0, Y0
	VDIVPS  Y0, Y11, Y10
	VMOVUPS (BX), Y12
	VMULPS  Y9, Y12, Y13
	VMULPS  Y10, Y13, Y13
	VMOVUPS Y13, (R8)
	VSUBPS  Y10, Y11, Y1
	VMULPS  Y1, Y9, Y1
	VADDPS  Y11, Y1, Y1
	VMULPS  (DX), Y12, Y2
	VMULPS  Y10, Y2, Y2
	VMULPS  Y1, Y2, Y2
	VMOVUPS Y2, (DI)
	ADDQ    $32, DI
	ADDQ    $32, R8
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, BX
	SUBQ    $8, CX
	JMP     sbloop

sbdone:
	VZEROUPPER
	RET

// func mulScaleAVX(n int, dst, x, w *float32, s float32)
// dst[i] = x[i] * s * w[i] for i < n (n a multiple of 8); w == nil means 1.
TEXT ·mulScaleAVX(SB), NOSPLIT, $0-36
	MOVQ         n+0(FP), CX
	MOVQ         dst+8(FP), DI
	MOVQ         x+16(FP), SI
	MOVQ         w+24(FP), DX
	VBROADCASTSS s+32(FP), Y15

msloop:
	CMPQ    CX, $0
	JLE     msdone
	VMULPS  (SI), Y15, Y0
	TESTQ   DX, DX
	JEQ     msstore
	VMULPS  (DX), Y0, Y0
	ADDQ    $32, DX

msstore:
	VMOVUPS Y0, (DI)
	ADDQ    $32, DI
	ADDQ    $32, SI
	SUBQ    $8, CX
	JMP     msloop

msdone:
	VZEROUPPER
	RET

// func maxAVX(n int, x *float32) float32
// max_{i<n} x[i]; n must be a multiple of 8 and > 0 (result unspecified
// when x holds NaNs).
TEXT ·maxAVX(SB), NOSPLIT, $0-20
	MOVQ    n+0(FP), CX
	MOVQ    x+8(FP), SI
	VMOVUPS (SI), Y0
	VMOVUPS Y0, Y1
	MOVQ    $8, AX

mxloop16:
	MOVQ CX, BX
	SUBQ AX, BX
	CMPQ BX, $16
	JLT  mxloop8
	VMAXPS (SI)(AX*4), Y0, Y0
	VMAXPS 32(SI)(AX*4), Y1, Y1
	ADDQ   $16, AX
	JMP    mxloop16

mxloop8:
	CMPQ   BX, $8
	JLT    mxdone
	VMAXPS (SI)(AX*4), Y0, Y0

mxdone:
	VMAXPS       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0x4E, X0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0xB1, X0, X1
	VMAXPS       X1, X0, X0
	VZEROUPPER
	MOVSS        X0, ret+16(FP)
	RET

// func shortDots8(blocks, k int, x, w *float32, y *float32, add bool)
// For each of blocks groups of eight rows of w (k values each, a multiple
// of 8, back to back): y[i] = Σ x[p]·row_i[p] (+ y[i] when add), i < 8.
// One accumulator a row over k/8 chunks, then the eight sums by a tree of
// horizontal adds: LoRA's B factor (rows of rank r values) in decode,
// where a four-row dot kernel call a group of 16-value rows (dot4R and
// the Go around it) streamed 6 GB/s.
TEXT ·shortDots8(SB), NOSPLIT, $0-41
	MOVQ    blocks+0(FP), CX
	MOVQ    k+8(FP), R9
	SHLQ    $2, R9
	MOVQ    x+16(FP), SI
	MOVQ    w+24(FP), BX
	MOVQ    y+32(FP), DI
	MOVBLZX add+40(FP), R10
	LEAQ    (R9)(R9*2), DX

sdblk:
	TESTQ  CX, CX
	JZ     sddone
	MOVQ   BX, R8
	LEAQ   (BX)(R9*4), R12
	LEAQ   (BX)(DX*1), R13
	LEAQ   (R12)(DX*1), R14
	MOVQ   SI, R11
	MOVQ   R9, AX
	SHRQ   $5, AX
	ZEROY

sdchunk:
	VMOVUPS     (R11), Y8
	VFMADD231PS (R8), Y8, Y0
	VFMADD231PS (R8)(R9*1), Y8, Y1
	VFMADD231PS (R8)(R9*2), Y8, Y2
	VFMADD231PS (R13), Y8, Y3
	VFMADD231PS (R12), Y8, Y4
	VFMADD231PS (R12)(R9*1), Y8, Y5
	VFMADD231PS (R12)(R9*2), Y8, Y6
	VFMADD231PS (R14), Y8, Y7
	ADDQ        $32, R11
	ADDQ        $32, R8
	ADDQ        $32, R12
	ADDQ        $32, R13
	ADDQ        $32, R14
	DECQ        AX
	JNZ         sdchunk

	VHADDPS    Y1, Y0, Y0
	VHADDPS    Y3, Y2, Y2
	VHADDPS    Y5, Y4, Y4
	VHADDPS    Y7, Y6, Y6
	VHADDPS    Y2, Y0, Y0
	VHADDPS    Y6, Y4, Y4
	VPERM2F128 $0x20, Y4, Y0, Y1
	VPERM2F128 $0x31, Y4, Y0, Y2
	VADDPS     Y2, Y1, Y1
	TESTQ      R10, R10
	JZ         sdstore
	VADDPS     (DI), Y1, Y1

sdstore:
	VMOVUPS Y1, (DI)
	ADDQ    $32, DI
	LEAQ    (BX)(R9*8), BX
	DECQ    CX
	JMP     sdblk

sddone:
	VZEROUPPER
	RET
