//go:build !amd64 || noasm

package kernels

// quantKernel is nil: no assembly decode kernels on this build.
func quantKernel(QuantType) *quantDot4 { return nil }
