//go:build !amd64 || noasm

package kernels

var haveF16C = false

func hdot4BF16Y(n int, x *float32, w *uint16, ldw int, out *[4]float32) { panic("kernels: no asm") }
func hdot4F16Y(n int, x *float32, w *uint16, ldw int, out *[4]float32)  { panic("kernels: no asm") }
func cvtBF16Y(n int, dst *float32, src *uint16, pf int)                 { panic("kernels: no asm") }
func cvtF16Y(n int, dst *float32, src *uint16, pf int)                  { panic("kernels: no asm") }
func mdotBF16Z(n int, x *float32, lda int, w *uint16, ldw int, out *[16]float32) {
	panic("kernels: no asm")
}
func mdotF16Z(n int, x *float32, lda int, w *uint16, ldw int, out *[16]float32) {
	panic("kernels: no asm")
}
func mdotF32Z(n int, x *float32, lda int, w *float32, ldw int, out *[16]float32) {
	panic("kernels: no asm")
}
func dot1BF16Z(n int, x *float32, w *uint16, ldw int, out *[4]float32) { panic("kernels: no asm") }
func dot1F16Z(n int, x *float32, w *uint16, ldw int, out *[4]float32)  { panic("kernels: no asm") }
func dot1F32Z(n int, x *float32, w *float32, ldw int, out *[4]float32) { panic("kernels: no asm") }
func evenOddZ(blocks int, dst, x *float32)                             { panic("kernels: no asm") }
func dot1BF16R(n int, x *float32, w *uint16, ldw int, out *[4]float32, pf int) {
	panic("kernels: no asm")
}
func dot1F16R(n int, x *float32, w *uint16, ldw int, out *[4]float32, pf int) {
	panic("kernels: no asm")
}
func dot1F32R(n int, x *float32, w *float32, ldw int, out *[4]float32, pf int) {
	panic("kernels: no asm")
}
func hdot4BF16R(n int, x *float32, w *uint16, ldw int, out *[4]float32, pf int) {
	panic("kernels: no asm")
}
func hdot4F16R(n int, x *float32, w *uint16, ldw int, out *[4]float32, pf int) {
	panic("kernels: no asm")
}
func dot4R(n int, x, w *float32, ldw int, out *[4]float32, pf int) { panic("kernels: no asm") }
