package engine

import (
	"flywheel/internal/engine/params"
	"flywheel/internal/par"
)

// RandomWeights makes deterministic random weights of shape cfg (for tests
// and benchmarks): each parameter of cfg.Params() filled by params.Fill
// with its initialisation (matrices and biases uniform with standard
// deviation 0.02, the HF initializer range; norm weights 1 ± 0.1), q/k/v
// and gate/up in one buffer per layer, all matrices in one arena, as
// LoadWeights makes them. The same seed gives the same weights. Tied
// configs share Embed and LMHead.
func RandomWeights(cfg *Config, seed uint64) *Weights {
	w := &Weights{Layers: make([]Layer, cfg.NumLayers)}
	ps := cfg.Params()
	into := make([][]float32, len(ps)) // the part of a fused buffer a parameter fills
	size := 0
	for _, p := range ps {
		if _, mat, _ := w.slot(p); mat != nil {
			size += arenaBytes(4 * p.Len())
		}
	}
	a := newArena(size) // fused parts lie back to back: a group takes no more
	for _, g := range w.fuseGroups(ps) {
		lens, n := make([]int, len(g.parts)), 0
		for k, i := range g.parts {
			lens[k] = ps[i].Len()
			n += lens[k]
		}
		*g.dst = a.mat(Mat{}, n)
		for k, part := range g.dst.parts(lens...) {
			into[g.parts[k]] = part.F32
		}
	}
	for i, p := range ps {
		if _, mat, _ := w.slot(p); mat != nil && into[i] == nil {
			into[i] = a.mat(Mat{}, p.Len()).F32
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
