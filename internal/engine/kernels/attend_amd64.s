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

// func scores16Z(n16 int, d int, q *float32, k *float32, rs int, s *float32, scale float32)
// s[p] = scale * q·k[p*rs : p*rs+d] for p < 16*n16; d a multiple of 16. Keys
// go sixteen at a time: one accumulator per key, each 64-byte column of q
// loaded once for the sixteen rows' FMAs (sixteen independent chains, so
// the FMA units rather than their latency set the pace), then the sixteen
// accumulators are summed across their lanes in one transposing tree
// (unpack, 64-bit unpack, two 128-bit lane shuffles: 45 instructions for
// sixteen scores, where a fold per key takes ~6 each) into one vector of
// the sixteen scores.
TEXT ·scores16Z(SB), NOSPLIT, $0-52
	MOVQ         n16+0(FP), CX
	MOVQ         d+8(FP), BX
	SHLQ         $2, BX              // row bytes used
	MOVQ         q+16(FP), SI
	MOVQ         k+24(FP), R8
	MOVQ         rs+32(FP), DX
	SHLQ         $2, DX              // row stride in bytes
	MOVQ         s+40(FP), DI
	VBROADCASTSS scale+48(FP), Z31
	LEAQ         (DX)(DX*2), R9      // 3 rows
	MOVQ         DX, R14
	SHLQ         $2, R14             // 4 rows

s16group:
	TESTQ  CX, CX
	JZ     s16done
	MOVQ   R8, R10                   // rows 0-3
	LEAQ   (R10)(R14*1), R11         // rows 4-7
	LEAQ   (R11)(R14*1), R12         // rows 8-11
	LEAQ   (R12)(R14*1), R13         // rows 12-15
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	XORQ   AX, AX                    // column byte offset

s16col:
	VMOVUPS     (SI)(AX*1), Z16
	VFMADD231PS (R10), Z16, Z0
	VFMADD231PS (R10)(DX*1), Z16, Z1
	VFMADD231PS (R10)(DX*2), Z16, Z2
	VFMADD231PS (R10)(R9*1), Z16, Z3
	VFMADD231PS (R11), Z16, Z4
	VFMADD231PS (R11)(DX*1), Z16, Z5
	VFMADD231PS (R11)(DX*2), Z16, Z6
	VFMADD231PS (R11)(R9*1), Z16, Z7
	VFMADD231PS (R12), Z16, Z8
	VFMADD231PS (R12)(DX*1), Z16, Z9
	VFMADD231PS (R12)(DX*2), Z16, Z10
	VFMADD231PS (R12)(R9*1), Z16, Z11
	VFMADD231PS (R13), Z16, Z12
	VFMADD231PS (R13)(DX*1), Z16, Z13
	VFMADD231PS (R13)(DX*2), Z16, Z14
	VFMADD231PS (R13)(R9*1), Z16, Z15
	ADDQ        $64, R10
	ADDQ        $64, R11
	ADDQ        $64, R12
	ADDQ        $64, R13
	ADDQ        $64, AX
	CMPQ        AX, BX
	JLT         s16col

	// Pairs of keys: per 128-bit lane [a0+a2, b0+b2, a1+a3, b1+b3].
	VUNPCKLPS Z1, Z0, Z16
	VUNPCKHPS Z1, Z0, Z17
	VUNPCKLPS Z3, Z2, Z18
	VUNPCKHPS Z3, Z2, Z19
	VUNPCKLPS Z5, Z4, Z20
	VUNPCKHPS Z5, Z4, Z21
	VUNPCKLPS Z7, Z6, Z22
	VUNPCKHPS Z7, Z6, Z23
	VADDPS    Z17, Z16, Z0
	VADDPS    Z19, Z18, Z2
	VADDPS    Z21, Z20, Z4
	VADDPS    Z23, Z22, Z6
	VUNPCKLPS Z9, Z8, Z16
	VUNPCKHPS Z9, Z8, Z17
	VUNPCKLPS Z11, Z10, Z18
	VUNPCKHPS Z11, Z10, Z19
	VUNPCKLPS Z13, Z12, Z20
	VUNPCKHPS Z13, Z12, Z21
	VUNPCKLPS Z15, Z14, Z22
	VUNPCKHPS Z15, Z14, Z23
	VADDPS    Z17, Z16, Z8
	VADDPS    Z19, Z18, Z10
	VADDPS    Z21, Z20, Z12
	VADDPS    Z23, Z22, Z14

	// Quads: per 128-bit lane the lane's sum for four keys.
	VUNPCKLPD Z2, Z0, Z16
	VUNPCKHPD Z2, Z0, Z17
	VUNPCKLPD Z6, Z4, Z18
	VUNPCKHPD Z6, Z4, Z19
	VUNPCKLPD Z10, Z8, Z20
	VUNPCKHPD Z10, Z8, Z21
	VUNPCKLPD Z14, Z12, Z22
	VUNPCKHPD Z14, Z12, Z23
	VADDPS    Z17, Z16, Z0           // keys 0-3
	VADDPS    Z19, Z18, Z4           // keys 4-7
	VADDPS    Z21, Z20, Z8           // keys 8-11
	VADDPS    Z23, Z22, Z12          // keys 12-15

	// 128-bit lanes: [0-3 L0+L1, 0-3 L2+L3, 4-7 L0+L1, 4-7 L2+L3], then
	// the sixteen keys in order.
	VSHUFF32X4 $0x88, Z4, Z0, Z16
	VSHUFF32X4 $0xdd, Z4, Z0, Z17
	VSHUFF32X4 $0x88, Z12, Z8, Z18
	VSHUFF32X4 $0xdd, Z12, Z8, Z19
	VADDPS     Z17, Z16, Z0
	VADDPS     Z19, Z18, Z8
	VSHUFF32X4 $0x88, Z8, Z0, Z16
	VSHUFF32X4 $0xdd, Z8, Z0, Z17
	VADDPS     Z17, Z16, Z0
	VMULPS     Z31, Z0, Z0
	VMOVUPS    Z0, (DI)
	ADDQ       $64, DI
	LEAQ       (R8)(R14*4), R8       // 16 rows on
	DECQ       CX
	JMP        s16group

