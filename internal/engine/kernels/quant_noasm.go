//go:build !amd64 || noasm

package kernels

// quantKernel is nil: no assembly decode kernels on this build.
func quantKernel(QuantType) *quantDots { return nil }

// dequantRowAsm is false: no assembly dequantisation on this build.
func dequantRowAsm(QuantType, []float32, []byte) bool { return false }

// dequantGroupAsm is false: no assembly dequantisation on this build.
func dequantGroupAsm(QuantType, []float32, int, []byte) bool { return false }

// vnniRepacks is false: no kernel streams Q8_0x4, Q5_0x4 or Q5_1x4 on
// this build.
func vnniRepacks() bool { return false }

// q5Repacks is false: no assembly kernel streams Q5_0x4 or Q5_1x4 on this
// build.
func q5Repacks() bool { return false }

// kRepacks is false: no kernel streams the K-quants' four-row layouts on
// this build.
func kRepacks() bool { return false }
