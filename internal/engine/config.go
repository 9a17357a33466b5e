package engine

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"flywheel/internal/basemodels"
	"flywheel/internal/engine/params"
)

// RopeScaling is the `rope_scaling` block of config.json: "linear" divides
// every frequency by factor, "llama3" (Llama-3.1/3.2) rescales the low
// frequencies; "default"/absent is plain RoPE; any other type is refused.
type RopeScaling struct {
	RopeType                      string  `json:"rope_type"`
	Type                          string  `json:"type"` // older spelling of rope_type
	Factor                        float64 `json:"factor"`
	LowFreqFactor                 float64 `json:"low_freq_factor"`
	HighFreqFactor                float64 `json:"high_freq_factor"`
	OriginalMaxPositionEmbeddings int     `json:"original_max_position_embeddings"`
}

// Config is the subset of a Hugging Face config.json that the engine needs,
// normalised across architectures.
type Config struct {
	Architecture          string // e.g. "LlamaForCausalLM"
	ModelType             string // e.g. "llama", "qwen2", "qwen3", "mistral"
	HiddenSize            int
	IntermediateSize      int
	NumLayers             int
	NumHeads              int
	NumKVHeads            int
	HeadDim               int
	VocabSize             int
	MaxPositionEmbeddings int
	RMSNormEps            float64
	RopeTheta             float64
	RopeScaling           *RopeScaling
	TieWordEmbeddings     bool
	AttentionBias         bool // q/k/v projections carry biases (Qwen2 always)
	OutputBias            bool // o_proj carries a bias (Llama and Qwen3 with attention_bias)
	QKNorm                bool // per-head RMSNorm of q and k before RoPE (Qwen3)
	BOSTokenID            int  // -1 when absent
	EOSTokenIDs           []int
	TorchDtype            string
	// SlidingWindow > 0 limits attention to the last SlidingWindow positions
	// (Mistral's sliding_window); 0 means full causal attention.
	SlidingWindow int
}

// Supported architectures.
const (
	ArchLlama   = params.ArchLlama
	ArchQwen2   = params.ArchQwen2
	ArchQwen3   = params.ArchQwen3
	ArchMistral = params.ArchMistral
)

type rawConfig struct {
	Architectures         []string        `json:"architectures"`
	ModelType             string          `json:"model_type"`
	HiddenSize            int             `json:"hidden_size"`
	IntermediateSize      int             `json:"intermediate_size"`
	NumHiddenLayers       int             `json:"num_hidden_layers"`
	NumAttentionHeads     int             `json:"num_attention_heads"`
	NumKeyValueHeads      int             `json:"num_key_value_heads"`
	HeadDim               int             `json:"head_dim"`
	VocabSize             int             `json:"vocab_size"`
	MaxPositionEmbeddings int             `json:"max_position_embeddings"`
	RMSNormEps            float64         `json:"rms_norm_eps"`
	RopeTheta             float64         `json:"rope_theta"`
	RopeScaling           *RopeScaling    `json:"rope_scaling"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings"`
	AttentionBias         *bool           `json:"attention_bias"`
	BOSTokenID            json.RawMessage `json:"bos_token_id"`
	EOSTokenID            json.RawMessage `json:"eos_token_id"`
	TorchDtype            string          `json:"torch_dtype"`
	HiddenAct             string          `json:"hidden_act"`
	SlidingWindow         *int            `json:"sliding_window"`
	UseSlidingWindow      *bool           `json:"use_sliding_window"`
	MLPBias               bool            `json:"mlp_bias"`
	PartialRotaryFactor   *float64        `json:"partial_rotary_factor"`
	LayerTypes            []string        `json:"layer_types"`
	AttnLogitSoftcapping  *float64        `json:"attn_logit_softcapping"`
	FinalLogitSoftcapping *float64        `json:"final_logit_softcapping"`
}

// ReadConfig reads and validates dir/config.json, or the metadata of dir
// when it names a GGUF file.
func ReadConfig(dir string) (*Config, error) {
	if basemodels.IsGGUF(dir) {
		return readGGUFConfig(dir)
	}
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("engine: read config: %w", err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("engine: %s: %w", filepath.Join(dir, "config.json"), err)
	}
	return cfg, nil
}

