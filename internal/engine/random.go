package engine

import (
	"flywheel/internal/engine/params"
	"flywheel/internal/par"
)

// RandomWeights makes deterministic random weights of shape cfg (for tests
// and benchmarks): each parameter of cfg.Params() filled by params.Fill
// with its initialisation (matrices and biases uniform with standard
// deviation 0.02, the HF initializer range; norm weights 1 ± 0.1), q/k/v
// and gate/up in one buffer per layer as LoadWeights makes them. The same
// seed gives the same weights. Tied configs share Embed and LMHead.
func RandomWeights(cfg *Config, seed uint64) *Weights {
	w := &Weights{Layers: make([]Layer, cfg.NumLayers)}
	ps := cfg.Params()
	into := make([][]float32, len(ps)) // the part of a fused buffer a parameter fills
	for _, g := range w.fuseGroups(ps) {
		lens, n := make([]int, len(g.parts)), 0
		for k, i := range g.parts {
			lens[k] = ps[i].Len()
			n += lens[k]
		}
		*g.dst = F32Mat(make([]float32, n))
		for k, part := range g.dst.parts(lens...) {
			into[g.parts[k]] = part.F32
		}
	}
	par.Tasks(len(ps), false, func(_, i int) {
		p := ps[i]
		v := into[i]
		if v == nil {
			v = make([]float32, p.Len())
		}
		params.Fill(v, p.Init, seed, i)
		vec, mat, _ := w.slot(p)
		if mat != nil {
			*mat = F32Mat(v)
		} else {
			*vec = v
		}
	})
	if cfg.TieWordEmbeddings {
		w.LMHead = w.Embed
	}
	return w
}
