// Package params is the model's parameter list, written once (as llm.c's
// fill_in_parameter_sizes): for a model shape, every tensor in order with
// its Hugging Face name, its llama.cpp (GGUF) name, its shape, whether the
// architecture has it at all (q/k/v and o biases, Qwen3's q/k norms, a
// separate LM head) and how it is initialised. Loading safetensors
// folders, loading GGUF files, random weights and the built-in tiny model
// all iterate this list, so a tensor is named, shaped and seeded in one
// place. The package also holds the one random generator of initial
// values (SplitMix64).
package params

import (
	"fmt"
	"math"
	"strconv"
)

// Supported architectures (config.json's "architectures").
const (
	ArchLlama   = "LlamaForCausalLM"
	ArchQwen2   = "Qwen2ForCausalLM"
	ArchQwen3   = "Qwen3ForCausalLM"
	ArchMistral = "MistralForCausalLM"
)

// GGUFArch is GGUF's general.architecture of each supported architecture.
var GGUFArch = map[string]string{ArchLlama: "llama", ArchMistral: "mistral", ArchQwen2: "qwen2", ArchQwen3: "qwen3"}

// GGUFPermuted reports whether llama.cpp's converter reorders the rows of
// each head of q and k (and their biases) for arch: it does for llama and
// mistral (Hugging Face's rotate-half RoPE pairs (i, i+D/2), ggml's pairs
// (2i, 2i+1)); qwen2 and qwen3 files are not permuted.
func GGUFPermuted(arch string) bool { return arch == ArchLlama || arch == ArchMistral }

// UnsupportedArch is the error for an architecture outside the four.
func UnsupportedArch(arch string) error {
	return fmt.Errorf("unsupported architecture %q (supported: %s, %s, %s, %s)", arch, ArchLlama, ArchMistral, ArchQwen2, ArchQwen3)
}

// Features are the optional parameters of a model.
type Features struct {
	QKVBias bool // q/k/v projections carry biases
	OBias   bool // the o projection carries a bias
	QKNorm  bool // per-head RMSNorm weights of q and k (Qwen3)
}

// ArchFeatures is the rule of Hugging Face's modelling code for which
// optional parameters arch has, given config.json's attention_bias (nil
// when absent): Qwen2 has q/k/v biases unless attention_bias says false;
// Llama and Qwen3 with attention_bias put a bias on all four projections;
// Mistral has none whatever the field says; Qwen3 always has q/k norms.
// ok is false for an unsupported architecture.
func ArchFeatures(arch string, attentionBias *bool) (f Features, ok bool) {
	switch arch {
	case ArchLlama, ArchMistral:
	case ArchQwen2:
		f.QKVBias = true
	case ArchQwen3:
		f.QKNorm = true
	default:
		return f, false
	}
	if attentionBias != nil && arch != ArchMistral {
		f.QKVBias = *attentionBias
		f.OBias = f.QKVBias && (arch == ArchLlama || arch == ArchQwen3)
	}
	return f, true
}

// Shape is what the parameter list depends on.
type Shape struct {
	Hidden, Intermediate, Vocab, Layers int
	Heads, KVHeads, HeadDim             int
	Features
	Tied bool // the LM head is the embedding matrix (no lm_head tensor)
}

// Role is which parameter of the model (or of a layer) a tensor is.
type Role int

// The roles, in the order of the list (a layer's roles repeat per layer).
const (
	Embed Role = iota
	AttnNorm
	Wq
	Wk
	Wv
	Wo
	Bq
	Bk
	Bv
	Bo
	QNorm
	KNorm
	MLPNorm
	Wgate
	Wup
	Wdown
	Norm
	LMHead
)

// Init is how a parameter is initialised: uniform with this centre and
// standard deviation.
type Init struct{ Center, SD float64 }

var (
	// linear is Hugging Face's initializer_range for matrices, biases and
	// embeddings.
	linear = Init{0, 0.02}
	// norm is RMSNorm weights near 1.
	norm = Init{1, 0.1}
)

