package engine

import (
	"fmt"
	"unsafe"

	"flywheel/internal/engine/kernels"
	"flywheel/internal/engine/params"
	"flywheel/internal/safetensors"
)

// Mat is a weight matrix as the passes read it: float32 values (F32); the
// 16-bit values of a BF16/F16 checkpoint as stored (Half, of type
// HalfType), which the kernels widen to float32 as they multiply, so a
// half-precision model is held and streamed at half the bytes; or the
// blocks of a GGUF block-quantized tensor as stored (Quant, of type
// QuantType: whole blocks, row after row, in ggml's layout), which the
// kernels dequantise as they multiply. Exactly one of F32, Half and Quant
// is set (all nil: absent). A quantized Mat's rows each hold whole blocks
// (cols % BlockElems == 0), so slicing at row boundaries (fused q/k/v,
// gate/up) is slicing bytes; a model holds its Q4_1 and Q4_0 matrices (and
// Q8_0 ones where the CPU has VNNI) in the four-row layout
// (repackWeights), sliced at multiples of four rows.
type Mat struct {
	F32       []float32
	Half      []uint16
	HalfType  kernels.HalfType
	Quant     []byte
	QuantType kernels.QuantType
	// Cols is the values per row of a matrix in a four-row layout
	// (QuantType.Repacked(), see repackWeights), which DequantMat needs;
	// 0 for every other Mat.
	Cols int
}

// F32Mat wraps float32 values.
func F32Mat(v []float32) Mat { return Mat{F32: v} }

// Len is the number of values.
func (m Mat) Len() int {
	switch {
	case m.Quant != nil:
		if m.QuantType.BlockBytes() == 0 {
			return 0 // not a quantized type: Weights.Check refuses it
		}
		return len(m.Quant) / m.QuantType.BlockBytes() * m.QuantType.BlockElems()
	case m.Half != nil:
		return len(m.Half)
	}
	return len(m.F32)
}

// Float32 returns the values as float32: F32 itself, or Half widened
// (exact) or Quant dequantised (exactly as ggml does) into a new slice.
func (m Mat) Float32() []float32 {
	switch {
	case m.Quant != nil:
		out := make([]float32, m.Len())
		kernels.DequantMat(m.QuantType, out, m.Quant, m.Cols)
		return out
	case m.Half != nil:
		out := make([]float32, len(m.Half))
		kernels.HalfToFloat32(m.HalfType, out, m.Half)
		return out
	}
	return m.F32
}

// slice is the values [i, j) (for a quantized Mat, i and j are multiples
// of the block size; in a four-row layout, of four rows).
func (m Mat) slice(i, j int) Mat {
	switch {
	case m.Quant != nil:
		if m.Cols > 0 && (i%(4*m.Cols) != 0 || j%(4*m.Cols) != 0) {
			panic(fmt.Sprintf("engine: values [%d, %d) of a %v matrix are not whole groups of four %d-value rows", i, j, m.QuantType, m.Cols))
		}
		bi, bj := m.byteOff(i), m.byteOff(j)
		return Mat{Quant: m.Quant[bi:bj:bj], QuantType: m.QuantType, Cols: m.Cols}
	case m.Half != nil:
		return Mat{Half: m.Half[i:j:j], HalfType: m.HalfType}
	}
	return Mat{F32: m.F32[i:j:j]}
}

// parts cuts m into consecutive parts of the given lengths (which sum to
// m.Len()): the fused q/k/v and gate/up layout, one buffer holding its
// matrices back to back, as LoadWeights, RandomWeights and ToHalf build it.
func (m Mat) parts(lens ...int) []Mat {
	out := make([]Mat, len(lens))
	off := 0
	for i, n := range lens {
		out[i] = m.slice(off, off+n)
		off += n
	}
	if off != m.Len() {
		panic(fmt.Sprintf("engine: parts of %d values sum to %d", m.Len(), off))
	}
	return out
}

// same reports whether a and b are the same buffer (tied embeddings).
func (m Mat) same(b Mat) bool {
	if m.kind() != b.kind() || m.Len() == 0 || b.Len() == 0 {
		return false
	}
	return m.addr() == b.addr()
}

