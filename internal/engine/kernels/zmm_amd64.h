// Shared macros of the kernels' assembly files: AVX-512's, the loops
// the AVX-512 and AVX2 kernels share (DQKRUN, LIMBGROUPS with LIMBRUN and
// KLIMBRUN), and the AVX2 four-row dots' accumulators (ZEROY, STORE4YDI).

// Horizontal sum of Y(reg) into X(reg) lane 0, using X15 as scratch.
#define HSUM(y, x) \
	VEXTRACTF128 $1, y, X15 \
	VADDPS       X15, x, x \
	VHADDPS      x, x, x \
	VHADDPS      x, x, x

// The AVX2 four-row dots' accumulators, two a row (Y2r, Y2r+1): zeroed,
// and summed into float32[4] at DI.
#define ZEROY \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	VXORPS Y2, Y2, Y2 \
	VXORPS Y3, Y3, Y3 \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7

// R9..R11: the three rows after R8's, DX bytes apart (DX: ldw elements
// of 1 << sh bytes; scaled in place).
#define ROWS4(sh) \
	SHLQ $sh, DX \
	LEAQ (R8)(DX*1), R9 \
	LEAQ (R9)(DX*1), R10 \
	LEAQ (R10)(DX*1), R11

// DOT4Y: the AVX2 four-row dots over CX elements (a multiple of 8) from
// AX = 0: x at SI, weight rows R8..R11, two accumulators a row as ZEROY
// names them (Y2r: the 16-element steps' first half and the 8-element
// tail; Y2r+1: their second half); each 16-element step first prefetches
// the next line of [R14, R15) while any is left. Y8, Y9, BX scratch; l16,
// l8 its labels; it ends at label done, which follows it.
#define DOT4Y(l16, l8, done) \
l16: \
	MOVQ        CX, BX \
	SUBQ        AX, BX \
	CMPQ        BX, $16 \
	JLT         l8 \
	CMPQ        R14, R15 \
	JAE         3(PC) \
	PREFETCHT0  (R14) \
	ADDQ        $64, R14 \
	VMOVUPS     (SI)(AX*4), Y8 \
	VMOVUPS     32(SI)(AX*4), Y9 \
	VFMADD231PS (R8)(AX*4), Y8, Y0 \
	VFMADD231PS 32(R8)(AX*4), Y9, Y1 \
	VFMADD231PS (R9)(AX*4), Y8, Y2 \
	VFMADD231PS 32(R9)(AX*4), Y9, Y3 \
	VFMADD231PS (R10)(AX*4), Y8, Y4 \
	VFMADD231PS 32(R10)(AX*4), Y9, Y5 \
	VFMADD231PS (R11)(AX*4), Y8, Y6 \
	VFMADD231PS 32(R11)(AX*4), Y9, Y7 \
	ADDQ        $16, AX \
	JMP         l16 \
l8: \
	CMPQ        BX, $8 \
	JLT         done \
	VMOVUPS     (SI)(AX*4), Y8 \
	VFMADD231PS (R8)(AX*4), Y8, Y0 \
	VFMADD231PS (R9)(AX*4), Y8, Y2 \
	VFMADD231PS (R10)(AX*4), Y8, Y4 \
	VFMADD231PS (R11)(AX*4), Y8, Y6

#define STORE4YDI \
	VADDPS Y1, Y0, Y0 \
	VADDPS Y3, Y2, Y2 \
	VADDPS Y5, Y4, Y4 \
	VADDPS Y7, Y6, Y6 \
	HSUM(Y0, X0) \
	HSUM(Y2, X2) \
	HSUM(Y4, X4) \
	HSUM(Y6, X6) \
	MOVSS  X0, 0(DI) \
	MOVSS  X2, 4(DI) \
	MOVSS  X4, 8(DI) \
	MOVSS  X6, 12(DI)

// Sum the lanes of z (y, x: its lower halves) into x's lanes 0..3, using
// Y24 as scratch.
#define FOLD(z, y, x) \
	VEXTRACTF64X4 $1, z, Y24 \
	VADDPS        Y24, y, y \
	VEXTRACTF32X4 $1, y, X24 \
	VADDPS        X24, x, x

