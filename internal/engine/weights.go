package engine

// fusedLayer views a layer's q/k/v weights as one [Q+2KV, H] matrix and
// its gate/up weights as one [2I, H] matrix when the layer carries them as
// one buffer (Layer.QKV, Layer.GateUp, which LoadWeights and RandomWeights
// fill) and the separate matrices are exactly its parts, so the forward
// pass runs one matrix product instead of three and two; nil fields mean
// the weights are separate (e.g. built by hand, or replaced after loading).
type fusedLayer struct{ qkv, gu []float32 }

// partsOf reports whether the slices parts lie back to back at the start of
// buf and fill it exactly (compared element address by element address, so
// no pointer leaves its allocation).
func partsOf(buf []float32, parts ...[]float32) bool {
	off := 0
	for _, p := range parts {
		if len(p) == 0 || off+len(p) > len(buf) || &buf[off] != &p[0] {
			return false
		}
		off += len(p)
	}
	return off == len(buf)
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

// Layer holds one decoder layer's weights in float32. Linear weights use
// the Hugging Face layout [out, in] (row-major), so y = x · Wᵀ (+ b).
//
//	H = HiddenSize, I = IntermediateSize, D = HeadDim,
//	Q = NumHeads*D, KV = NumKVHeads*D
type Layer struct {
	AttnNorm     []float32 // [H]   input_layernorm
	Wq           []float32 // [Q, H]
	Wk           []float32 // [KV, H]
	Wv           []float32 // [KV, H]
	Wo           []float32 // [H, Q]
	Bq, Bk, Bv   []float32 // [Q], [KV], [KV]; nil without attention bias
	Bo           []float32 // [H] o_proj bias; nil unless Config.OutputBias
	QNorm, KNorm []float32 // [D] per-head RMSNorm weights (Qwen3); nil otherwise
	MLPNorm      []float32 // [H]   post_attention_layernorm
	Wgate        []float32 // [I, H]
	Wup          []float32 // [I, H]
	Wdown        []float32 // [H, I]
	// QKV and GateUp, when set, are one buffer holding Wq, Wk, Wv (resp.
	// Wgate, Wup) back to back; the forward pass then multiplies by each as
	// one matrix. LoadWeights and RandomWeights set them.
	QKV, GateUp []float32
}

// Weights is a whole model's parameters in float32.
type Weights struct {
	Embed  []float32 // [V, H] embed_tokens
	Layers []Layer
	Norm   []float32 // [H] final norm
	LMHead []float32 // [V, H]; the same slice as Embed when embeddings are tied
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

// ModuleShape returns (out, in) of a projection of a layer.
func (c *Config) ModuleShape(module string) (out, in int, ok bool) {
	switch module {
	case ModQ:
		return c.QDim(), c.HiddenSize, true
	case ModK, ModV:
		return c.KVDim(), c.HiddenSize, true
	case ModO:
		return c.HiddenSize, c.QDim(), true
	case ModGate, ModUp:
		return c.IntermediateSize, c.HiddenSize, true
	case ModDown:
		return c.HiddenSize, c.IntermediateSize, true
	}
	return 0, 0, false
}

// ModulePrefix is the Hugging Face module path of a layer's projection,
// e.g. "model.layers.3.self_attn.q_proj".
func ModulePrefix(layer int, module string) string {
	switch module {
	case ModQ, ModK, ModV, ModO:
		return "model.layers." + itoa(layer) + ".self_attn." + module
	default:
		return "model.layers." + itoa(layer) + ".mlp." + module
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	n := len(b)
	neg := i < 0
	if neg {
		i = -i
	}
	for i > 0 {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
	}
	if neg {
		n--
		b[n] = '-'
	}
	return string(b[n:])
}