// ParseConfig parses config.json bytes.
func ParseConfig(data []byte) (*Config, error) {
	var r rawConfig
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if len(r.Architectures) == 0 {
		return nil, fmt.Errorf("no architectures listed")
	}
	c := &Config{
		Architecture:          r.Architectures[0],
		ModelType:             r.ModelType,
		HiddenSize:            r.HiddenSize,
		IntermediateSize:      r.IntermediateSize,
		NumLayers:             r.NumHiddenLayers,
		NumHeads:              r.NumAttentionHeads,
		NumKVHeads:            r.NumKeyValueHeads,
		HeadDim:               r.HeadDim,
		VocabSize:             r.VocabSize,
		MaxPositionEmbeddings: r.MaxPositionEmbeddings,
		RMSNormEps:            r.RMSNormEps,
		RopeTheta:             r.RopeTheta,
		RopeScaling:           r.RopeScaling,
		TorchDtype:            r.TorchDtype,
		BOSTokenID:            -1,
	}
	f, ok := params.ArchFeatures(c.Architecture, r.AttentionBias)
	if !ok {
		return nil, params.UnsupportedArch(c.Architecture)
	}
	c.AttentionBias, c.OutputBias, c.QKNorm = f.QKVBias, f.OBias, f.QKNorm
	if r.HiddenAct != "" && r.HiddenAct != "silu" {
		return nil, fmt.Errorf("unsupported hidden_act %q (only silu)", r.HiddenAct)
	}
	if r.MLPBias {
		return nil, fmt.Errorf("unsupported mlp_bias: true")
	}
	if c.NumKVHeads == 0 {
		c.NumKVHeads = c.NumHeads
	}
	if c.RMSNormEps == 0 {
		c.RMSNormEps = 1e-6
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	if r.TieWordEmbeddings != nil {
		c.TieWordEmbeddings = *r.TieWordEmbeddings
	}
	switch {
	case c.HiddenSize <= 0:
		return nil, fmt.Errorf("hidden_size must be positive")
	case c.NumHeads <= 0 || c.NumLayers <= 0 || c.IntermediateSize <= 0 || c.VocabSize <= 0:
		return nil, fmt.Errorf("num_attention_heads, num_hidden_layers, intermediate_size and vocab_size must be positive")
	case c.NumHeads%c.NumKVHeads != 0:
		return nil, fmt.Errorf("num_attention_heads %d is not a multiple of num_key_value_heads %d", c.NumHeads, c.NumKVHeads)
	}
	if c.HeadDim == 0 {
		if c.HiddenSize%c.NumHeads != 0 {
			return nil, fmt.Errorf("hidden_size %d is not a multiple of num_attention_heads %d", c.HiddenSize, c.NumHeads)
		}
		c.HeadDim = c.HiddenSize / c.NumHeads
	}
	if c.HeadDim%2 != 0 {
		return nil, fmt.Errorf("head_dim %d must be even for RoPE", c.HeadDim)
	}
	if rs := c.RopeScaling; rs != nil {
		if rs.RopeType == "" {
			rs.RopeType = rs.Type
		}
		switch rs.RopeType {
		case "", "default":
		case "linear":
			if !(rs.Factor > 0) {
				return nil, fmt.Errorf("rope_scaling: linear needs a positive factor")
			}
		case "llama3":
			if !(rs.Factor > 0) || !(rs.LowFreqFactor > 0) || !(rs.HighFreqFactor > rs.LowFreqFactor) || rs.OriginalMaxPositionEmbeddings <= 0 {
				return nil, fmt.Errorf("rope_scaling: llama3 needs factor > 0, 0 < low_freq_factor < high_freq_factor and original_max_position_embeddings")
			}
		default:
			return nil, fmt.Errorf("unsupported rope_scaling.rope_type %q (supported: default, linear, llama3)", rs.RopeType)
		}
	}
	// Fields that change the model's math and that the engine does not
	// implement are refused, never ignored: a model served or trained
	// without them would be a different model.
	if f := r.PartialRotaryFactor; f != nil && *f != 1 {
		return nil, fmt.Errorf("unsupported partial_rotary_factor %v (only 1: RoPE on the whole head)", *f)
	}
	for i, lt := range r.LayerTypes {
		if lt != "full_attention" {
			return nil, fmt.Errorf("unsupported layer_types[%d] %q (only full_attention)", i, lt)
		}
	}
	if r.AttnLogitSoftcapping != nil {
		return nil, fmt.Errorf("unsupported attn_logit_softcapping")
	}
	if r.FinalLogitSoftcapping != nil {
		return nil, fmt.Errorf("unsupported final_logit_softcapping")
	}
	switch c.Architecture {
	case ArchMistral:
		if r.SlidingWindow != nil && *r.SlidingWindow > 0 {
			c.SlidingWindow = *r.SlidingWindow
		}
	case ArchQwen2, ArchQwen3:
		if r.UseSlidingWindow != nil && *r.UseSlidingWindow {
			return nil, fmt.Errorf("use_sliding_window is not supported")
		}
	}
	if c.MaxPositionEmbeddings <= 0 {
		c.MaxPositionEmbeddings = 2048
	}
	if len(r.BOSTokenID) > 0 && string(r.BOSTokenID) != "null" {
		if err := json.Unmarshal(r.BOSTokenID, &c.BOSTokenID); err != nil {
			return nil, fmt.Errorf("bos_token_id: %w", err)
		}
	}
	if len(r.EOSTokenID) > 0 && string(r.EOSTokenID) != "null" {
		var one int
		if err := json.Unmarshal(r.EOSTokenID, &one); err == nil {
			c.EOSTokenIDs = []int{one}
		} else if err := json.Unmarshal(r.EOSTokenID, &c.EOSTokenIDs); err != nil {
			return nil, fmt.Errorf("eos_token_id: want an integer or a list of integers")
		}
	}
	return c, nil
}

// QDim is the width of the query projection output (NumHeads * HeadDim).
func (c *Config) QDim() int { return c.NumHeads * c.HeadDim }

// KVDim is the width of each of the key and value projection outputs.
func (c *Config) KVDim() int { return c.NumKVHeads * c.HeadDim }

// ParamShape is the shape the model's parameter list depends on.
func (c *Config) ParamShape() params.Shape {
	return params.Shape{Hidden: c.HiddenSize, Intermediate: c.IntermediateSize, Vocab: c.VocabSize, Layers: c.NumLayers,
		Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: c.HeadDim, Tied: c.TieWordEmbeddings,
		Features: params.Features{QKVBias: c.AttentionBias, OBias: c.OutputBias, QKNorm: c.QKNorm}}
}

// Params is the model's parameters in order (see params.List).
func (c *Config) Params() []params.Param { return params.List(c.ParamShape()) }
