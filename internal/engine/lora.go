package engine

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"flywheel/internal/atomicfile"
	"flywheel/internal/safetensors"
)

// LoRAConfig is the shape of a LoRA adapter: rank r, scaling alpha/r, and
// the projections it targets (PEFT names, see AllModules).
type LoRAConfig struct {
	Rank          int      `json:"r"`
	Alpha         float64  `json:"lora_alpha"`
	TargetModules []string `json:"target_modules"`
}

// DefaultLoRAConfig is r=16, alpha=32 on every projection.
func DefaultLoRAConfig() LoRAConfig {
	return LoRAConfig{Rank: 16, Alpha: 32, TargetModules: append([]string(nil), AllModules...)}
}

// Validate checks rank, alpha and module names.
func (lc LoRAConfig) Validate() error {
	if lc.Rank <= 0 || lc.Rank > 1024 {
		return fmt.Errorf("lora rank must be in 1..1024, got %d", lc.Rank)
	}
	if !(lc.Alpha > 0) || math.IsInf(lc.Alpha, 0) {
		return fmt.Errorf("lora alpha must be a positive number, got %v", lc.Alpha)
	}
	if len(lc.TargetModules) == 0 {
		return fmt.Errorf("lora target_modules must not be empty")
	}
	for _, m := range lc.TargetModules {
		ok := false
		for _, a := range AllModules {
			ok = ok || a == m
		}
		if !ok {
			return fmt.Errorf("lora target module %q is not one of %s", m, strings.Join(AllModules, ", "))
		}
	}
	return nil
}

// Scale is alpha / r, the factor applied to B·A.
func (lc LoRAConfig) Scale() float32 { return float32(lc.Alpha / float64(lc.Rank)) }

// Targets reports whether module is adapted.
func (lc LoRAConfig) Targets(module string) bool {
	for _, m := range lc.TargetModules {
		if m == module {
			return true
		}
	}
	return false
}

// LoRAPair is the low-rank update of one projection: ΔW = scale · B·A.
type LoRAPair struct {
	In, Out int
	A       []float32 // [r, In]
	B       []float32 // [Out, r]
}

// Adapter is a LoRA adapter for a whole model: per layer, the pairs of the
// targeted modules (a missing key means the module is not adapted).
type Adapter struct {
	Config LoRAConfig
	Layers []map[string]*LoRAPair

	lay adapterLayout // serving layout, built on first use
}

// NewAdapter makes the untrained adapter PEFT makes: A ~ Kaiming-uniform
// with a=√5 (bound 1/√in), B = 0, so the adapted model equals the base.
// The same seed gives the same adapter.
func NewAdapter(cfg *Config, lc LoRAConfig, seed uint64) (*Adapter, error) {
	if err := lc.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	a := &Adapter{Config: lc, Layers: make([]map[string]*LoRAPair, cfg.NumLayers)}
	for l := range a.Layers {
		a.Layers[l] = map[string]*LoRAPair{}
		for _, m := range AllModules {
			if !lc.Targets(m) {
				continue
			}
			out, in, _ := cfg.ModuleShape(m)
			p := &LoRAPair{In: in, Out: out, A: make([]float32, lc.Rank*in), B: make([]float32, out*lc.Rank)}
			bound := 1 / math.Sqrt(float64(in))
			for i := range p.A {
				p.A[i] = float32((rng.Float64()*2 - 1) * bound)
			}
			a.Layers[l][m] = p
		}
	}
	return a, nil
}

// Clone returns a deep copy.
func (a *Adapter) Clone() *Adapter {
	c := &Adapter{Config: a.Config, Layers: make([]map[string]*LoRAPair, len(a.Layers))}
	c.Config.TargetModules = append([]string(nil), a.Config.TargetModules...)
	for l, mods := range a.Layers {
		c.Layers[l] = map[string]*LoRAPair{}
		for m, p := range mods {
			c.Layers[l][m] = &LoRAPair{In: p.In, Out: p.Out, A: append([]float32(nil), p.A...), B: append([]float32(nil), p.B...)}
		}
	}
	return c
}

// PEFT file names.
const (
	AdapterConfigFile  = "adapter_config.json"
	AdapterWeightsFile = "adapter_model.safetensors"
)

type peftConfig struct {
	BaseModel     string          `json:"base_model_name_or_path"`
	PeftType      string          `json:"peft_type"`
	TaskType      string          `json:"task_type"`
	R             int             `json:"r"`
	LoraAlpha     float64         `json:"lora_alpha"`
	LoraDropout   float64         `json:"lora_dropout"`
	TargetModules json.RawMessage `json:"target_modules"`
	Bias          string          `json:"bias"`
	FanInFanOut   bool            `json:"fan_in_fan_out"`
	InferenceMode bool            `json:"inference_mode"`
	UseRSLoRA     bool            `json:"use_rslora"`
	UseDoRA       bool            `json:"use_dora,omitempty"`
	RankPattern   map[string]any  `json:"rank_pattern,omitempty"`
	AlphaPattern  map[string]any  `json:"alpha_pattern,omitempty"`
}

// TensorName is the PEFT tensor name of a pair's A or B ("lora_A"/"lora_B").
func TensorName(layer int, module, ab string) string {
	return "base_model.model." + ModulePrefix(layer, module) + "." + ab + ".weight"
}

