//go:build amd64 && !noasm

package kernels

import (
	"os"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// haveAVX2 reports whether the AVX2+FMA assembly kernels may run. Tests may
// clear it to exercise the pure-Go fallbacks.
var haveAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// haveAVX512 reports whether the AVX-512 GEMM micro-kernel (6x32) may run;
// it is used only together with haveAVX2. FLYWHEEL_AVX512=0 disables it
// (e.g. to avoid AVX-512 frequency drops on older Xeons).
var haveAVX512 = cpu.X86.HasAVX512F && haveAVX2 && os.Getenv("FLYWHEEL_AVX512") != "0"

//go:noescape
func sgemmKernel6x16(kc int, a, b, c *float32, ldc int, alpha float32, set bool)

//go:noescape
func sgemmKernel6x32(kc int, a *float32, as int, b *float32, bs int, c *float32, ldc int, alpha float32, set bool)

//go:noescape
func sgemmKernel6x32r(kc int, a *float32, lda int, b *float32, bs int, c *float32, ldc int, alpha float32, set bool)

//go:noescape
func dot4M(n int, x *float32, ldx, m int, w *float32, ldw int, out *float32, pf unsafe.Pointer, pfn int)

// dot4 sets out[r] = sum_{i<n} x[i]*w[r*ldw+i] for r = 0..3 (n a multiple
// of 8): dot4M's one-row case.
func dot4(n int, x, w *float32, ldw int, out *[4]float32) { dot4M(n, x, 0, 1, w, ldw, &out[0], nil, 0) }

//go:noescape
func shortDots8(blocks, k int, x, w *float32, y *float32, add bool)

//go:noescape
func dotAVX(n int, x, y *float32) float32

//go:noescape
func axpyAVX(n int, alpha float32, x, y *float32)

//go:noescape
func axpy4(n int, a *[4]float32, w *float32, ldw int, y *float32)

//go:noescape
func scaleAVX(n int, alpha float32, x *float32)

//go:noescape
func addAVX(n int, dst, x *float32)

//go:noescape
func sumAVX(n int, x *float32) float32

//go:noescape
func packBT8(n8 int, src *float32, lds int, dst *float32, ldd int)

//go:noescape
func packA6(n8 int, src *float32, lds int, dst *float32)

//go:noescape
func packA6T(n int, src *float32, lds int, dst *float32)

//go:noescape
func expSumAVX(n int, x *float32, shift float32) float32

//go:noescape
func expShift64AVX(n int, dst *float64, x *float32, scale, shift float64) (sum float64, out int)

//go:noescape
func swigluAVX(n int, dst, gate, up *float32)

//go:noescape
func expSumDotAVX(n int, x *float32, shift float32) (sum, sumED float64)

//go:noescape
func swigluBackAVX(n int, dg, du, gate, up, dh *float32)

//go:noescape
func mulScaleAVX(n int, dst, x, w *float32, s float32)

//go:noescape
func maxAVX(n int, x *float32) float32

//go:noescape
func scoresZ(n4 int, d int, q *float32, k *float32, rs int, s *float32, scale float32)

//go:noescape
func scores16Z(n16 int, d int, q *float32, k *float32, rs int, s *float32, scale float32)

//go:noescape
func axpyRowsZ(n int, d int, s *float32, v *float32, rs int, o *float32)

//go:noescape
func scoresY(n4 int, d int, q *float32, k *float32, rs int, s *float32, scale float32)

//go:noescape
func axpyRowsY(n int, d int, s *float32, v *float32, rs int, o *float32)
