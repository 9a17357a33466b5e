package engine

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestHeadChunksEqualOneProduct: with a Head budget too small to keep the
// lm head's probabilities, the head runs in chunks of rows and recomputes
// them in the backward; the logprobs, entropies and LoRA gradients equal
// those of the default budget, where all rows are one matrix product kept
// for the backward (float64: to 1e-12).
func TestHeadChunksEqualOneProduct(t *testing.T) {
	cfg := tinyCfg(ArchLlama, true)
	cfg.MaxPositionEmbeddings = 512
	w := randWeights(cfg, 3)
	ad := randAdapter(t, cfg, 2, 3)
	n, err := NewNet[float64](cfg, w)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	const L = 3*headChunk + 17 // four chunks, the last a partial one
	b := &Batch{Segs: []Segment{{0, L}}}
	var coef []float64
	for i := range L {
		b.Tokens = append(b.Tokens, rng.IntN(cfg.VocabSize))
		b.Pos = append(b.Pos, i)
	}
	for i := range L - 1 {
		b.Rows, b.Targets = append(b.Rows, i), append(b.Targets, b.Tokens[i+1])
		coef = append(coef, rng.NormFloat64())
	}
	run := func(bud Budgets) (*Pass[float64], *LoRA[float64]) {
		lo := NewLoRA[float64](ad.Clone(), true)
		p, err := n.ForwardBatch(b, lo, bud)
		if err != nil {
			t.Fatal(err)
		}
		p.Backward(coef)
		return p, lo
	}
	p1, l1 := run(DefaultBudgets)
	pc, lc := run(Budgets{Activations: DefaultBudgets.Activations, Head: 1})
	if p1.headRows < L-1 || pc.headRows != headChunk {
		t.Fatalf("head rows per chunk: %d and %d", p1.headRows, pc.headRows)
	}
	close := func(what string, a, b float64) {
		if math.Abs(a-b) > 1e-12*math.Max(1, math.Abs(a)) {
			t.Fatalf("%s: one product %.15g, chunks %.15g", what, a, b)
		}
	}
	for i := range p1.LogProb {
		close("logprob", p1.LogProb[i], pc.LogProb[i])
		close("entropy", p1.Entropy[i], pc.Entropy[i])
	}
	for l := range l1.Layers {
		for mi, f := range l1.Layers[l] {
			g := lc.Layers[l][mi]
			for i := range f.DA {
				close("dA", f.DA[i], g.DA[i])
			}
			for i := range f.DB {
				close("dB", f.DB[i], g.DB[i])
			}
		}
	}
}
