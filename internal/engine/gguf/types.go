package gguf

import "fmt"

// GGMLType is a tensor's storage type (ggml's enum ggml_type).
type GGMLType uint32

// The ggml types this reader can size. Which of them the engine computes
// with is the engine's business (kernels.QuantTypeFromGGML).
const (
	F32  GGMLType = 0
	F16  GGMLType = 1
	Q4_0 GGMLType = 2
	Q4_1 GGMLType = 3
	Q5_0 GGMLType = 6
	Q5_1 GGMLType = 7
	Q8_0 GGMLType = 8
	Q8_1 GGMLType = 9
	Q2_K GGMLType = 10
	Q3_K GGMLType = 11
	Q4_K GGMLType = 12
	Q5_K GGMLType = 13
	Q6_K GGMLType = 14
	Q8_K GGMLType = 15
	I8   GGMLType = 24
	I16  GGMLType = 25
	I32  GGMLType = 26
	I64  GGMLType = 27
	F64  GGMLType = 28
	BF16 GGMLType = 30
)

type typeInfo struct {
	name         string
	elems, bytes int // values per block, bytes per block
}

var typeInfos = map[GGMLType]typeInfo{
	F32: {"F32", 1, 4}, F16: {"F16", 1, 2}, BF16: {"BF16", 1, 2}, F64: {"F64", 1, 8},
	I8: {"I8", 1, 1}, I16: {"I16", 1, 2}, I32: {"I32", 1, 4}, I64: {"I64", 1, 8},
	Q4_0: {"Q4_0", 32, 18}, Q4_1: {"Q4_1", 32, 20}, Q5_0: {"Q5_0", 32, 22}, Q5_1: {"Q5_1", 32, 24},
	Q8_0: {"Q8_0", 32, 34}, Q8_1: {"Q8_1", 32, 36},
	Q2_K: {"Q2_K", 256, 84}, Q3_K: {"Q3_K", 256, 110}, Q4_K: {"Q4_K", 256, 144},
	Q5_K: {"Q5_K", 256, 176}, Q6_K: {"Q6_K", 256, 210}, Q8_K: {"Q8_K", 256, 292},
}

// String is ggml's name of the type ("Q4_1"), or "type(N)" for one this
// reader does not know.
func (t GGMLType) String() string {
	if ti, ok := typeInfos[t]; ok {
		return ti.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// BlockElems is the number of values per block (1 for plain types, 0 when
// unknown).
func (t GGMLType) BlockElems() int { return typeInfos[t].elems }

// BlockBytes is the bytes per block (0 when unknown).
func (t GGMLType) BlockBytes() int { return typeInfos[t].bytes }

// RowBytes is the bytes of a row of n values (n a multiple of BlockElems).
func (t GGMLType) RowBytes(n int) int {
	ti := typeInfos[t]
	if ti.elems == 0 {
		return 0
	}
	return n / ti.elems * ti.bytes
}
