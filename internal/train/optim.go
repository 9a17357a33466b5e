package train

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"flywheel/internal/engine"
	"flywheel/internal/par"
	"flywheel/internal/safetensors"
)

// OptimizerFile is the AdamW state saved beside the PEFT adapter of every
// checkpoint: for each adapter tensor <name>, "<name>.exp_avg" and
// "<name>.exp_avg_sq", and the step count in the metadata ("step").
const OptimizerFile = "optimizer.safetensors"

// AdamW is the optimizer: betas 0.9/0.999, eps 1e-8, decoupled weight
// decay (0 by default), bias-corrected as torch.optim.AdamW.
type AdamW struct {
	Beta1, Beta2, Eps, WeightDecay float64
	Step                           int
	M, V                           map[string][]float32 // by adapter tensor name
}

// NewAdamW returns a fresh optimizer with the default hyper-parameters.
func NewAdamW() *AdamW {
	return &AdamW{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, M: map[string][]float32{}, V: map[string][]float32{}}
}

// param is one trainable tensor with its gradient.
type param struct {
	Name string
	W, G []float32
}

// adapterParams lists the trained factors (PEFT names) with their
// gradients, in a fixed order (layer, then AllModules).
func adapterParams(m *model) []param {
	var ps []param
	m.lora.Each(func(l int, mod string, f *engine.Factors[float32]) {
		ps = append(ps,
			param{engine.TensorName(l, mod, "lora_A"), f.A, f.DA},
			param{engine.TensorName(l, mod, "lora_B"), f.B, f.DB})
	})
	return ps
}

// clipGradNorm scales the gradients to global norm ≤ maxNorm (as
// torch.nn.utils.clip_grad_norm_) and returns the norm before clipping.
func clipGradNorm(ps []param, maxNorm float64) float64 {
	norm := gradNorm(ps)
	if coef := maxNorm / (norm + 1e-6); coef < 1 {
		for _, p := range ps {
			for i := range p.G {
				p.G[i] *= float32(coef)
			}
		}
	}
	return norm
}

// gradNorm is the global L2 norm of the gradients.
func gradNorm(ps []param) float64 {
	var ss float64
	for _, p := range ps {
		for _, g := range p.G {
			ss += float64(g) * float64(g)
		}
	}
	return math.Sqrt(ss)
}

// update applies one AdamW step with learning rate lr.
func (o *AdamW) update(ps []param, lr float64) {
	o.Step++
	bc1 := 1 - math.Pow(o.Beta1, float64(o.Step))
	bc2 := 1 - math.Pow(o.Beta2, float64(o.Step))
	b1, b2 := float32(o.Beta1), float32(o.Beta2)
	stepSize := lr / bc1
	sqrtBC2 := math.Sqrt(bc2)
	for _, p := range ps {
		m, v := o.M[p.Name], o.V[p.Name]
		if len(m) != len(p.W) {
			m, v = make([]float32, len(p.W)), make([]float32, len(p.W))
			o.M[p.Name], o.V[p.Name] = m, v
		}
		decay := float32(1 - lr*o.WeightDecay)
		par.Range(len(p.W), 16, func(i0, i1 int) {
			for i := i0; i < i1; i++ {
				g := p.G[i]
				m[i] = b1*m[i] + (1-b1)*g
				v[i] = b2*v[i] + (1-b2)*g*g
				denom := math.Sqrt(float64(v[i]))/sqrtBC2 + o.Eps
				p.W[i] = p.W[i]*decay - float32(stepSize*float64(m[i])/denom)
			}
		})
	}
}

// Save writes the optimizer state to dir/optimizer.safetensors atomically.
func (o *AdamW) Save(dir string) error {
	var ts []safetensors.WriteTensor
	for name, m := range o.M {
		ts = append(ts, safetensors.WriteTensor{Name: name + ".exp_avg", Shape: []int{len(m)}, Data: m},
			safetensors.WriteTensor{Name: name + ".exp_avg_sq", Shape: []int{len(m)}, Data: o.V[name]})
	}
	meta := map[string]string{
		"step": strconv.Itoa(o.Step), "optimizer": "adamw",
		"beta1": strconv.FormatFloat(o.Beta1, 'g', -1, 64), "beta2": strconv.FormatFloat(o.Beta2, 'g', -1, 64),
		"eps": strconv.FormatFloat(o.Eps, 'g', -1, 64), "weight_decay": strconv.FormatFloat(o.WeightDecay, 'g', -1, 64),
	}
	return safetensors.WriteFile(filepath.Join(dir, OptimizerFile), ts, meta)
}

// LoadAdamW reads dir/optimizer.safetensors; a missing file gives a fresh
// optimizer (the step-0 checkpoint has none).
func LoadAdamW(dir string) (*AdamW, error) {
	o := NewAdamW()
	path := filepath.Join(dir, OptimizerFile)
	if _, err := os.Stat(path); os.IsNotExist(err) {
		return o, nil
	}
	f, err := safetensors.Open(path)
	if err != nil {
		return nil, fmt.Errorf("optimizer state: %w", err)
	}
	defer f.Close()
	meta := f.Metadata
	if s, ok := meta["step"]; ok {
		if o.Step, err = strconv.Atoi(s); err != nil {
			return nil, fmt.Errorf("optimizer state: bad step %q", s)
		}
	}
	for _, k := range []struct {
		key string
		dst *float64
	}{{"beta1", &o.Beta1}, {"beta2", &o.Beta2}, {"eps", &o.Eps}, {"weight_decay", &o.WeightDecay}} {
		if s, ok := meta[k.key]; ok {
			if v, err := strconv.ParseFloat(s, 64); err == nil {
				*k.dst = v
			}
		}
	}
	for _, name := range f.Names() {
		t := f.Tensor(name)
		v, err := t.Float32()
		if err != nil {
			return nil, fmt.Errorf("optimizer state: %w", err)
		}
		v = append([]float32(nil), v...)
		switch {
		case len(name) > 8 && name[len(name)-8:] == ".exp_avg":
			o.M[name[:len(name)-8]] = v
		case len(name) > 11 && name[len(name)-11:] == ".exp_avg_sq":
			o.V[name[:len(name)-11]] = v
		}
	}
	for name, m := range o.M {
		if len(o.V[name]) != len(m) {
			return nil, fmt.Errorf("optimizer state: %s has exp_avg but no matching exp_avg_sq", name)
		}
	}
	return o, nil
}
