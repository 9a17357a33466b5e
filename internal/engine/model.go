package engine

import (
	"encoding/json"
	"flywheel/internal/basemodels"
	"fmt"
	"os"
	"path/filepath"

	"flywheel/internal/engine/chattmpl"
	"flywheel/internal/engine/tokenizer"
)

// Model is a loaded base model: configuration, weights, tokenizer, chat
// template and generation defaults. A Model is immutable after loading and
// safe for concurrent use; per-sequence state lives in Seq.
type Model struct {
	ID, Dir   string
	Config    *Config
	Weights   *Weights
	Tokenizer *tokenizer.Tokenizer
	// Template is the chat template; nil when the folder has none, with
	// TemplateErr saying why.
	Template    *chattmpl.Template
	TemplateErr error
	Gen         GenerationConfig

	net *Net[float32] // the model definition over these weights
}

// NewModel assembles a model from parts (tests, benchmarks, and Load).
// tok and tmpl may be nil. It panics when w does not fit cfg. It replaces
// w's Q4_1 and Q4_0 matrices by copies (in one arena) in the four-row
// layout the decode kernels stream fastest (repackWeights). The weights
// must not be modified afterwards: when a layer's q/k/v (or gate/up)
// matrices lie back to back in memory, as LoadWeights and RandomWeights
// store them, the forward pass multiplies them as one matrix.
func NewModel(id string, cfg *Config, w *Weights, tok *tokenizer.Tokenizer, tmpl *chattmpl.Template) *Model {
	repackWeights(w, cfg, false)
	net, err := NewNet[float32](cfg, w)
	if err != nil {
		panic(err)
	}
	m := &Model{ID: id, Config: cfg, Weights: w, Tokenizer: tok, Template: tmpl, net: net}
	m.Gen = DefaultGenerationConfig(cfg)
	if tmpl == nil {
		m.TemplateErr = fmt.Errorf("engine: model %s has no chat template", id)
	}
	return m
}

// Load reads a Hugging Face model folder: config.json, the safetensors
// weights, tokenizer.json, the chat template of tokenizer_config.json (a
// folder without one loads, with Template nil and TemplateErr set) and
// generation_config.json (optional). The ID is the folder's base name;
// Registry.Get sets it to the id under the models dir. A path to a .gguf
// file loads that file instead (LoadGGUF).
func Load(dir string) (*Model, error) {
	if basemodels.IsGGUF(dir) {
		return LoadGGUF(dir)
	}
	cfg, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	if err := checkArch(cfg); err != nil {
		return nil, err
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, fmt.Errorf("engine: %s: tokenizer: %w", dir, err)
	}
	w, err := LoadWeights(dir, cfg)
	if err != nil {
		return nil, err
	}
	tmpl, terr := chattmpl.Load(dir)
	m := NewModel(filepath.Base(dir), cfg, w, tok, tmpl)
	m.Dir = dir
	if tmpl == nil {
		if terr == nil {
			terr = fmt.Errorf("engine: %s has no chat template", dir)
		}
		m.TemplateErr = terr
	}
	gen, err := ReadGenerationConfig(dir, cfg)
	if err != nil {
		return nil, err
	}
	m.Gen = gen
	return m, nil
}

// Net is the model definition over the model's weights in float32, shared
// by serving and training.
func (m *Model) Net() *Net[float32] { return m.net }

// EOS returns the end-of-sequence ids the model's files declare:
// config.json's eos ids merged with generation_config.json's (a GGUF file's
// eos and eot keys). Which tokens end a choice is infer's rule
// (infer.Rules: these and the chat template's end-of-turn token).
func (m *Model) EOS() []int { return m.Gen.EOSTokenIDs }

// MaxContext is the longest sequence the model accepts
// (max_position_embeddings).
func (m *Model) MaxContext() int { return m.Config.MaxPositionEmbeddings }

// GenerationConfig holds the generation defaults of a model folder
// (generation_config.json), used where a request leaves a setting out.
type GenerationConfig struct {
	EOSTokenIDs []int   // config.json's eos ids, then generation_config.json's
	BOSTokenID  int     // -1 when absent
	Temperature float64 // default 1
	TopP        float64 // default 1 (no nucleus truncation)
	TopK        int     // default 0 (no top-k truncation)
	MinP        float64 // default 0
	DoSample    bool    // as declared (informational; Temperature 0 means greedy)
}

// DefaultGenerationConfig is the configuration of a folder without
// generation_config.json: temperature 1, top_p 1, no top_k, EOS from cfg.
func DefaultGenerationConfig(cfg *Config) GenerationConfig {
	return GenerationConfig{
		EOSTokenIDs: append([]int(nil), cfg.EOSTokenIDs...),
		BOSTokenID:  cfg.BOSTokenID,
		Temperature: 1, TopP: 1, DoSample: true,
	}
}

// ReadGenerationConfig reads dir/generation_config.json (absent: defaults).
func ReadGenerationConfig(dir string, cfg *Config) (GenerationConfig, error) {
	g := DefaultGenerationConfig(cfg)
	path := filepath.Join(dir, "generation_config.json")
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return g, nil
	}
	if err != nil {
		return g, fmt.Errorf("engine: %w", err)
	}
	var raw struct {
		EOS         json.RawMessage `json:"eos_token_id"`
		BOS         *int            `json:"bos_token_id"`
		Temperature *float64        `json:"temperature"`
		TopP        *float64        `json:"top_p"`
		TopK        *int            `json:"top_k"`
		MinP        *float64        `json:"min_p"`
		DoSample    *bool           `json:"do_sample"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return g, fmt.Errorf("engine: %s: %w", path, err)
	}
	if len(raw.EOS) > 0 && string(raw.EOS) != "null" {
		var ids []int
		var one int
		if err := json.Unmarshal(raw.EOS, &one); err == nil {
			ids = []int{one}
		} else if err := json.Unmarshal(raw.EOS, &ids); err != nil {
			return g, fmt.Errorf("engine: %s: eos_token_id: want an integer or a list of integers", path)
		}
		for _, id := range ids {
			if !containsInt(g.EOSTokenIDs, id) {
				g.EOSTokenIDs = append(g.EOSTokenIDs, id)
			}
		}
	}
	if raw.BOS != nil {
		g.BOSTokenID = *raw.BOS
	}
	if raw.Temperature != nil {
		g.Temperature = *raw.Temperature
	}
	if raw.TopP != nil {
		g.TopP = *raw.TopP
	}
	if raw.TopK != nil {
		g.TopK = *raw.TopK
	}
	if raw.MinP != nil {
		g.MinP = *raw.MinP
	}
	if raw.DoSample != nil {
		g.DoSample = *raw.DoSample
	}
	return g, nil
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