// Save writes the adapter in PEFT layout into dir (created if needed):
// adapter_config.json and adapter_model.safetensors, each written to a
// temp file and renamed.
func (a *Adapter) Save(dir string, baseModel string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("engine: save adapter: %w", err)
	}
	var ts []safetensors.WriteTensor
	for l, mods := range a.Layers {
		for m, p := range mods {
			ts = append(ts,
				safetensors.WriteTensor{Name: TensorName(l, m, "lora_A"), Shape: []int{a.Config.Rank, p.In}, Data: p.A},
				safetensors.WriteTensor{Name: TensorName(l, m, "lora_B"), Shape: []int{p.Out, a.Config.Rank}, Data: p.B})
		}
	}
	if err := safetensors.WriteFile(filepath.Join(dir, AdapterWeightsFile), ts, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("engine: save adapter: %w", err)
	}
	tm, err := json.Marshal(a.Config.TargetModules)
	if err != nil {
		return fmt.Errorf("engine: save adapter: %w", err)
	}
	pc := peftConfig{BaseModel: baseModel, PeftType: "LORA", TaskType: "CAUSAL_LM", R: a.Config.Rank,
		LoraAlpha: a.Config.Alpha, TargetModules: tm, Bias: "none", InferenceMode: true}
	data, err := json.MarshalIndent(pc, "", "  ")
	if err != nil {
		return fmt.Errorf("engine: save adapter: %w", err)
	}
	return atomicfile.WriteFile(filepath.Join(dir, AdapterConfigFile), append(data, '\n'), 0o644)
}

// LoadAdapter reads a PEFT adapter folder for a model of shape cfg. Tensors
// are copied out of the file, so the adapter outlives it.
func LoadAdapter(dir string, cfg *Config) (*Adapter, error) {
	data, err := os.ReadFile(filepath.Join(dir, AdapterConfigFile))
	if err != nil {
		return nil, fmt.Errorf("engine: load adapter: %w", err)
	}
	var pc peftConfig
	if err := json.Unmarshal(data, &pc); err != nil {
		return nil, fmt.Errorf("engine: load adapter: %s: %w", AdapterConfigFile, err)
	}
	if pc.PeftType != "" && pc.PeftType != "LORA" {
		return nil, fmt.Errorf("engine: load adapter: peft_type %q is not LORA", pc.PeftType)
	}
	if pc.UseRSLoRA {
		return nil, fmt.Errorf("engine: load adapter: use_rslora is not supported")
	}
	if pc.UseDoRA {
		return nil, fmt.Errorf("engine: load adapter: use_dora is not supported")
	}
	if len(pc.RankPattern) > 0 || len(pc.AlphaPattern) > 0 {
		return nil, fmt.Errorf("engine: load adapter: rank_pattern/alpha_pattern are not supported")
	}
	if pc.Bias != "" && pc.Bias != "none" {
		return nil, fmt.Errorf("engine: load adapter: bias %q is not supported (only \"none\")", pc.Bias)
	}
	var targets []string
	if err := json.Unmarshal(pc.TargetModules, &targets); err != nil {
		var one string
		if json.Unmarshal(pc.TargetModules, &one) != nil {
			return nil, fmt.Errorf("engine: load adapter: target_modules: want a list of module names")
		}
		if one != "all-linear" {
			return nil, fmt.Errorf("engine: load adapter: target_modules %q: only a list of names or \"all-linear\" is supported", one)
		}
		targets = append([]string(nil), AllModules...)
	}
	lc := LoRAConfig{Rank: pc.R, Alpha: pc.LoraAlpha, TargetModules: targets}
	if err := lc.Validate(); err != nil {
		return nil, fmt.Errorf("engine: load adapter: %w", err)
	}
	f, err := safetensors.Open(filepath.Join(dir, AdapterWeightsFile))
	if err != nil {
		return nil, fmt.Errorf("engine: load adapter: %w", err)
	}
	defer f.Close()
	a := &Adapter{Config: lc, Layers: make([]map[string]*LoRAPair, cfg.NumLayers)}
	for l := range a.Layers {
		a.Layers[l] = map[string]*LoRAPair{}
		for _, m := range lc.TargetModules {
			out, in, _ := cfg.ModuleShape(m)
			p := &LoRAPair{In: in, Out: out}
			for _, ab := range []string{"lora_A", "lora_B"} {
				name := TensorName(l, m, ab)
				t := f.Tensor(name)
				if t == nil {
					return nil, fmt.Errorf("engine: load adapter: missing tensor %s", name)
				}
				want := []int{lc.Rank, in}
				if ab == "lora_B" {
					want = []int{out, lc.Rank}
				}
				if len(t.Shape) != 2 || t.Shape[0] != want[0] || t.Shape[1] != want[1] {
					return nil, fmt.Errorf("engine: load adapter: tensor %s has shape %v, want %v", name, t.Shape, want)
				}
				v, err := t.Float32()
				if err != nil {
					return nil, fmt.Errorf("engine: load adapter: %w", err)
				}
				v = append([]float32(nil), v...)
				if ab == "lora_A" {
					p.A = v
				} else {
					p.B = v
				}
			}
			a.Layers[l][m] = p
		}
	}
	return a, nil
}