// out[off/4 .. off/4+3] = the four full sums of za..zd.
#define RED4(za, ya, xa, zb, yb, xb, zc, yc, xc, zd, yd, xd, off) \
	FOLD(za, ya, xa) \
	FOLD(zb, yb, xb) \
	FOLD(zc, yc, xc) \
	FOLD(zd, yd, xd) \
	VHADDPS xb, xa, xa \
	VHADDPS xd, xc, xc \
	VHADDPS xc, xa, xa \
	VMOVUPS xa, off(DI)

// Clear the accumulators Z0..Z7.
#define ZEROZ \
	VPXORD Z0, Z0, Z0 \
	VPXORD Z1, Z1, Z1 \
	VPXORD Z2, Z2, Z2 \
	VPXORD Z3, Z3, Z3 \
	VPXORD Z4, Z4, Z4 \
	VPXORD Z5, Z5, Z5 \
	VPXORD Z6, Z6, Z6 \
	VPXORD Z7, Z7, Z7

// Clear the accumulators Z0..Z15.
#define ZEROZ4 \
	ZEROZ \
	VPXORD Z8, Z8, Z8 \
	VPXORD Z9, Z9, Z9 \
	VPXORD Z10, Z10, Z10 \
	VPXORD Z11, Z11, Z11 \
	VPXORD Z12, Z12, Z12 \
	VPXORD Z13, Z13, Z13 \
	VPXORD Z14, Z14, Z14 \
	VPXORD Z15, Z15, Z15

// The dequantisers' loop over CX blocks: BODY on each (reading its block
// at src), src advanced size bytes and dst (DI) 32 floats a row; then the
// function's return.
#define DQLOOP(lp, done, BODY, src, size) \
lp: \
	TESTQ CX, CX \
	JZ    done \
	BODY \
	ADDQ  size, src \
	ADDQ  $128, DI \
	DECQ  CX \
	JMP   lp \
done: \
	VZEROUPPER \
	RET

// The K-quant dequantisers' loop over super-blocks (CX: 32-value blocks;
// size bytes; SB: one super-block's work).
#define DQKRUN(lp, done, SB, size) \
	SHRQ  $3, CX \
lp: \
	TESTQ CX, CX \
	JZ    done \
	SB \
	ADDQ  size, R8 \
	DECQ  CX \
	JMP   lp \
done: \
	VZEROUPPER \
	RET

// The integer decode kernels' loop (quantvnni_amd64.s, and AVX2's
// qdot*YV/qdot*YN in quantavx2_amd64.s) over the groups of four rows (R12
// of them, from R8), each over its nb 32-value blocks (x's limbs from
// R14, 8 floats of scales each from R11) in steps of 2^shift blocks:
// STEP accumulates a step into Z0/Y0 and Z1/Y1 (zeroed, the upper bits
// too, by the VEX-encoded VPXOR) and advances R8, SI and DI past it; END
// leaves the group's four dots in X0, stored to R13.
#define LIMBGROUPS(grp, lp, done, shift, STEP, END) \
grp: \
	TESTQ R12, R12 \
	JZ    done \
	MOVQ  nb+0(FP), CX \
	SHRQ  shift, CX \
	MOVQ  R14, SI \
	MOVQ  R11, DI \
	VPXOR Y0, Y0, Y0 \
	VPXOR Y1, Y1, Y1 \
lp: \
	STEP \
	DECQ  CX \
	JNZ   lp \
	END \
	VMOVUPS X0, (R13) \
	ADDQ  $16, R13 \
	DECQ  R12 \
	JMP   grp \
done: \
	VZEROUPPER \
	RET

// A block at a time (size bytes of weights, lsize of limbs): BLOCK and
// SCALE accumulate it; the weights are prefetched R10 bytes ahead.
#define LIMBSTEP(BLOCK, SCALE, size, lsize) \
	BLOCK \
	SCALE \
	PREFETCHT0 (R8)(R10*1) \
	ADDQ  $size, R8 \
	ADDQ  $lsize, SI \
	ADDQ  $32, DI

#define LIMBRUN(grp, lp, done, BLOCK, SCALE, END, size, lsize) \
	LIMBGROUPS(grp, lp, done, $0, LIMBSTEP(BLOCK, SCALE, size, lsize), END)

// The K-quants, a 256-value super-block at a time (SB: its work, which
// advances SI and DI past its eight blocks; size bytes of weights).
#define KLIMBSTEP(SB, size) \
	SB \
	ADDQ  size, R8

#define KLIMBRUN(grp, lp, done, SB, size, END) \
	LIMBGROUPS(grp, lp, done, $3, KLIMBSTEP(SB, size), END)