// kind is 0 for float32, 1 for half precision, 2 for quantized values.
func (m Mat) kind() int {
	switch {
	case m.Quant != nil:
		return 2
	case m.Half != nil:
		return 1
	}
	return 0
}

// addr is the address of the first value (0 when empty), for partsOf.
func (m Mat) addr() uintptr {
	switch {
	case len(m.Quant) > 0:
		return uintptr(unsafe.Pointer(&m.Quant[0]))
	case len(m.Half) > 0:
		return uintptr(unsafe.Pointer(&m.Half[0]))
	case len(m.F32) > 0:
		return uintptr(unsafe.Pointer(&m.F32[0]))
	}
	return 0
}

// byteOff is the offset in bytes of value i (for a quantized Mat, i is a
// multiple of the block size).
func (m Mat) byteOff(i int) int {
	switch {
	case m.Quant != nil:
		if m.QuantType.BlockElems() == 0 {
			return 0
		}
		return i / m.QuantType.BlockElems() * m.QuantType.BlockBytes()
	case m.Half != nil:
		return 2 * i
	}
	return 4 * i
}

// Bytes is the memory the values take.
func (m Mat) Bytes() int64 { return int64(m.byteOff(m.Len())) }

// toHalf rounds float32 values to t (round to nearest even) into h.
func toHalf(t kernels.HalfType, h []uint16, v []float32) {
	for i, x := range v {
		if t == kernels.BF16 {
			h[i] = safetensors.F32ToBF16(x)
		} else {
			h[i] = safetensors.F32ToF16(x)
		}
	}
}

// ToHalf returns a copy of w whose matrices (embeddings, projections, LM
// head) are rounded to t, as a checkpoint saved in t would load (norms and
// biases stay float32); the fused q/k/v and gate/up layout and tied
// embeddings are kept; the new matrices are in one arena. For tests and
// benchmarks.
func (w *Weights) ToHalf(t kernels.HalfType) *Weights {
	like := Mat{Half: []uint16{}, HalfType: t}
	a := w.arenaFor(func(m Mat) int { return matBytes(like, m.Len()) })
	return w.mapMats(func(m Mat) Mat {
		if m.Half != nil && m.HalfType == t {
			return m
		}
		out := a.mat(like, m.Len())
		toHalf(t, out.Half, m.Float32())
		return out
	})
}

// ToQuant returns a copy of w whose matrices are quantized to t with
// kernels.QuantizeRow, as a GGUF file of that type would load (norms and
// biases stay float32; fused layouts and tied embeddings kept). Every
// matrix's rows must hold whole blocks of t (its columns a multiple of
// t.BlockElems()); the new matrices are in one arena. For tests and
// benchmarks.
func (w *Weights) ToQuant(t kernels.QuantType) *Weights {
	like := Mat{Quant: []byte{}, QuantType: t}
	a := w.arenaFor(func(m Mat) int { return matBytes(like, m.Len()) })
	return w.mapMats(func(m Mat) Mat {
		if m.Quant != nil && m.QuantType == t {
			return m
		}
		out := a.mat(like, m.Len())
		kernels.QuantizeRow(t, out.Quant, m.Float32())
		return out
	})
}

// mapMats returns a copy of w with every matrix replaced by cv of it,
// keeping the fused q/k/v and gate/up layout and tied embeddings.
func (w *Weights) mapMats(cv func(Mat) Mat) *Weights {
	out := &Weights{Embed: cv(w.Embed), Norm: w.Norm, Layers: make([]Layer, len(w.Layers))}
	if w.LMHead.same(w.Embed) {
		out.LMHead = out.Embed
	} else {
		out.LMHead = cv(w.LMHead)
	}
	for l := range w.Layers {
		L := w.Layers[l]
		if partsOf(L.QKV, L.Wq, L.Wk, L.Wv) {
			L.QKV = cv(L.QKV)
			p := L.QKV.parts(L.Wq.Len(), L.Wk.Len(), L.Wv.Len())
			L.Wq, L.Wk, L.Wv = p[0], p[1], p[2]
		} else {
			L.QKV, L.Wq, L.Wk, L.Wv = Mat{}, cv(L.Wq), cv(L.Wk), cv(L.Wv)
		}
		if partsOf(L.GateUp, L.Wgate, L.Wup) {
			L.GateUp = cv(L.GateUp)
			p := L.GateUp.parts(L.Wgate.Len(), L.Wup.Len())
			L.Wgate, L.Wup = p[0], p[1]
		} else {
			L.GateUp, L.Wgate, L.Wup = Mat{}, cv(L.Wgate), cv(L.Wup)
		}
		L.Wo, L.Wdown = cv(L.Wo), cv(L.Wdown)
		out.Layers[l] = L
	}
	return out
}

