package rl

import (
	"math"
	"testing"
)

// Group advantages of rl.md: A_i = (r_i − μ) / (σ + 1e-6), σ the population
// standard deviation; unscaled A_i = r_i − μ; equal rewards give zeros.
func TestGroupAdvantages(t *testing.T) {
	adv, mean, std := GroupAdvantages([]float64{1, 0, 0, 1}, true)
	near(t, "mean", mean, 0.5)
	near(t, "std", std, 0.5)
	for i, want := range []float64{1, -1, -1, 1} {
		near(t, "A", adv[i], want*0.5/(0.5+1e-6))
	}
	adv, _, std = GroupAdvantages([]float64{3, 1, 2}, false)
	near(t, "std", std, math.Sqrt(2.0/3))
	for i, want := range []float64{1, -1, 0} {
		near(t, "unscaled A", adv[i], want)
	}
	adv, _, _ = GroupAdvantages([]float64{0.5, 0.5}, true)
	if adv[0] != 0 || adv[1] != 0 {
		t.Fatalf("equal rewards: %v", adv)
	}
	near(t, "weight", TrajectoryWeight(4), 1/(4+1e-6))
}

// One group through the whole of rl.md, against values worked out by hand:
// rewards [1, 0] give A = [+1, −1] (up to 1e-6); trajectory 0 has two
// trainable tokens (w = 1/2 each), trajectory 1 one (w = 1). Over the batch
// w/mean(w) = [0.75, 0.75, 1.5] and mean(|A|·w) = 1, so A stays [1, 1, −1].
// With new = [−0.5, −1, −2] and old = [−0.7, −1, −0.2], ρ = [e^0.2, 1, e^−1.8].
func TestLossByHand(t *testing.T) {
	batch := func() []Token {
		adv, _, _ := GroupAdvantages([]float64{1, 0}, true)
		w0, w1 := TrajectoryWeight(2), TrajectoryWeight(1)
		toks := []Token{
			{New: -0.5, Old: -0.7, A: adv[0], W: w0, Seq: 0},
			{New: -1, Old: -1, A: adv[0], W: w0, Seq: 0},
			{New: -2, Old: -0.2, A: adv[1], W: w1, Seq: 1},
		}
		Normalize(toks, 0)
		return toks
	}
	toks := batch()
	for i, w := range []float64{0.75, 0.75, 1.5} {
		if math.Abs(toks[i].W-w) > 1e-6 || math.Abs(math.Abs(toks[i].A)-1) > 1e-6 {
			t.Fatalf("token %d: w %v A %v", i, toks[i].W, toks[i].A)
		}
	}
	const den = 3 + 1e-6
	// Default (CISPO, ε = 1, ε_high = 4: nothing clips):
	// L = −ρ·A·new·w = [0.375·e^0.2, 0.75, −3·e^−1.8].
	c, _ := resolveConfig(nil, realModelLearningRate)
	st, g := Loss(c, toks)
	want := (0.375*math.Exp(0.2) + 0.75 - 3*math.Exp(-1.8)) / 3 // 0.2373765...
	if math.Abs(st.Loss-want) > 1e-6 || math.Abs(st.Loss-0.2373765) > 1e-6 {
		t.Fatalf("CISPO loss %.9f, want %.9f", st.Loss, want)
	}
	for i, wg := range []float64{-0.75 * math.Exp(0.2), -0.75, 1.5 * math.Exp(-1.8)} { // −sg(ρ)·A·w
		if math.Abs(g[i]-wg/den) > 1e-6 {
			t.Fatalf("CISPO grad[%d] %v, want %v", i, g[i], wg/den)
		}
	}
	if st.NumClipped != 0 || st.N != 3 {
		t.Fatalf("stats %+v", st)
	}
	// PPO (ε = ε_high = 0.2): −min(ρA, clip(ρ)A)·w = [−1.2·0.75, −0.75, +0.8·1.5]:
	// token 0 clips at 1.2 and token 2 at 0.8 (both count as clipped).
	c, _ = resolveConfig([]byte(`{"ppo": true}`), realModelLearningRate)
	st, _ = Loss(c, batch())
	if math.Abs(st.Loss-(-0.9-0.75+1.2)/3) > 1e-6 || st.NumClipped != 2 {
		t.Fatalf("PPO loss %.9f (want -0.15), clipped %d (want 2)", st.Loss, st.NumClipped)
	}
}
