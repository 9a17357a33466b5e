package kernels

import (
	"strings"
	"sync"
)

// CBLAS enum values (cblas.h).
const (
	cblasRowMajor = 101
	cblasNoTrans  = 111
	cblasTrans    = 112
)

// OpenBLASLibs are the shared-library names LoadOpenBLAS tries, in order.
// FLYWHEEL_OPENBLAS, when set, is tried first (a path or a soname).
var OpenBLASLibs = []string{
	"libopenblas.so.0",
	"libopenblas.so",
	"/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
	"/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
	"/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0",
	"/usr/lib/x86_64-linux-gnu/openblas-serial/libopenblas.so.0",
	"/usr/lib64/libopenblas.so.0",
	"/usr/local/lib/libopenblas.so.0",
	"/opt/homebrew/opt/openblas/lib/libopenblas.dylib",
	"/usr/local/opt/openblas/lib/libopenblas.dylib",
}

// OpenBLAS is the backend that calls cblas_sgemm from the OpenBLAS shared
// library, loaded at run time with purego (no cgo). Obtain it with
// LoadOpenBLAS. GEMV-like shapes (m <= 16 or n == 1) and tiny products go
// to the Go backend, whose streaming paths are faster there (measured) and
// avoid the foreign-call overhead.
//
// Threading: by default OpenBLAS runs single-threaded and Sgemm splits C
// into GOMAXPROCS row (or column) blocks, one cblas_sgemm per goroutine.
// That keeps all parallelism under the Go scheduler (OpenBLAS's own pthreads
// busy-wait between calls and stall badly when the CPU is shared) and was
// as fast or faster on the 2-core dev box. FLYWHEEL_OPENBLAS_THREADS=n (n > 1)
// instead gives OpenBLAS n threads of its own and no Go-side split.
type OpenBLAS struct {
	path       string
	config     string
	core       string
	sgemm      func(order, transA, transB, m, n, k int32, alpha float32, a *float32, lda int32, b *float32, ldb int32, beta float32, c *float32, ldc int32)
	threads    int
	setThreads func(int32)
	// split: OpenBLAS runs single-threaded and Sgemm splits C across
	// GOMAXPROCS goroutines itself (see LoadOpenBLAS).
	split bool
}

// Name implements Backend.
func (*OpenBLAS) Name() string { return "openblas" }

// Path is the library file (or soname) that was loaded.
func (o *OpenBLAS) Path() string { return o.path }

// Config is openblas_get_config() (build options and core type), if exported.
func (o *OpenBLAS) Config() string { return o.config }

// Core is openblas_get_corename(): the kernel set OpenBLAS picked for this
// CPU (e.g. "Haswell", "SkylakeX"; "Prescott" when it did not recognise
// the CPU and fell back to SSE3 kernels), "" when not exported.
func (o *OpenBLAS) Core() string { return o.core }

// vectorCore reports whether OpenBLAS runs AVX2-or-better kernels here.
// A DYNAMIC_ARCH build that does not recognise a (virtualised) CPU falls
// back to an SSE-era core and multiplies several times slower than the Go
// kernels (57 vs 229 GFLOP/s for 1024³ on the development VM, whose
// OpenBLAS 0.3.21 picks "Prescott").
func (o *OpenBLAS) vectorCore() bool {
	c := strings.ToLower(o.core)
	for _, k := range []string{"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids", "excavator"} {
		if strings.Contains(c, k) {
			return true
		}
	}
	return false
}

// Threads is the thread count set with openblas_set_num_threads (0 if the
// library does not export it; 1 in the default Go-split mode).
func (o *OpenBLAS) Threads() int { return o.threads }

// openBLASDirectMin is the size (m*n*k) below which the Go backend is used.
const openBLASDirectMin = 32 * 32 * 32

// Sgemm implements Backend.
func (o *OpenBLAS) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkSgemm(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	if m <= smallMDot || n <= 1 || k == 0 || m*n*k < openBLASDirectMin {
		Go{}.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if !o.split {
		o.cblas(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	W := min(workers(), max(m, n)/16)
	if W <= 1 {
		o.cblas(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	if m >= n {
		// split rows of C (and of op(A))
		parallelFor(W, func(w int) {
			i0, i1 := m*w/W, m*(w+1)/W
			var as []float32
			if transA {
				as = a[i0:]
			} else {
				as = a[i0*lda:]
			}
			o.cblas(transA, transB, i1-i0, n, k, alpha, as, lda, b, ldb, beta, c[i0*ldc:], ldc)
		})
		return
	}
	// split columns of C (and of op(B))
	parallelFor(W, func(w int) {
		j0, j1 := n*w/W, n*(w+1)/W
		var bs []float32
		if transB {
			bs = b[j0*ldb:]
		} else {
			bs = b[j0:]
		}
		o.cblas(transA, transB, m, j1-j0, k, alpha, a, lda, bs, ldb, beta, c[j0:], ldc)
	})
}

// cblas calls cblas_sgemm directly; sizes must be > 0 and checked.
func (o *OpenBLAS) cblas(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	const maxInt32 = 1<<31 - 1
	if m > maxInt32 || n > maxInt32 || k > maxInt32 || lda > maxInt32 || ldb > maxInt32 || ldc > maxInt32 {
		panic("kernels: OpenBLAS sizes exceed 32-bit blasint")
	}
	ta, tb := int32(cblasNoTrans), int32(cblasNoTrans)
	if transA {
		ta = cblasTrans
	}
	if transB {
		tb = cblasTrans
	}
	o.sgemm(cblasRowMajor, ta, tb, int32(m), int32(n), int32(k), alpha, &a[0], int32(lda), &b[0], int32(ldb), beta, &c[0], int32(ldc))
}

var (
	obOnce sync.Once
	obLib  *OpenBLAS
	obErr  error
)

// LoadOpenBLAS loads the OpenBLAS shared library once and returns the
// backend, or an error saying which names were tried. It sets OpenBLAS's
// thread count to 1 (Go-side split, the default) or FLYWHEEL_OPENBLAS_THREADS.
func LoadOpenBLAS() (*OpenBLAS, error) {
	obOnce.Do(func() { obLib, obErr = loadOpenBLAS() })
	return obLib, obErr
}
