package engine

import (
	"fmt"

	"flywheel/internal/engine/gguf"
	"flywheel/internal/engine/kernels"
)

// checkQuant checks that the kernels compute with t's block-quantized type.
func checkQuant(t *gguf.Tensor) error {
	if _, ok := kernels.QuantTypeFromGGML(uint32(t.Type)); !ok {
		return fmt.Errorf("tensor %s: unsupported type %s (supported: F32, F16, BF16, %s)", t.Name, t.Type, quantTypeNames())
	}
	return nil
}

func quantTypeNames() string {
	s := ""
	for _, q := range kernels.FileTypes() {
		if s != "" {
			s += ", "
		}
		s += q.String()
	}
	return s
}

// quantMat is the quantized Mat of t's type over data (not copied).
func quantMat(t *gguf.Tensor, data []byte) (Mat, error) {
	qt, ok := kernels.QuantTypeFromGGML(uint32(t.Type))
	if !ok {
		return Mat{}, checkQuant(t)
	}
	return Mat{Quant: data, QuantType: qt}, nil
}

// quantBytes is a quantized Mat's bytes (nil for others).
func quantBytes(m Mat) []byte { return m.Quant }
