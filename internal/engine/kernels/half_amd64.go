//go:build amd64 && !noasm

package kernels

import "golang.org/x/sys/cpu"

// haveF16C reports whether the F16 assembly (VCVTPH2PS) may run.
var haveF16C = haveAVX2 && cpu.X86.HasF16C

//go:noescape
func hdot4BF16Y(n int, x *float32, w *uint16, ldw int, out *[4]float32)

//go:noescape
func hdot4F16Y(n int, x *float32, w *uint16, ldw int, out *[4]float32)

//go:noescape
func cvtBF16Y(n int, dst *float32, src *uint16, pf int)

//go:noescape
func cvtF16Y(n int, dst *float32, src *uint16, pf int)

//go:noescape
func mdotBF16Z(n int, x *float32, lda int, w *uint16, ldw int, out *[16]float32)

//go:noescape
func mdotF16Z(n int, x *float32, lda int, w *uint16, ldw int, out *[16]float32)

//go:noescape
func mdotF32Z(n int, x *float32, lda int, w *float32, ldw int, out *[16]float32)

//go:noescape
func dot1BF16Z(n int, x *float32, w *uint16, ldw int, out *[4]float32)

//go:noescape
func dot1F16Z(n int, x *float32, w *uint16, ldw int, out *[4]float32)

//go:noescape
func dot1F32Z(n int, x *float32, w *float32, ldw int, out *[4]float32)

//go:noescape
func dot1BF16R(n int, x *float32, w *uint16, ldw int, out *[4]float32, pf int)

//go:noescape
func dot1F16R(n int, x *float32, w *uint16, ldw int, out *[4]float32, pf int)

//go:noescape
func dot1F32R(n int, x *float32, w *float32, ldw int, out *[4]float32, pf int)

//go:noescape
func hdot4BF16R(n int, x *float32, w *uint16, ldw int, out *[4]float32, pf int)

//go:noescape
func hdot4F16R(n int, x *float32, w *uint16, ldw int, out *[4]float32, pf int)

//go:noescape
func dot4R(n int, x, w *float32, ldw int, out *[4]float32, pf int)

//go:noescape
func evenOddZ(blocks int, dst, x *float32)
