package engine

import (
	"math"
	"unsafe"

	"flywheel/internal/engine/kernels"
	"flywheel/internal/par"
)

// Float is the element type of the model's math. Serving and training run in
// float32 (every matrix product through kernels.Default().Sgemm); the
// float64 instantiation exists so gradient checks can hold the analytic
// backward to 1e-6 against finite differences.
type Float interface{ float32 | float64 }

// gemm is C = alpha·op(A)·op(B) + beta·C, row-major, as kernels.Backend.Sgemm.
// float32 goes to the default kernel backend; float64 to a plain parallel
// loop used only by tests.
func gemm[T Float](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	gemmOn(nil, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// gemmOn is gemm on a given float32 backend (nil: kernels.Default()).
func gemmOn[T Float](be kernels.Backend, transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		scaleRows(c, m, n, ldc, beta)
		return
	}
	switch av := any(a).(type) {
	case []float32:
		if be == nil {
			be = kernels.Default()
		}
		be.Sgemm(transA, transB, m, n, k, float32(alpha), av, lda,
			any(b).([]float32), ldb, float32(beta), any(c).([]float32), ldc)
	case []float64:
		dgemm(transA, transB, m, n, k, float64(alpha), av, lda, any(b).([]float64), ldb, float64(beta), any(c).([]float64), ldc)
	}
}

// wmat is a frozen weight matrix laid out for a pass in T: f, or (float32
// passes only) the 16-bit values h of type ht as the checkpoint stores
// them, which the kernels widen to float32 as they multiply, or the
// quantized blocks q of type qt, which the kernels dequantise as they
// multiply.
type wmat[T Float] struct {
	f  []T
	h  []uint16
	ht kernels.HalfType
	q  []byte
	qt kernels.QuantType
}

// toWmat lays out m for T: float32 values aliased, half precision and
// quantized blocks kept for float32 and widened (exactly) for float64.
func toWmat[T Float](m Mat) wmat[T] {
	switch {
	case sizeof[T]() != 4:
	case m.Quant != nil:
		return wmat[T]{q: m.Quant, qt: m.QuantType}
	case m.Half != nil:
		return wmat[T]{h: m.Half, ht: m.HalfType}
	}
	return wmat[T]{f: convert[T](m.Float32())}
}

func (w wmat[T]) empty() bool { return w.f == nil && w.h == nil && w.q == nil }

// slice is the values [i, j) (block boundaries when quantized).
func (w wmat[T]) slice(i, j int) wmat[T] {
	switch {
	case w.q != nil:
		e, b := w.qt.BlockElems(), w.qt.BlockBytes()
		return wmat[T]{q: w.q[i/e*b : j/e*b : j/e*b], qt: w.qt}
	case w.h != nil:
		return wmat[T]{h: w.h[i:j:j], ht: w.ht}
	}
	return wmat[T]{f: w.f[i:j:j]}
}

// mulNT is c [m,n] = a [m,k] (row stride lda) · Wᵀ + beta·c (row stride
// ldc) for a weight W [n,k] (a linear layer's forward). Half-precision
// weights go to kernels.HalfGemmNT, quantized ones to kernels.QuantGemmNT; float32 weights with few rows (decode)
// to the streaming kernels.GemvNT unless the naive reference backend is
// forced; the rest to the backend.
func mulNT[T Float](m, n, k int, a []T, lda int, w wmat[T], beta T, c []T, ldc int) {
	if w.q != nil {
		kernels.QuantGemmNT(w.qt, m, n, k, any(a).([]float32), lda, w.q, float32(beta), any(c).([]float32), ldc)
		return
	}
	if w.h != nil {
		kernels.HalfGemmNT(w.ht, m, n, k, any(a).([]float32), lda, w.h, k, float32(beta), any(c).([]float32), ldc)
		return
	}
	if a32, ok := any(a).([]float32); ok && m <= kernels.StreamRows {
		if _, naive := kernels.Default().(kernels.Naive); !naive {
			kernels.GemvNT(m, n, k, a32, lda, any(w.f).([]float32), k, float32(beta), any(c).([]float32), ldc)
			return
		}
	}
	gemm(false, true, m, n, k, 1, a, lda, w.f, k, beta, c, ldc)
}

// mulNN is c [m,n] = a [m,k] (row stride lda) · W + beta·c (row stride ldc)
// for a weight W [k,n] (a linear layer's input gradient).
func mulNN[T Float](m, n, k int, a []T, lda int, w wmat[T], beta T, c []T, ldc int) {
	if w.q != nil {
		kernels.QuantGemmNN(w.qt, m, n, k, any(a).([]float32), lda, w.q, float32(beta), any(c).([]float32), ldc)
		return
	}
	if w.h != nil {
		kernels.HalfGemmNN(w.ht, m, n, k, any(a).([]float32), lda, w.h, n, float32(beta), any(c).([]float32), ldc)
		return
	}
	gemm(false, false, m, n, k, 1, a, lda, w.f, n, beta, c, ldc)
}

func scaleRows[T Float](c []T, m, n, ldc int, beta T) {
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		for j := range row {
			if beta == 0 {
				row[j] = 0
			} else {
				row[j] *= beta
			}
		}
	}
}

// dgemm is the float64 reference product (tests only: no blocking).
func dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	par.Range(m, n*k, func(i0, i1 int) {
		for i := i0; i < i1; i++ {
			for j := 0; j < n; j++ {
				var s float64
				for p := 0; p < k; p++ {
					var x, y float64
					if transA {
						x = a[p*lda+i]
					} else {
						x = a[i*lda+p]
					}
					if transB {
						y = b[j*ldb+p]
					} else {
						y = b[p*ldb+j]
					}
					s += x * y
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

// exp is e^x: the kernels' fast float32 exp (relative error < 2e-7) for
// float32, math.Exp for float64. The size test is a compile-time constant
// per instantiation.
func exp[T Float](x T) T {
	if unsafe.Sizeof(x) == 4 {
		return T(kernels.Exp(float32(x)))
	}
	return T(math.Exp(float64(x)))
}

// convert copies a float32 slice into T (aliases it when T is float32).
func convert[T Float](x []float32) []T {
	if x == nil {
		return nil
	}
	if v, ok := any(x).([]T); ok {
		return v
	}
	out := make([]T, len(x))
	for i, v := range x {
		out[i] = T(v)
	}
	return out
}

// sizeof is the size of T in bytes.
func sizeof[T Float]() int {
	var z T
	return int(unsafe.Sizeof(z))
}

// grow returns b resized to n elements, reallocating only when its capacity
// is short (contents are not preserved).
func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}
