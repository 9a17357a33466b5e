package rl

import "math"

// Token is one trainable token of a batch as the loss sees it.
type Token struct {
	New float64 // current logprob (the differentiated variable)
	Old float64 // recorded logprob; NaN = missing (old = stop-grad(new))
	A   float64 // advantage (already balanced and normalised over the batch)
	W   float64 // weight (already normalised over the batch)
	Seq int     // sequence index within the batch, for sequence-level IS
}

// Stats are the per-batch figures a loss reports.
type Stats struct {
	Loss       float64 // the batch's total loss
	NumClipped int     // tokens whose ρ fell outside the clip range
	N          int     // tokens
}

// Loss is the per-token loss of rl.md summed over a batch of trainable
// tokens (m_t = 1 for each):
//
//	total = Σ_t L_t · w_t · m_t / (Σ_t m_t + 1e-6)
//
// with ρ by c.ISLevel, capped by c.MaxNegISWeight, masked by
// c.MaskProbRatio, A_t shifted by −τ·sg(Δ_t), and L_t the PPO or (default)
// CISPO policy loss. It returns the total and ∂total/∂new_t for every
// token, the gradient the trainer back-propagates.
func Loss(c Config, toks []Token) (Stats, []float64) {
	n := len(toks)
	grad := make([]float64, n)
	st := Stats{N: n}
	if n == 0 {
		return st, grad
	}
	denom := float64(n) + 1e-6

	// Δ_t and the per-sequence mean of Δ over trainable tokens.
	delta := make([]float64, n)
	seqSum, seqCnt := map[int]float64{}, map[int]int{}
	for i, t := range toks {
		if !math.IsNaN(t.Old) {
			delta[i] = t.New - t.Old
		}
		seqSum[t.Seq] += delta[i]
		seqCnt[t.Seq]++
	}
	lo, hi := 1-c.Epsilon, 1+c.EpsilonHigh
	clip := func(r float64) float64 { return math.Min(math.Max(r, lo), hi) }

	// dρ/dΔ_t (own token) and dρ/dΔ̄ (sequence mean) per token.
	dOwn, dMean := make([]float64, n), make([]float64, n)
	for i, t := range toks {
		rt := math.Exp(delta[i])
		rs := math.Exp(seqSum[t.Seq] / float64(seqCnt[t.Seq]))
		var rho float64
		switch c.ISLevel {
		case ISSequence:
			rho, dMean[i] = rs, rs
		case ISAverage:
			rho, dOwn[i], dMean[i] = (rt+rs)/2, rt/2, rs/2
		case ISGeometricAverage:
			rho = math.Sqrt(rt * rs)
			dOwn[i], dMean[i] = rho/2, rho/2
		default:
			rho, dOwn[i] = rt, rt
		}
		if rho > c.MaxNegISWeight {
			rho, dOwn[i], dMean[i] = c.MaxNegISWeight, 0, 0
		}
		if c.MaskProbRatio && !(rho > lo && rho < hi) {
			rho, dOwn[i], dMean[i] = 0, 0, 0
		}
		if clip(rho) != rho {
			st.NumClipped++
		}
		A := t.A - c.Tau*delta[i]
		var L, dLdRho, dLdNew float64
		if c.PPO {
			unc, cl := rho*A, clip(rho)*A
			L = -math.Min(unc, cl)
			if unc <= cl {
				dLdRho = -A
			}
		} else {
			L = -clip(rho) * A * t.New
			dLdNew = -clip(rho) * A
		}
		k := t.W / denom
		st.Loss += L * k
		grad[i] += dLdNew * k
		// chain through ρ: Δ_t depends on new_t, Δ̄ on every token of the sequence
		dOwn[i] *= dLdRho * k
		dMean[i] *= dLdRho * k
	}
	meanGrad := map[int]float64{}
	for i, t := range toks {
		grad[i] += dOwn[i]
		meanGrad[t.Seq] += dMean[i]
	}
	for i, t := range toks {
		grad[i] += meanGrad[t.Seq] / float64(seqCnt[t.Seq])
	}
	return st, grad
}
