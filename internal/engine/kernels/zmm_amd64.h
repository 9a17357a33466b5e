// Shared AVX-512 macros of the kernels' assembly files.

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
