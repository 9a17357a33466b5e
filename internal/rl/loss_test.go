package rl

import (
	"math"
	"testing"
)

func ptr[T any](v T) *T { return &v }

func resolve(t *testing.T, e ExperimentalConfig) Config {
	t.Helper()
	c, err := e.Resolve(1e-5)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
		t.Fatalf("%s = %.12g, want %.12g", what, got, want)
	}
}

const den = 1 + 1e-6 // Σm + 1e-6 for one token

// Default (CISPO-style, ppo=false): L = −clip(sg(ρ), 1−ε, 1+ε_high)·A·new.
func TestLossDefault(t *testing.T) {
	c := resolve(t, ExperimentalConfig{})
	toks := []Token{
		{New: -1, Old: -1.5, A: 2, W: 1, Seq: 0},    // ρ = e^0.5 inside [0, 5]
		{New: -0.2, Old: -3, A: -1, W: 0.5, Seq: 0}, // ρ = e^2.8 = 16.4 → 5
	}
	st, g := Loss(c, toks)
	r1 := math.Exp(0.5)
	d := 2 + 1e-6
	near(t, "loss", st.Loss, (-r1*2*-1*1+-5*-1*-0.2*0.5)/d)
	near(t, "grad0", g[0], -r1*2*1/d)
	near(t, "grad1", g[1], -5*-1*0.5/d)
	if st.NumClipped != 1 {
		t.Fatalf("clipped %d, want 1", st.NumClipped)
	}
}

// PPO: L = −min(ρA, clip(ρ)A); gradient flows only through the chosen,
// unclipped branch.
func TestLossPPOClipBoundaries(t *testing.T) {
	c := resolve(t, ExperimentalConfig{PPO: ptr(true)}) // ε = ε_high = 0.2
	cases := []struct {
		rho, A, loss, grad float64
	}{
		{1.5, 1, -1.2, 0},         // clipped branch wins, ρ outside: no gradient
		{1.5, -1, 1.5, 1.5},       // unclipped wins: dL/dnew = −A·ρ
		{0.5, 1, -0.5, -0.5},      // unclipped (lower) wins
		{0.5, -1, 0.8, 0},         // clipped at 0.8 wins
		{1.1, 1, -1.1, -1.1},      // inside
		{1.2, 1, -1.2, -1.2},      // at the upper boundary: tie, gradient −A·ρ
		{0.8, -1, 0.8, 0.8},       // at the lower boundary
		{1.2000001, 1, -1.2, 0},   // just outside
		{0.7999999, -1, 0.8, 0.0}, // just outside below
	}
	for _, k := range cases {
		st, g := Loss(c, []Token{{New: math.Log(k.rho), Old: 0, A: k.A, W: 1}})
		near(t, "loss", st.Loss, k.loss/den)
		if math.Abs(g[0]-k.grad/den) > 1e-6 {
			t.Fatalf("ρ=%v A=%v: grad %v, want %v", k.rho, k.A, g[0], k.grad/den)
		}
	}
}

// Each importance-sampling level: loss by hand, gradient against finite
// differences (ppo=true with wide ε so nothing clips).
func TestLossISLevels(t *testing.T) {
	d1, d2 := 0.2, -0.4
	rt1, rt2, rs := math.Exp(d1), math.Exp(d2), math.Exp((d1+d2)/2)
	want := map[string]float64{
		ISToken:            -(rt1 + rt2),
		ISSequence:         -(2 * rs),
		ISAverage:          -((rt1+rs)/2 + (rt2+rs)/2),
		ISGeometricAverage: -(math.Sqrt(rt1*rs) + math.Sqrt(rt2*rs)),
	}
	for level, w := range want {
		c := resolve(t, ExperimentalConfig{PPO: ptr(true), Epsilon: ptr(10.0), ImportanceSamplingLevel: ptr(level)})
		toks := []Token{{New: -1 + d1, Old: -1, A: 1, W: 1}, {New: -2 + d2, Old: -2, A: 1, W: 1},
			{New: -0.5, Old: -0.1, A: -1, W: 2, Seq: 1}}
		st, g := Loss(c, toks)
		// third token alone in its sequence: ρ = e^−0.4 at every level
		r3 := math.Exp(-0.4)
		near(t, level+" loss", st.Loss, (w+r3*2)/(3+1e-6))
		for i := range toks {
			const h = 1e-6
			tp := append([]Token(nil), toks...)
			tp[i].New += h
			sp, _ := Loss(c, tp)
			tp[i].New -= 2 * h
			sm, _ := Loss(c, tp)
			num := (sp.Loss - sm.Loss) / (2 * h)
			if math.Abs(num-g[i]) > 1e-6 {
				t.Fatalf("%s: grad[%d] = %v, numeric %v", level, i, g[i], num)
			}
		}
	}
}