// fusedLayer views a layer's q/k/v weights as one [Q+2KV, H] matrix and
// its gate/up weights as one [2I, H] matrix when the layer carries them as
// one buffer (Layer.QKV, Layer.GateUp, which LoadWeights and RandomWeights
// fill) and the separate matrices are exactly its parts, so the forward
// pass runs one matrix product instead of three and two; nil fields mean
// the weights are separate (e.g. built by hand, or replaced after loading).
type fusedLayer struct{ qkv, gu Mat }

// partsOf reports whether the matrices parts lie back to back at the start
// of buf, in its precision, and fill it exactly.
func partsOf(buf Mat, parts ...Mat) bool {
	off := 0
	for _, p := range parts {
		if p.Len() == 0 || off+p.Len() > buf.Len() || p.kind() != buf.kind() || p.QuantType != buf.QuantType ||
			p.addr() != buf.addr()+uintptr(buf.byteOff(off)) {
			return false
		}
		off += p.Len()
	}
	return off == buf.Len()
}

func fuse(w *Weights) []fusedLayer {
	f := make([]fusedLayer, len(w.Layers))
	for l := range w.Layers {
		L := &w.Layers[l]
		if partsOf(L.QKV, L.Wq, L.Wk, L.Wv) {
			f[l].qkv = L.QKV
		}
		if partsOf(L.GateUp, L.Wgate, L.Wup) {
			f[l].gu = L.GateUp
		}
	}
	return f
}

// Layer holds one decoder layer's weights: matrices in float32 or as a
// BF16/F16 checkpoint stores them (Mat), norms and biases in float32.
// Linear weights use the Hugging Face layout [out, in] (row-major), so
// y = x · Wᵀ (+ b).
//
//	H = HiddenSize, I = IntermediateSize, D = HeadDim,
//	Q = NumHeads*D, KV = NumKVHeads*D
type Layer struct {
	AttnNorm     []float32 // [H]   input_layernorm
	Wq           Mat       // [Q, H]
	Wk           Mat       // [KV, H]
	Wv           Mat       // [KV, H]
	Wo           Mat       // [H, Q]
	Bq, Bk, Bv   []float32 // [Q], [KV], [KV]; nil without attention bias
	Bo           []float32 // [H] o_proj bias; nil unless Config.OutputBias
	QNorm, KNorm []float32 // [D] per-head RMSNorm weights (Qwen3); nil otherwise
	MLPNorm      []float32 // [H]   post_attention_layernorm
	Wgate        Mat       // [I, H]
	Wup          Mat       // [I, H]
	Wdown        Mat       // [H, I]
	// QKV and GateUp, when set, are one buffer holding Wq, Wk, Wv (resp.
	// Wgate, Wup) back to back; the forward pass then multiplies by each as
	// one matrix. LoadWeights and RandomWeights set them.
	QKV, GateUp Mat
}

// Weights is a whole model's parameters (matrices in float32 or BF16/F16,
// see Mat).
type Weights struct {
	Embed  Mat // [V, H] embed_tokens
	Layers []Layer
	Norm   []float32 // [H] final norm
	LMHead Mat       // [V, H]; the same buffer as Embed when embeddings are tied
}

