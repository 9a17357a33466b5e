package engine

import (
	"math"
)

// refForward is an independent float64 re-implementation of the decoder
// (written from the Hugging Face modelling code, not sharing any engine
// code): it returns the logits of every position, [T][V]. A non-nil
// adapter is merged into the weights (W + scale·B·A) in float64.
func refForward(cfg *Config, w *Weights, a *Adapter, tokens []int) [][]float64 {
	H, V, D := cfg.HiddenSize, cfg.VocabSize, cfg.HeadDim
	nH, nKV := cfg.NumHeads, cfg.NumKVHeads
	T := len(tokens)
	eps := cfg.RMSNormEps

	f64 := func(x []float32) []float64 {
		y := make([]float64, len(x))
		for i, v := range x {
			y[i] = float64(v)
		}
		return y
	}
	merged := func(l int, mod string, Wm Mat) [][]float64 {
		W := Wm.Float32() // exact for BF16/F16
		out, in, _ := cfg.ModuleShape(mod)
		m := make([][]float64, out)
		for o := range m {
			m[o] = f64(W[o*in : (o+1)*in])
		}
		if a != nil {
			if p := a.Layers[l][mod]; p != nil {
				r := a.Config.Rank
				s := a.Config.Alpha / float64(r)
				for o := 0; o < out; o++ {
					for i := 0; i < in; i++ {
						var d float64
						for k := 0; k < r; k++ {
							d += float64(p.B[o*r+k]) * float64(p.A[k*in+i])
						}
						m[o][i] += s * d
					}
				}
			}
		}
		return m
	}
	linear := func(x []float64, W [][]float64, b []float32) []float64 {
		y := make([]float64, len(W))
		for o, row := range W {
			var s float64
			for i, v := range row {
				s += v * x[i]
			}
			if b != nil {
				s += float64(b[o])
			}
			y[o] = s
		}
		return y
	}
	rms := func(x []float64, g []float32) []float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		r := 1 / math.Sqrt(ss/float64(len(x))+eps)
		y := make([]float64, len(x))
		for i, v := range x {
			y[i] = v * r * float64(g[i])
		}
		return y
	}
	// RoPE frequencies, HF _compute_default_rope_parameters / llama3.
	invFreq := make([]float64, D/2)
	for i := range invFreq {
		invFreq[i] = math.Pow(cfg.RopeTheta, -float64(2*i)/float64(D))
	}
	if rs := cfg.RopeScaling; rs != nil && rs.RopeType == "llama3" {
		lowW := float64(rs.OriginalMaxPositionEmbeddings) / rs.LowFreqFactor
		highW := float64(rs.OriginalMaxPositionEmbeddings) / rs.HighFreqFactor
		for i, f := range invFreq {
			wl := 2 * math.Pi / f
			if wl > lowW {
				invFreq[i] = f / rs.Factor
			} else if wl >= highW {
				sm := (float64(rs.OriginalMaxPositionEmbeddings)/wl - rs.LowFreqFactor) / (rs.HighFreqFactor - rs.LowFreqFactor)
				invFreq[i] = (1-sm)*f/rs.Factor + sm*f
			}
		}
	} else if rs != nil && rs.RopeType == "linear" {
		for i := range invFreq {
			invFreq[i] /= rs.Factor
		}
	}
	rope := func(x []float64, pos int) { // one head, rotate_half
		half := D / 2
		rot := make([]float64, D)
		for i := 0; i < half; i++ {
			rot[i] = -x[i+half]
			rot[i+half] = x[i]
		}
		for i := 0; i < D; i++ {
			ang := float64(pos) * invFreq[i%half]
			x[i] = x[i]*math.Cos(ang) + rot[i]*math.Sin(ang)
		}
	}

	hs := make([][]float64, T)
	embed, head := w.Embed.Float32(), w.LMHead.Float32()
	for t, id := range tokens {
		hs[t] = f64(embed[id*H : (id+1)*H])
	}
	for l := range w.Layers {
		L := &w.Layers[l]
		Wq, Wk, Wv, Wo := merged(l, ModQ, L.Wq), merged(l, ModK, L.Wk), merged(l, ModV, L.Wv), merged(l, ModO, L.Wo)
		Wg, Wu, Wd := merged(l, ModGate, L.Wgate), merged(l, ModUp, L.Wup), merged(l, ModDown, L.Wdown)
		q := make([][]float64, T)
		k := make([][]float64, T)
		v := make([][]float64, T)
		for t := 0; t < T; t++ {
			x := rms(hs[t], L.AttnNorm)
			q[t], k[t], v[t] = linear(x, Wq, L.Bq), linear(x, Wk, L.Bk), linear(x, Wv, L.Bv)
			for h := 0; h < nH; h++ {
				head := q[t][h*D : (h+1)*D]
				if cfg.QKNorm {
					copy(head, rms(head, L.QNorm))
				}
				rope(head, t)
			}
			for h := 0; h < nKV; h++ {
				head := k[t][h*D : (h+1)*D]
				if cfg.QKNorm {
					copy(head, rms(head, L.KNorm))
				}
				rope(head, t)
			}
		}
		for t := 0; t < T; t++ {
			att := make([]float64, nH*D)
			for h := 0; h < nH; h++ {
				kh := h / (nH / nKV)
				qh := q[t][h*D : (h+1)*D]
				sc := make([]float64, t+1)
				mx := math.Inf(-1)
				for j := 0; j <= t; j++ {
					if cfg.SlidingWindow > 0 && t-j >= cfg.SlidingWindow {
						sc[j] = math.Inf(-1)
						continue
					}
					var s float64
					for i := 0; i < D; i++ {
						s += qh[i] * k[j][kh*D+i]
					}
					sc[j] = s / math.Sqrt(float64(D))
					mx = math.Max(mx, sc[j])
				}
				var sum float64
				for j := range sc {
					sc[j] = math.Exp(sc[j] - mx)
					sum += sc[j]
				}
				for j := range sc {
					for i := 0; i < D; i++ {
						att[h*D+i] += sc[j] / sum * v[j][kh*D+i]
					}
				}
			}
			o := linear(att, Wo, L.Bo)
			for i := range hs[t] {
				hs[t][i] += o[i]
			}
		}
		for t := 0; t < T; t++ {
			x := rms(hs[t], L.MLPNorm)
			g, u := linear(x, Wg, nil), linear(x, Wu, nil)
			for i := range g {
				g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
			}
			d := linear(g, Wd, nil)
			for i := range hs[t] {
				hs[t][i] += d[i]
			}
		}
	}
	out := make([][]float64, T)
	for t := 0; t < T; t++ {
		x := rms(hs[t], w.Norm)
		out[t] = make([]float64, V)
		for o := 0; o < V; o++ {
			var s float64
			for i := 0; i < H; i++ {
				s += float64(head[o*H+i]) * x[i]
			}
			out[t][o] = s
		}
	}
	return out
}
