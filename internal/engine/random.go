package engine

import (
	"math"

	"flywheel/internal/par"
)

// RandomWeights makes deterministic random weights of shape cfg (for tests
// and benchmarks): linear weights uniform with standard deviation 0.02 (the
// HF initializer range), norm weights 1 ± 0.1, biases ± 0.02. The same
// seed gives the same weights. Tied configs share Embed and LMHead.
func RandomWeights(cfg *Config, seed uint64) *Weights {
	H, I, V := cfg.HiddenSize, cfg.IntermediateSize, cfg.VocabSize
	Q, KV, D := cfg.QDim(), cfg.KVDim(), cfg.HeadDim
	w := &Weights{Layers: make([]Layer, cfg.NumLayers)}
	type job struct {
		dst        *[]float32
		mat        *Mat
		n          int
		center, sd float64
		into       []float32
	}
	var jobs []job
	mat := func(dst *Mat, n int) { jobs = append(jobs, job{nil, dst, n, 0, 0.02, nil}) }
	lin := func(dst *[]float32, n int) { jobs = append(jobs, job{dst, nil, n, 0, 0.02, nil}) }
	norm := func(dst *[]float32, n int) { jobs = append(jobs, job{dst, nil, n, 1, 0.1, nil}) }
	matInto := func(dst *Mat, into []float32) { jobs = append(jobs, job{nil, dst, len(into), 0, 0.02, into}) }
	mat(&w.Embed, V*H)
	for l := range w.Layers {
		L := &w.Layers[l]
		norm(&L.AttnNorm, H)
		L.QKV = F32Mat(make([]float32, (Q+2*KV)*H)) // fused layout, as LoadWeights makes
		p := L.QKV.parts(Q*H, KV*H, KV*H)
		matInto(&L.Wq, p[0].F32)
		matInto(&L.Wk, p[1].F32)
		matInto(&L.Wv, p[2].F32)
		mat(&L.Wo, H*Q)
		if cfg.AttentionBias {
			lin(&L.Bq, Q)
			lin(&L.Bk, KV)
			lin(&L.Bv, KV)
		}
		if cfg.OutputBias {
			lin(&L.Bo, H)
		}
		if cfg.QKNorm {
			norm(&L.QNorm, D)
			norm(&L.KNorm, D)
		}
		norm(&L.MLPNorm, H)
		L.GateUp = F32Mat(make([]float32, 2*I*H))
		p = L.GateUp.parts(I*H, I*H)
		matInto(&L.Wgate, p[0].F32)
		matInto(&L.Wup, p[1].F32)
		mat(&L.Wdown, H*I)
	}
	norm(&w.Norm, H)
	if !cfg.TieWordEmbeddings {
		mat(&w.LMHead, V*H)
	}
	par.Tasks(len(jobs), false, func(_, i int) {
		j := jobs[i]
		r := splitmix{seed ^ uint64(i+1)*0x9e3779b97f4a7c15}
		v := j.into
		if v == nil {
			v = make([]float32, j.n)
		}
		a := j.sd * math.Sqrt(3) // uniform [-a, a] has standard deviation sd
		for k := range v {
			v[k] = float32(j.center + a*(2*r.float64()-1))
		}
		if j.mat != nil {
			*j.mat = F32Mat(v)
		} else {
			*j.dst = v
		}
	})
	if cfg.TieWordEmbeddings {
		w.LMHead = w.Embed
	}
	return w
}

// splitmix is the SplitMix64 generator: tiny, fast and fully specified, so
// random weights are the same on every platform and Go version.
type splitmix struct{ s uint64 }

func (r *splitmix) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (r *splitmix) float64() float64 { return float64(r.next()>>11) / (1 << 53) }
