package train

import (
	"math"
	"runtime"
	"sync"
	"unsafe"

	"flywheel/internal/engine/kernels"
)

// Float is the element type of the training math. Production runs in
// float32 (every matmul through kernels.Default().Sgemm); the float64
// instantiation exists so the gradient checks can hold the analytic backward
// to 1e-6 against finite differences.
type Float interface{ float32 | float64 }

// gemm is C = alpha·op(A)·op(B) + beta·C, row-major, as kernels.Backend.Sgemm.
// float32 goes to the kernel backend; float64 to a plain (parallel) loop used
// only by tests.
func gemm[T Float](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	gemmOn(nil, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// gemmOn is gemm on a given float32 backend (nil: kernels.Default()).
func gemmOn[T Float](be kernels.Backend, transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	switch av := any(a).(type) {
	case []float32:
		if k == 0 {
			scaleRows(any(c).([]float32), m, n, ldc, float32(beta))
			return
		}
		if be == nil {
			be = kernels.Default()
		}
		be.Sgemm(transA, transB, m, n, k, float32(alpha), av, lda,
			any(b).([]float32), ldb, float32(beta), any(c).([]float32), ldc)
	case []float64:
		dgemm(transA, transB, m, n, k, float64(alpha), av, lda, any(b).([]float64), ldb, float64(beta), any(c).([]float64), ldc)
	}
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

func dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	parallelFor(m, func(i0, i1 int) {
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

// parallelFor splits [0, n) into contiguous chunks over the cores.
func parallelFor(n int, f func(i0, i1 int)) { kernels.ParallelRange(n, f) }

// parallelTasks runs f(i) for i in [0, n) on up to GOMAXPROCS goroutines,
// handing tasks out one at a time (tasks may differ in size).
func parallelTasks(n int, f func(i int)) {
	w := min(runtime.GOMAXPROCS(0), n)
	if w <= 1 {
		for i := 0; i < n; i++ {
			f(i)
		}
		return
	}
	var mu sync.Mutex
	next := 0
	var wg sync.WaitGroup
	for range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n {
					return
				}
				f(i)
			}
		}()
	}
	wg.Wait()
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
