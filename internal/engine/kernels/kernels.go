// Package kernels holds the dense float32 math the engine and trainer run on:
// a BLAS-style Sgemm behind a small interface, so a pure-Go SIMD backend and
// an OpenBLAS backend (when its shared library is present) are interchangeable.
//
// Backends: Go (packed, cache-blocked GEMM with AVX-512/AVX2+FMA assembly
// micro-kernels and pure-Go fallbacks, parallel over GOMAXPROCS, with
// streaming paths for m <= 16 and GEMV shapes), OpenBLAS (cblas_sgemm loaded
// at run time with purego, no cgo) and Naive (reference loops). Default()
// is Auto() unless SetDefault was called: FLYWHEEL_KERNELS=go|openblas|naive,
// else OpenBLAS when loadable, else Go.
//
// Vector helpers (Dot, Axpy, Scale, Add, Sum, MatVec, MatVecT, RMSNorm,
// Softmax, LogSumExp, SiLU, SwiGLU, Exp) use the same assembly where it pays.
// Everything is safe for concurrent use on disjoint outputs.
package kernels

import (
	"sync"
	"sync/atomic"

	"flywheel/internal/par"
)

// Backend computes C = alpha·op(A)·op(B) + beta·C for row-major matrices,
// where op(X) is X or Xᵀ. op(A) is m×k, op(B) is k×n, C is m×n; lda, ldb,
// ldc are the row strides of A, B, C as stored.
type Backend interface {
	Name() string
	Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)
}

var (
	current atomic.Pointer[backendBox]
	autoMu  sync.Mutex
)

type backendBox struct{ b Backend }

// Default returns the backend in use. On first use, unless SetDefault was
// called before, it is Auto(): FLYWHEEL_KERNELS if set, else OpenBLAS when
// the library loads, else Go.
func Default() Backend {
	if p := current.Load(); p != nil {
		return p.b
	}
	autoMu.Lock()
	defer autoMu.Unlock()
	if p := current.Load(); p != nil {
		return p.b
	}
	b := Auto()
	current.Store(&backendBox{b})
	return b
}

// SetDefault replaces the backend in use.
func SetDefault(b Backend) {
	autoMu.Lock()
	current.Store(&backendBox{b})
	autoMu.Unlock()
}

// Naive is the reference implementation: plain loops, rows split across
// cores. It is the correctness baseline the fast backends are tested against.
type Naive struct{}

// Name implements Backend.
func (Naive) Name() string { return "naive" }

// Sgemm implements Backend.
func (Naive) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	at := func(i, p int) float32 {
		if transA {
			return a[p*lda+i]
		}
		return a[i*lda+p]
	}
	bt := func(p, j int) float32 {
		if transB {
			return b[j*ldb+p]
		}
		return b[p*ldb+j]
	}
	par.Range(m, 0, func(i0, i1 int) {
		for i := i0; i < i1; i++ {
			for j := 0; j < n; j++ {
				var s float32
				for p := 0; p < k; p++ {
					s += at(i, p) * bt(p, j)
				}
				if beta == 0 {
					c[i*ldc+j] = alpha * s
				} else {
					c[i*ldc+j] = alpha*s + beta*c[i*ldc+j]
				}
			}
		}
	})
}