// roles names each role: the Hugging Face module (under
// "model.layers.N." for a layer's) and tensor suffix, llama.cpp's name
// (under "blk.N."), and the initialisation.
var roles = [...]struct {
	module, suffix, gguf string
	init                 Init
}{
	Embed:    {"model.embed_tokens", "weight", "token_embd.weight", linear},
	AttnNorm: {"input_layernorm", "weight", "attn_norm.weight", norm},
	Wq:       {"self_attn.q_proj", "weight", "attn_q.weight", linear},
	Wk:       {"self_attn.k_proj", "weight", "attn_k.weight", linear},
	Wv:       {"self_attn.v_proj", "weight", "attn_v.weight", linear},
	Wo:       {"self_attn.o_proj", "weight", "attn_output.weight", linear},
	Bq:       {"self_attn.q_proj", "bias", "attn_q.bias", linear},
	Bk:       {"self_attn.k_proj", "bias", "attn_k.bias", linear},
	Bv:       {"self_attn.v_proj", "bias", "attn_v.bias", linear},
	Bo:       {"self_attn.o_proj", "bias", "attn_output.bias", linear},
	QNorm:    {"self_attn.q_norm", "weight", "attn_q_norm.weight", norm},
	KNorm:    {"self_attn.k_norm", "weight", "attn_k_norm.weight", norm},
	MLPNorm:  {"post_attention_layernorm", "weight", "ffn_norm.weight", norm},
	Wgate:    {"mlp.gate_proj", "weight", "ffn_gate.weight", linear},
	Wup:      {"mlp.up_proj", "weight", "ffn_up.weight", linear},
	Wdown:    {"mlp.down_proj", "weight", "ffn_down.weight", linear},
	Norm:     {"model.norm", "weight", "output_norm.weight", norm},
	LMHead:   {"lm_head", "weight", "output.weight", linear},
}

// Param is one tensor of the model.
type Param struct {
	Role  Role
	Layer int    // the decoder layer; -1 for the embedding, final norm and LM head
	HF    string // Hugging Face name, e.g. "model.layers.0.self_attn.q_proj.weight"
	GGUF  string // llama.cpp's name, e.g. "blk.0.attn_q.weight"
	Shape []int  // Hugging Face layout: [out, in] for matrices, [n] for vectors
	Init  Init
	// RoPEHeads > 0 marks q and k (weights and biases): their rows come
	// in RoPEHeads heads, which GGUF files of GGUFPermuted architectures
	// store reordered.
	RoPEHeads int
}

// Len is the number of values.
func (p Param) Len() int {
	n := 1
	for _, d := range p.Shape {
		n *= d
	}
	return n
}

// Matrix reports whether p is a matrix (the rest are float32 vectors:
// norms and biases).
func (p Param) Matrix() bool { return len(p.Shape) == 2 }

// Of is the shape of role r.
func (s Shape) Of(r Role) []int {
	if out, in, ok := s.MatrixDims(r); ok {
		return []int{out, in}
	}
	return []int{s.vectorLen(r)}
}

// MatrixDims is (out, in) of a matrix role, cheaply (the adapter checks
// of every forward batch ask it); ok is false for a vector role.
func (s *Shape) MatrixDims(r Role) (out, in int, ok bool) {
	switch r {
	case Embed, LMHead:
		return s.Vocab, s.Hidden, true
	case Wq:
		return s.Heads * s.HeadDim, s.Hidden, true
	case Wk, Wv:
		return s.KVHeads * s.HeadDim, s.Hidden, true
	case Wo:
		return s.Hidden, s.Heads * s.HeadDim, true
	case Wgate, Wup:
		return s.Intermediate, s.Hidden, true
	case Wdown:
		return s.Hidden, s.Intermediate, true
	}
	return 0, 0, false
}

