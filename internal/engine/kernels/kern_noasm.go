//go:build !amd64 || noasm

package kernels

import "unsafe"

// haveAVX2 is always false without the amd64 assembly; every kernel takes
// its pure-Go path.
var haveAVX2 = false

var haveAVX512 = false

var haveVNNI = false

var haveIntY = false

var haveVNNIY = false

func sgemmKernel6x16(kc int, a, b, c *float32, ldc int, alpha float32, set bool) {
	panic("kernels: no asm")
}
func sgemmKernel6x32(kc int, a *float32, as int, b *float32, bs int, c *float32, ldc int, alpha float32, set bool) {
	panic("kernels: no asm")
}
func dot4(n int, x, w *float32, ldw int, out *[4]float32) { panic("kernels: no asm") }
func dot4M(n int, x *float32, ldx, m int, w *float32, ldw int, out *float32, pf unsafe.Pointer, pfn int) {
	panic("kernels: no asm")
}
func shortDots8(blocks, k int, x, w *float32, y *float32, add bool)      { panic("kernels: no asm") }
func dotAVX(n int, x, y *float32) float32                                { panic("kernels: no asm") }
func axpyAVX(n int, alpha float32, x, y *float32)                        { panic("kernels: no asm") }
func axpy4(n int, a *[4]float32, w *float32, ldw int, y *float32)        { panic("kernels: no asm") }
func scaleAVX(n int, alpha float32, x *float32)                          { panic("kernels: no asm") }
func addAVX(n int, dst, x *float32)                                      { panic("kernels: no asm") }
func sumAVX(n int, x *float32) float32                                   { panic("kernels: no asm") }
func packBT8(n8 int, src *float32, lds int, dst *float32, ldd int)       { panic("kernels: no asm") }
func packA6(n8 int, src *float32, lds int, dst *float32)                 { panic("kernels: no asm") }
func packA6T(n int, src *float32, lds int, dst *float32)                 { panic("kernels: no asm") }
func expSumAVX(n int, x *float32, shift float32) float32                 { panic("kernels: no asm") }
func swigluAVX(n int, dst, gate, up *float32)                            { panic("kernels: no asm") }
func mulScaleAVX(n int, dst, x, w *float32, s float32)                   { panic("kernels: no asm") }
func maxAVX(n int, x *float32) float32                                   { panic("kernels: no asm") }
func expSumDotAVX(n int, x *float32, shift float32) (sum, sumED float64) { panic("kernels: no asm") }
func swigluBackAVX(n int, dg, du, gate, up, dh *float32)                 { panic("kernels: no asm") }
func expShift64AVX(n int, dst *float64, x *float32, scale, shift float64) (float64, int) {
	panic("kernels: no asm")
}
func sgemmKernel6x32r(kc int, a *float32, lda int, b *float32, bs int, c *float32, ldc int, alpha float32, set bool) {
	panic("kernels: no asm")
}
func scoresZ(n4 int, d int, q *float32, k *float32, rs int, s *float32, scale float32) {
	panic("kernels: no asm")
}
func scores16Z(n16 int, d int, q *float32, k *float32, rs int, s *float32, scale float32) {
	panic("kernels: no asm")
}
func axpyRowsZ(n int, d int, s *float32, v *float32, rs int, o *float32) { panic("kernels: no asm") }
func scoresY(n4 int, d int, q *float32, k *float32, rs int, s *float32, scale float32) {
	panic("kernels: no asm")
}
func axpyRowsY(n int, d int, s *float32, v *float32, rs int, o *float32) { panic("kernels: no asm") }