s16done:
	VZEROUPPER
	RET

// func axpyRowsZ(n int, d int, s *float32, v *float32, rs int, o *float32)
// o[0:d] += sum_{p<n} s[p] * v[p*rs : p*rs+d]; d a multiple of 16. Columns
// go 64 at a time (four accumulators for the even rows and four for the
// odd ones, so eight FMA chains run at once), then 16 at a time; each
// column block runs down all n rows.
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
	VPXORD  Z4, Z4, Z4               // odd rows' sums: eight FMA chains, not four
	VPXORD  Z5, Z5, Z5
	VPXORD  Z6, Z6, Z6
	VPXORD  Z7, Z7, Z7
	LEAQ    (R8)(AX*1), R9           // row p, this column block
	XORQ    R10, R10                 // p
	LEAQ    -1(CX), R11              // rows that start a pair: p < n-1

arow64:
	CMPQ         R10, R11
	JGE          aodd64
	PREFETCHT0   (R9)(R12*1)
	PREFETCHT0   128(R9)(R12*1)
	VBROADCASTSS (SI)(R10*4), Z8
	VBROADCASTSS 4(SI)(R10*4), Z9
	VFMADD231PS  (R9), Z8, Z0
	VFMADD231PS  64(R9), Z8, Z1
	VFMADD231PS  128(R9), Z8, Z2
	VFMADD231PS  192(R9), Z8, Z3
	ADDQ         DX, R9
	PREFETCHT0   (R9)(R12*1)
	PREFETCHT0   128(R9)(R12*1)
	VFMADD231PS  (R9), Z9, Z4
	VFMADD231PS  64(R9), Z9, Z5
	VFMADD231PS  128(R9), Z9, Z6
	VFMADD231PS  192(R9), Z9, Z7
	ADDQ         DX, R9
	ADDQ         $2, R10
	JMP          arow64

aodd64:
	CMPQ         R10, CX
	JGE          asum64
	VBROADCASTSS (SI)(R10*4), Z8
	VFMADD231PS  (R9), Z8, Z0
	VFMADD231PS  64(R9), Z8, Z1
	VFMADD231PS  128(R9), Z8, Z2
	VFMADD231PS  192(R9), Z8, Z3

asum64:
	VADDPS  Z4, Z0, Z0
	VADDPS  Z5, Z1, Z1
	VADDPS  Z6, Z2, Z2
	VADDPS  Z7, Z3, Z3

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

// The AVX2 kernels (no AVX-512): the same sums as the four-key loop of
// dot4 and axpy4 they replace, bit for bit, in one call for a block's keys
// instead of one call per four keys (the calls and their lane sums were
// most of a decode step's attention).

