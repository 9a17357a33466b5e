package runs

import "math"

// The four named losses of the client's TokenMatrix contract
// (art/training/token_matrix_loss.py, execute_token_matrix_loss), over the
// batch's rows, where lp is the learner's logprob of each row's target, w
// its loss weight, a its advantage and bl its behavior logprob:
//
//	cross_entropy:        L = −Σ lp·w
//	importance_sampling:  L = −Σ exp(lp−bl)·a·w
//	cispo:                L = −Σ sg(clip(exp(lp−bl), low, high))·lp·a·w   (sg: no gradient)
//	dpo:                  L = −Σ_pairs log σ(β·(r_chosen − r_rejected)),  r_m = Σ_{rows of m} (lp−bl)·w
//
// L is a sum over rows, as the client's reported_loss; its gradient is what
// forward_backward accumulates, so gradients of several calls add up to the
// gradient of their concatenated batch. The value reported on the wire is
// L divided by the accepted (loss-bearing) positions ("mean_active_token").

// lossAndGrad returns L and ∂L/∂lp per row.
func lossAndGrad(ls lossSpec, tb *tokenBatch, lp []float64) (float64, []float64) {
	g := make([]float64, len(lp))
	var L float64
	switch ls.Name {
	case "cross_entropy":
		for i := range lp {
			L -= lp[i] * tb.w[i]
			g[i] = -tb.w[i]
		}
	case "importance_sampling":
		for i := range lp {
			r := math.Exp(lp[i] - tb.bl[i])
			L -= r * tb.a[i] * tb.w[i]
			g[i] = -r * tb.a[i] * tb.w[i]
		}
	case "cispo":
		for i := range lp {
			c := min(max(math.Exp(lp[i]-tb.bl[i]), ls.ClipLow), ls.ClipHigh)
			L -= c * lp[i] * tb.a[i] * tb.w[i]
			g[i] = -c * tb.a[i] * tb.w[i]
		}
	case "dpo":
		r := make([]float64, len(tb.ids))
		for i := range lp {
			r[tb.matrix[i]] += (lp[i] - tb.bl[i]) * tb.w[i]
		}
		index := make(map[string]int, len(tb.ids))
		for i, id := range tb.ids {
			index[id] = i
		}
		dr := make([]float64, len(tb.ids))
		for _, p := range ls.Pairs {
			c, j := index[p.ChosenMatrixID], index[p.RejectedMatrixID]
			x := ls.Beta * (r[c] - r[j])
			L -= logSigmoid(x)
			s := sigmoid(-x) // d(−log σ(x))/dx = −σ(−x)
			dr[c] -= ls.Beta * s
			dr[j] += ls.Beta * s
		}
		for i := range lp {
			g[i] = dr[tb.matrix[i]] * tb.w[i]
		}
	}
	return L, g
}

func sigmoid(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}

// logSigmoid is log σ(x), stable for large |x|.
func logSigmoid(x float64) float64 {
	if x >= 0 {
		return -math.Log1p(math.Exp(-x))
	}
	return x - math.Log1p(math.Exp(x))
}