// Module names of the projections a LoRA adapter can target, as in PEFT.
const (
	ModQ    = "q_proj"
	ModK    = "k_proj"
	ModV    = "v_proj"
	ModO    = "o_proj"
	ModGate = "gate_proj"
	ModUp   = "up_proj"
	ModDown = "down_proj"
)

// AllModules lists every LoRA-targetable projection, in layer order.
var AllModules = []string{ModQ, ModK, ModV, ModO, ModGate, ModUp, ModDown}

// moduleRole is the parameter of a LoRA-targetable projection (a switch,
// not a map: every forward batch asks it for each adapted module).
func moduleRole(module string) (params.Role, bool) {
	switch module {
	case ModQ:
		return params.Wq, true
	case ModK:
		return params.Wk, true
	case ModV:
		return params.Wv, true
	case ModO:
		return params.Wo, true
	case ModGate:
		return params.Wgate, true
	case ModUp:
		return params.Wup, true
	case ModDown:
		return params.Wdown, true
	}
	return 0, false
}

// ModuleShape returns (out, in) of a projection of a layer.
func (c *Config) ModuleShape(module string) (out, in int, ok bool) {
	r, ok := moduleRole(module)
	if !ok {
		return 0, 0, false
	}
	s := params.Shape{Hidden: c.HiddenSize, Intermediate: c.IntermediateSize, Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: c.HeadDim}
	return s.MatrixDims(r)
}

// ModulePrefix is the Hugging Face module path of a layer's projection,
// e.g. "model.layers.3.self_attn.q_proj" ("" for a module not in
// AllModules).
func ModulePrefix(layer int, module string) string {
	r, ok := moduleRole(module)
	if !ok {
		return ""
	}
	return params.Module(r, layer)
}

// slot is where parameter p lives in w: a float32 vector (norms and
// biases) or a matrix, and for q/k/v and gate/up also the buffer that
// holds a layer's parts back to back (see Layer.QKV).
func (w *Weights) slot(p params.Param) (vec *[]float32, mat, fused *Mat) {
	var L *Layer
	if p.Layer >= 0 {
		L = &w.Layers[p.Layer]
	}
	switch p.Role {
	case params.Embed:
		return nil, &w.Embed, nil
	case params.Norm:
		return &w.Norm, nil, nil
	case params.LMHead:
		return nil, &w.LMHead, nil
	case params.AttnNorm:
		return &L.AttnNorm, nil, nil
	case params.Wq:
		return nil, &L.Wq, &L.QKV
	case params.Wk:
		return nil, &L.Wk, &L.QKV
	case params.Wv:
		return nil, &L.Wv, &L.QKV
	case params.Wo:
		return nil, &L.Wo, nil
	case params.Bq:
		return &L.Bq, nil, nil
	case params.Bk:
		return &L.Bk, nil, nil
	case params.Bv:
		return &L.Bv, nil, nil
	case params.Bo:
		return &L.Bo, nil, nil
	case params.QNorm:
		return &L.QNorm, nil, nil
	case params.KNorm:
		return &L.KNorm, nil, nil
	case params.MLPNorm:
		return &L.MLPNorm, nil, nil
	case params.Wgate:
		return nil, &L.Wgate, &L.GateUp
	case params.Wup:
		return nil, &L.Wup, &L.GateUp
	case params.Wdown:
		return nil, &L.Wdown, nil
	}
	panic(fmt.Sprintf("engine: no slot for parameter %s", p.HF))
}

// fuseGroup is parameters (by index in their list) that are stored back
// to back in one buffer, dst.
type fuseGroup struct {
	dst   *Mat
	parts []int
}

// fuseGroups is the fused buffers of w for the parameter list ps: each
// layer's q/k/v and gate/up (consecutive in the list).
func (w *Weights) fuseGroups(ps []params.Param) []fuseGroup {
	var gs []fuseGroup
	for i, p := range ps {
		_, _, f := w.slot(p)
		switch {
		case f == nil:
		case len(gs) > 0 && gs[len(gs)-1].dst == f:
			gs[len(gs)-1].parts = append(gs[len(gs)-1].parts, i)
		default:
			gs = append(gs, fuseGroup{dst: f, parts: []int{i}})
		}
	}
	return gs
}