// func scoresY(n4 int, d int, q *float32, k *float32, rs int, s *float32, scale float32)
// s[p] = scale * q·k[p*rs : p*rs+d] for p < 4*n4; d a multiple of 8. Four
// keys at a time in dot4's order (two accumulators a key: the 16-element
// steps' halves, the 8-element tail into the first), their lane sums in
// one transposing tree whose additions are HSUM's, so each score equals
// scale·dot4's.
TEXT ·scoresY(SB), NOSPLIT, $0-52
	MOVQ         n4+0(FP), R13
	MOVQ         d+8(FP), CX
	MOVQ         q+16(FP), SI
	MOVQ         k+24(FP), R8
	MOVQ         rs+32(FP), DX
	MOVQ         s+40(FP), DI
	VBROADCASTSS scale+48(FP), X14
	ROWS4(2)
	MOVQ         DX, R12
	SHLQ         $2, R12 // four rows
	XORQ         R14, R14 // DOT4Y prefetches nothing
	XORQ         R15, R15

sygroup:
	TESTQ R13, R13
	JZ    sydone
	ZEROY
	XORQ  AX, AX

	DOT4Y(syloop16, syloop8, sysum)

sysum:
	VADDPS       Y1, Y0, Y0
	VADDPS       Y3, Y2, Y2
	VADDPS       Y5, Y4, Y4
	VADDPS       Y7, Y6, Y6
	VEXTRACTF128 $1, Y0, X1
	VEXTRACTF128 $1, Y2, X3
	VEXTRACTF128 $1, Y4, X5
	VEXTRACTF128 $1, Y6, X7
	VADDPS       X1, X0, X0
	VADDPS       X3, X2, X2
	VADDPS       X5, X4, X4
	VADDPS       X7, X6, X6
	VHADDPS      X2, X0, X0 // key 0's pairs, key 1's
	VHADDPS      X6, X4, X4 // keys 2, 3
	VHADDPS      X4, X0, X0 // the four sums
	VMULPS       X14, X0, X0
	VMOVUPS      X0, (DI)
	ADDQ         $16, DI
	ADDQ         R12, R8
	ADDQ         R12, R9
	ADDQ         R12, R10
	ADDQ         R12, R11
	DECQ         R13
	JMP          sygroup

sydone:
	VZEROUPPER
	RET

// func axpyRowsY(n int, d int, s *float32, v *float32, rs int, o *float32)
// o[i] += s[p]*v[p*rs+i] for p < n in order, i < d (a multiple of 8): one
// FMA a key into each output vector, as axpy4 and axpyAVX add them, 64
// outputs at a time in eight registers (8 at a time for the last < 64).
TEXT ·axpyRowsY(SB), NOSPLIT, $0-48
	MOVQ n+0(FP), R13
	MOVQ d+8(FP), CX
	MOVQ s+16(FP), SI
	MOVQ v+24(FP), R8
	MOVQ rs+32(FP), DX
	SHLQ $2, DX
	MOVQ o+40(FP), DI
	TESTQ R13, R13
	JZ    aydone

ay64:
	CMPQ    CX, $64
	JLT     ay8
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	VMOVUPS 128(DI), Y4
	VMOVUPS 160(DI), Y5
	VMOVUPS 192(DI), Y6
	VMOVUPS 224(DI), Y7
	MOVQ    R8, R9
	XORQ    AX, AX

ay64key:
	VBROADCASTSS (SI)(AX*4), Y8
	VFMADD231PS  (R9), Y8, Y0
	VFMADD231PS  32(R9), Y8, Y1
	VFMADD231PS  64(R9), Y8, Y2
	VFMADD231PS  96(R9), Y8, Y3
	VFMADD231PS  128(R9), Y8, Y4
	VFMADD231PS  160(R9), Y8, Y5
	VFMADD231PS  192(R9), Y8, Y6
	VFMADD231PS  224(R9), Y8, Y7
	ADDQ         DX, R9
	INCQ         AX
	CMPQ         AX, R13
	JLT          ay64key
	VMOVUPS      Y0, (DI)
	VMOVUPS      Y1, 32(DI)
	VMOVUPS      Y2, 64(DI)
	VMOVUPS      Y3, 96(DI)
	VMOVUPS      Y4, 128(DI)
	VMOVUPS      Y5, 160(DI)
	VMOVUPS      Y6, 192(DI)
	VMOVUPS      Y7, 224(DI)
	ADDQ         $256, DI
	ADDQ         $256, R8
	SUBQ         $64, CX
	JMP          ay64

ay8:
	CMPQ    CX, $8
	JLT     aydone
	VMOVUPS (DI), Y0
	MOVQ    R8, R9
	XORQ    AX, AX

ay8key:
	VBROADCASTSS (SI)(AX*4), Y8
	VFMADD231PS  (R9), Y8, Y0
	ADDQ         DX, R9
	INCQ         AX
	CMPQ         AX, R13
	JLT          ay8key
	VMOVUPS      Y0, (DI)
	ADDQ         $32, DI
	ADDQ         $32, R8
	SUBQ         $8, CX
	JMP          ay8

aydone:
	VZEROUPPER
	RET