// Missing (NaN) old logprobs: old = stop-grad(new), so ρ = 1 and Δ = 0.
func TestLossMissingOldLogprob(t *testing.T) {
	c := resolve(t, ExperimentalConfig{})
	st, g := Loss(c, []Token{{New: -0.7, Old: math.NaN(), A: 3, W: 1}})
	near(t, "loss", st.Loss, -1*3*-0.7/den)
	near(t, "grad", g[0], -3/den)
	c = resolve(t, ExperimentalConfig{PPO: ptr(true)})
	st, g = Loss(c, []Token{{New: -0.7, Old: math.NaN(), A: 3, W: 1}})
	near(t, "ppo loss", st.Loss, -3/den)
	near(t, "ppo grad", g[0], -3/den) // dρ/dnew = ρ = 1
	// sequence level: a missing token contributes Δ = 0 to the mean
	c = resolve(t, ExperimentalConfig{PPO: ptr(true), Epsilon: ptr(10.0), ImportanceSamplingLevel: ptr(ISSequence)})
	st, _ = Loss(c, []Token{{New: -0.7, Old: math.NaN(), A: 1, W: 1}, {New: -1, Old: -1.6, A: 1, W: 1}})
	near(t, "seq loss", st.Loss, -2*math.Exp(0.3)/(2+1e-6))
}

// x_k2_tau: A_t ← A_t − τ·sg(Δ_t).
func TestLossTau(t *testing.T) {
	c := resolve(t, ExperimentalConfig{XK2Tau: ptr(0.5)})
	st, g := Loss(c, []Token{{New: -1, Old: -1.5, A: 2, W: 1}})
	r := math.Exp(0.5)
	near(t, "loss", st.Loss, -r*(2-0.25)*-1/den)
	near(t, "grad", g[0], -r*(2-0.25)/den)
}

// max_negative_advantage_importance_sampling_weight caps ρ (all tokens).
func TestLossMaxISWeight(t *testing.T) {
	c := resolve(t, ExperimentalConfig{MaxNegativeAdvantageImportanceSamplingWeight: ptr(1.2)})
	_, g := Loss(c, []Token{{New: -1, Old: -1.5, A: -2, W: 1}})
	near(t, "grad", g[0], -1.2*-2/den)
	c = resolve(t, ExperimentalConfig{PPO: ptr(true), Epsilon: ptr(10.0), MaxNegativeAdvantageImportanceSamplingWeight: ptr(1.2)})
	st, g := Loss(c, []Token{{New: -1, Old: -1.5, A: -2, W: 1}})
	near(t, "ppo loss", st.Loss, 1.2*2/den)
	near(t, "ppo grad (capped: none)", g[0], 0)
}

// mask_prob_ratio: ρ ← 0 outside (1−ε, 1+ε_high).
func TestLossMaskProbRatio(t *testing.T) {
	c := resolve(t, ExperimentalConfig{PPO: ptr(true), MaskProbRatio: ptr(true)})
	st, g := Loss(c, []Token{{New: math.Log(1.5), Old: 0, A: 1, W: 1}})
	near(t, "masked loss", st.Loss, 0) // −min(0·1, clip(0)·1 = 0.8) = 0
	near(t, "masked grad", g[0], 0)
	st, _ = Loss(c, []Token{{New: math.Log(1.1), Old: 0, A: 1, W: 1}})
	near(t, "kept loss", st.Loss, -1.1/den)
	c = resolve(t, ExperimentalConfig{MaskProbRatio: ptr(true), Epsilon: ptr(0.2), EpsilonHigh: ptr(0.2)})
	st, _ = Loss(c, []Token{{New: -1, Old: -1 - math.Log(1.5), A: 1, W: 1}})
	near(t, "cispo masked loss", st.Loss, -0.8*1*-1/den) // clip(0) = 0.8
}

// Batch normalisation: w/mean(w), balance, A/mean(|A|·w).
func TestNormalizeAndBalance(t *testing.T) {
	toks := []Token{{A: 2, W: 0.5}, {A: 2, W: 0.5}, {A: -1, W: 0.25}}
	Normalize(toks, 0.5)
	// w → [1.2, 1.2, 0.6]; A → [2, 2, −0.5]; mean(|A|w) = 1.7
	for i, w := range []float64{1.2, 1.2, 0.6} {
		near(t, "w", toks[i].W, w)
	}
	for i, a := range []float64{2 / 1.7, 2 / 1.7, -0.5 / 1.7} {
		near(t, "A", toks[i].A, a)
	}
	toks = []Token{{A: 2, W: 1}, {A: -1, W: 1}}
	Normalize(toks, -0.5) // positive scaled by 0.5 → [1, −1]
	near(t, "A0", toks[0].A, 1)
	near(t, "A1", toks[1].A, -1)
}
