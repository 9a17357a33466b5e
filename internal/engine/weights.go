package engine

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
	QNorm, KNorm []float32 // [D] per-head RMSNorm weights (Qwen3); nil otherwise
	MLPNorm      []float32 // [H]   post_attention_layernorm
	Wgate        []float32 // [I, H]
	Wup          []float32 // [I, H]
	Wdown        []float32 // [H, I]
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