// vectorLen is the length of a vector role (norms and biases).
func (s *Shape) vectorLen(r Role) int {
	switch r {
	case AttnNorm, MLPNorm, Norm, Bo:
		return s.Hidden
	case Bq:
		return s.Heads * s.HeadDim
	case Bk, Bv:
		return s.KVHeads * s.HeadDim
	case QNorm, KNorm:
		return s.HeadDim
	}
	panic("params: unknown role " + strconv.Itoa(int(r)))
}

// Module is the Hugging Face module path of role r in layer (-1: a
// model-level role), e.g. "model.layers.3.self_attn.q_proj": the name of
// its tensors without ".weight"/".bias", and the key PEFT adapters use.
func Module(r Role, layer int) string {
	if layer < 0 {
		return roles[r].module
	}
	return "model.layers." + strconv.Itoa(layer) + "." + roles[r].module
}

// GGUFName is llama.cpp's name of role r's tensor in layer (-1: a
// model-level role), e.g. "blk.3.attn_q.weight".
func GGUFName(r Role, layer int) string {
	if layer < 0 {
		return roles[r].gguf
	}
	return "blk." + strconv.Itoa(layer) + "." + roles[r].gguf
}

// List is the model's parameters in order: the embedding; per layer the
// input norm, q, k, v, o, the q/k/v biases, the o bias, the q/k norms,
// the post-attention norm, gate, up, down; the final norm; the LM head.
// Parameters the shape's features or tied embeddings leave out are not
// listed.
func List(s Shape) []Param {
	ps := make([]Param, 0, 3+s.Layers*16)
	add := func(r Role, layer int) {
		p := Param{Role: r, Layer: layer, HF: Module(r, layer) + "." + roles[r].suffix, GGUF: GGUFName(r, layer),
			Shape: s.Of(r), Init: roles[r].init}
		switch r {
		case Wq, Bq:
			p.RoPEHeads = s.Heads
		case Wk, Bk:
			p.RoPEHeads = s.KVHeads
		}
		ps = append(ps, p)
	}
	add(Embed, -1)
	for l := 0; l < s.Layers; l++ {
		for _, r := range []Role{AttnNorm, Wq, Wk, Wv, Wo} {
			add(r, l)
		}
		if s.QKVBias {
			add(Bq, l)
			add(Bk, l)
			add(Bv, l)
		}
		if s.OBias {
			add(Bo, l)
		}
		if s.QKNorm {
			add(QNorm, l)
			add(KNorm, l)
		}
		for _, r := range []Role{MLPNorm, Wgate, Wup, Wdown} {
			add(r, l)
		}
	}
	add(Norm, -1)
	if !s.Tied {
		add(LMHead, -1)
	}
	return ps
}

// Fill writes the initial values of the index-th parameter of a list into
// v: uniform with in's centre and standard deviation, from a SplitMix64
// stream seeded by seed and index, so the same seed gives the same values
// on every platform, whichever order the parameters are filled in.
func Fill(v []float32, in Init, seed uint64, index int) {
	r := SplitMix{seed ^ uint64(index+1)*golden}
	a := in.SD * math.Sqrt(3) // uniform [-a, a] has standard deviation SD
	for k := range v {
		v[k] = float32(in.Center + a*(2*r.Float64()-1))
	}
}

// golden is SplitMix64's increment (2^64 / the golden ratio).
const golden = 0x9e3779b97f4a7c15

// SplitMix is the SplitMix64 generator (Steele, Lea and Flood 2014): tiny,
// fast and fully specified, so its values are the same on every platform
// and Go version. S is the state; any value is a valid seed.
type SplitMix struct{ S uint64 }

// Next returns the next 64 random bits.
func (r *SplitMix) Next() uint64 {
	r.S += golden
	z := r.S
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Float64 returns a uniform value in [0, 1) with 53 random bits.
func (r *SplitMix) Float64() float64 { return float64(r.Next()>>11) / (1 << 53) }
