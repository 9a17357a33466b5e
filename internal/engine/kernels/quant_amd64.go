//go:build amd64 && !noasm

package kernels

// quantKernel is t's AVX-512 decode kernel, nil when there is none for t
// (or AVX-512 may not run): the caller then dequantises rows into a
// buffer.
func quantKernel(t QuantType) *quantDot4 {
	return nil
}
