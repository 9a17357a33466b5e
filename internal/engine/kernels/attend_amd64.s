//go:build amd64 && !noasm

#include "textflag.h"
#include "zmm_amd64.h"

// Decode attention kernels (AVX-512): the scores of one query head against
// a block of keys, and the probability-weighted sum of the block's values.

// func scoresZ(n4 int, d int, q *float32, k *float32, rs int, s *float32, scale float32)
// s[p] = scale * q·k[p*rs : p*rs+d] for p < 4*n4; d a multiple of 16. Keys
// go four at a time; the lines of the rows eight ahead are prefetched.
TEXT ·scoresZ(SB), NOSPLIT, $0-52
	MOVQ         n4+0(FP), CX
	MOVQ         d+8(FP), BX
	SHLQ         $2, BX              // row bytes used
	MOVQ         q+16(FP), SI
	MOVQ         k+24(FP), R8
	MOVQ         rs+32(FP), DX
	SHLQ         $2, DX              // row stride in bytes
	MOVQ         s+40(FP), DI
	VBROADCASTSS scale+48(FP), X25
	LEAQ         (DX)(DX*1), R12
	SHLQ         $2, R12             // 8 rows
	LEAQ         (DX)(DX*1), R14
	SHLQ         $1, R14             // 4 rows

sgroup:
	TESTQ  CX, CX
	JZ     sdone
	LEAQ   (R8)(DX*1), R9
	LEAQ   (R9)(DX*1), R10
	LEAQ   (R10)(DX*1), R11
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	XORQ   AX, AX

scol:
	CMPQ        AX, BX
	JGE         sred
	LEAQ        (R8)(AX*1), R13
	PREFETCHT0  (R13)(R12*1)
	LEAQ        (R9)(AX*1), R13
	PREFETCHT0  (R13)(R12*1)
	LEAQ        (R10)(AX*1), R13
	PREFETCHT0  (R13)(R12*1)
	LEAQ        (R11)(AX*1), R13
	PREFETCHT0  (R13)(R12*1)
	VMOVUPS     (SI)(AX*1), Z20
	VFMADD231PS (R8)(AX*1), Z20, Z0
	VFMADD231PS (R9)(AX*1), Z20, Z1
	VFMADD231PS (R10)(AX*1), Z20, Z2
	VFMADD231PS (R11)(AX*1), Z20, Z3
	ADDQ        $64, AX
	JMP         scol

sred:
	FOLD(Z0, Y0, X0)
	FOLD(Z1, Y1, X1)
	FOLD(Z2, Y2, X2)
	FOLD(Z3, Y3, X3)
	VHADDPS X1, X0, X0
	VHADDPS X3, X2, X2
	VHADDPS X2, X0, X0
	VMULPS  X25, X0, X0
	VMOVUPS X0, (DI)
	ADDQ    $16, DI
	ADDQ    R14, R8
	DECQ    CX
	JMP     sgroup

sdone:
	VZEROUPPER
	RET

// func axpyRowsZ(n int, d int, s *float32, v *float32, rs int, o *float32)
// o[0:d] += sum_{p<n} s[p] * v[p*rs : p*rs+d]; d a multiple of 16. Columns
// go 64 at a time (four accumulators), then 16 at a time; each column
// block runs down all n rows.
TEXT ·axpyRowsZ(SB), NOSPLIT, $0-48
	MOVQ n+0(FP), CX
	MOVQ d+8(FP), BX
	SHLQ $2, BX                      // row bytes used
	MOVQ s+16(FP), SI
	MOVQ v+24(FP), R8
	MOVQ rs+32(FP), DX
	SHLQ $2, DX                      // row stride in bytes
	MOVQ o+40(FP), DI
	LEAQ (DX)(DX*1), R12
	SHLQ $2, R12                     // 8 rows
	XORQ AX, AX                      // column byte offset

acol64:
	MOVQ    BX, R13
	SUBQ    AX, R13
	CMPQ    R13, $256
	JLT     acol16
	VMOVUPS (DI)(AX*1), Z0
	VMOVUPS 64(DI)(AX*1), Z1
	VMOVUPS 128(DI)(AX*1), Z2
	VMOVUPS 192(DI)(AX*1), Z3
	LEAQ    (R8)(AX*1), R9           // row p, this column block
	XORQ    R10, R10                 // p

arow64:
	CMPQ         R10, CX
	JGE          astore64
	PREFETCHT0   (R9)(R12*1)
	PREFETCHT0   128(R9)(R12*1)
	VBROADCASTSS (SI)(R10*4), Z8
	VFMADD231PS  (R9), Z8, Z0
	VFMADD231PS  64(R9), Z8, Z1
	VFMADD231PS  128(R9), Z8, Z2
	VFMADD231PS  192(R9), Z8, Z3
	ADDQ         DX, R9
	INCQ         R10
	JMP          arow64

astore64:
	VMOVUPS Z0, (DI)(AX*1)
	VMOVUPS Z1, 64(DI)(AX*1)
	VMOVUPS Z2, 128(DI)(AX*1)
	VMOVUPS Z3, 192(DI)(AX*1)
	ADDQ    $256, AX
	JMP     acol64

acol16:
	CMPQ    AX, BX
	JGE     adone
	VMOVUPS (DI)(AX*1), Z0
	LEAQ    (R8)(AX*1), R9
	XORQ    R10, R10

arow16:
	CMPQ         R10, CX
	JGE          astore16
	VBROADCASTSS (SI)(R10*4), Z8
	VFMADD231PS  (R9), Z8, Z0
	ADDQ         DX, R9
	INCQ         R10
	JMP          arow16

astore16:
	VMOVUPS Z0, (DI)(AX*1)
	ADDQ    $64, AX
	JMP     acol16

adone:
	VZEROUPPER
	RET
