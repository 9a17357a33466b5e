package infer

import (
	"math"
	"math/rand/v2"
	"testing"
)

// refPenalised is the float64 reference: vLLM's apply_penalties on the
// whole vocabulary, after the logit bias.
func refPenalised(logits []float32, p Penalties, prompt, out []int) []float64 {
	V := len(logits)
	counts := make([]float64, V)
	inPrompt := make([]bool, V)
	for _, id := range out {
		counts[id]++
	}
	for _, id := range prompt {
		inPrompt[id] = true
	}
	rp := p.Repetition
	if rp == 0 {
		rp = 1
	}
	r := make([]float64, V)
	for i := range r {
		l := float64(logits[i]) + p.LogitBias[i]
		if inPrompt[i] || counts[i] > 0 {
			if l > 0 {
				l /= rp
			} else {
				l *= rp
			}
		}
		l -= p.Frequency * counts[i]
		if counts[i] > 0 {
			l -= p.Presence
		}
		r[i] = l
	}
	return r
}

func TestPenaltiesMatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const V = 300
	cases := []Penalties{
		{Presence: 0.5},
		{Frequency: 0.7},
		{Frequency: -0.3, Presence: 1.5},
		{Repetition: 1.3},
		{Repetition: 0.8},
		{LogitBias: map[int]float64{3: 100, 7: -100, 299: 2.5}},
		{Presence: -2, Frequency: 2, Repetition: 1.7, LogitBias: map[int]float64{0: -5, 12: 5, 13: 0.25}},
	}
	for ci, p := range cases {
		logits := make([]float32, V)
		for i := range logits {
			logits[i] = float32(rng.NormFloat64() * 3)
		}
		orig := append([]float32(nil), logits...)
		prompt := make([]int, 40)
		for i := range prompt {
			prompt[i] = rng.IntN(V)
		}
		st := newPenaltyState(&p, prompt)
		if st == nil {
			t.Fatalf("case %d: no state", ci)
		}
		var out []int
		for step := 0; step < 30; step++ {
			got := st.apply(logits)
			want := refPenalised(logits, p, prompt, out)
			for i := range got {
				if math.Abs(float64(got[i])-want[i]) > 1e-5*math.Max(1, math.Abs(want[i])) {
					t.Fatalf("case %d step %d token %d: %v, reference %v", ci, step, i, got[i], want[i])
				}
			}
			for i := range logits {
				if logits[i] != orig[i] {
					t.Fatalf("case %d: apply modified the logits", ci)
				}
			}
			tok := rng.IntN(V / 3) // repeats, so counts exceed 1
			out = append(out, tok)
			st.add(tok)
		}
	}
	if newPenaltyState(&Penalties{Repetition: 1}, []int{1}) != nil || newPenaltyState(nil, nil) != nil {
		t.Fatal("no-op penalties made a state")
	}
}
