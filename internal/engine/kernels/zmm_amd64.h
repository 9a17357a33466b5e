// Shared AVX-512 macros of the kernels' assembly files.

// Sum the lanes of z (y, x: its lower halves) into x's lanes 0..3, using
// Y24 as scratch.
#define FOLD(z, y, x) \
	VEXTRACTF64X4 $1, z, Y24 \
	VADDPS        Y24, y, y \
	VEXTRACTF32X4 $1, y, X24 \
	VADDPS        X24, x, x
