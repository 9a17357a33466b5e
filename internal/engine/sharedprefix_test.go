package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// prefixCase is a prefix shared by several continuations, packed two ways:
// each sequence in full, and as a tree (the prefix once, continued by each
// suffix). rows are, per sequence, every position but its last; coef weighs
// each row's logprob in the objective.
type prefixCase struct {
	full, tree *Batch
	coef       []float64
}

func newPrefixCase(V int, seed uint64) prefixCase {
	rng := rand.New(rand.NewPCG(seed, 5))
	toks := func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = rng.IntN(V)
		}
		return s
	}
	prefix := toks(5)
	suffixes := [][]int{toks(3), toks(4), toks(1)}
	var c prefixCase
	c.full, c.tree = &Batch{}, &Batch{}
	// tree: the prefix, then each suffix continuing it
	t := c.tree
	t.Tokens = append(t.Tokens, prefix...)
	for i := range prefix {
		t.Pos = append(t.Pos, i)
	}
	t.Segs, t.Parent = []Segment{{0, len(prefix)}}, []int{-1}
	for _, sfx := range suffixes {
		off := len(t.Tokens)
		t.Tokens = append(t.Tokens, sfx...)
		for i := range sfx {
			t.Pos = append(t.Pos, len(prefix)+i)
		}
		t.Segs, t.Parent = append(t.Segs, Segment{off, len(sfx)}), append(t.Parent, 0)
	}
	for si, sfx := range suffixes {
		seq := append(append([]int(nil), prefix...), sfx...)
		off := len(c.full.Tokens)
		for i, tok := range seq {
			c.full.Tokens = append(c.full.Tokens, tok)
			c.full.Pos = append(c.full.Pos, i)
		}
		c.full.Segs = append(c.full.Segs, Segment{off, len(seq)})
		sfxOff := c.tree.Segs[si+1].Off
		for i := 0; i+1 < len(seq); i++ {
			c.full.Rows = append(c.full.Rows, off+i)
			c.full.Targets = append(c.full.Targets, seq[i+1])
			r := i // a prefix row of the tree, shared by every sequence
			if i >= len(prefix) {
				r = sfxOff + i - len(prefix)
			}
			c.tree.Rows = append(c.tree.Rows, r)
			c.tree.Targets = append(c.tree.Targets, seq[i+1])
			c.coef = append(c.coef, rng.NormFloat64())
		}
	}
	return c
}

// checkSharedPrefix runs both packings of one case through Net[T] and
// compares the rows' logprobs and every LoRA gradient.
func checkSharedPrefix[T Float](t *testing.T, cfg *Config, w *Weights, tol float64) {
	ad := randAdapter(t, cfg, 2, 2)
	c := newPrefixCase(cfg.VocabSize, 9)
	n, err := NewNet[T](cfg, w)
	if err != nil {
		t.Fatal(err)
	}
	run := func(b *Batch) (*Pass[T], *LoRA[T]) {
		lo := NewLoRA[T](ad.Clone(), true)
		p, err := n.ForwardBatch(b, lo, DefaultBudgets)
		if err != nil {
			t.Fatal(err)
		}
		p.Backward(c.coef)
		return p, lo
	}
	pf, lf := run(c.full)
	pt, lt := run(c.tree)
	var worstLP, worstG float64
	for i := range pf.LogProb {
		d := math.Abs(pf.LogProb[i]-pt.LogProb[i]) / math.Max(1, math.Abs(pf.LogProb[i]))
		worstLP = max(worstLP, d)
		if d > tol {
			t.Fatalf("row %d: logprob full %.12g, shared prefix %.12g", i, pf.LogProb[i], pt.LogProb[i])
		}
	}
	// gradients, relative to the largest of each tensor
	for l := range lf.Layers {
		for mi, f := range lf.Layers[l] {
			g := lt.Layers[l][mi]
			for _, pair := range [][2][]T{{f.DA, g.DA}, {f.DB, g.DB}} {
				var scale float64
				for _, v := range pair[0] {
					scale = max(scale, math.Abs(float64(v)))
				}
				for i := range pair[0] {
					d := math.Abs(float64(pair[0][i]-pair[1][i])) / max(scale, 1e-12)
					worstG = max(worstG, d)
					if d > tol {
						t.Fatalf("layer %d %s [%d]: gradient full %.12g, shared prefix %.12g", l, AllModules[mi], i, pair[0][i], pair[1][i])
					}
				}
			}
		}
	}
	t.Logf("max rel diff: logprobs %.2g, gradients %.2g", worstLP, worstG)
}

// TestSharedPrefixEqualsFull: training sequences that share a prefix as a
// tree (the prefix's forward and backward once) gives the same logprobs and
// LoRA gradients as training each sequence in full: ≤ 1e-9 in float64 and
// ≤ 1e-4 in float32, for every architecture (Mistral's window takes effect
// across the prefix boundary), fused and separate products.
func TestSharedPrefixEqualsFull(t *testing.T) {
	prev := attnBlock
	attnBlock = 2 // several query blocks per segment
	defer func() { attnBlock = prev }()
	for _, arch := range []string{ArchLlama, ArchQwen2, ArchQwen3, ArchMistral} {
		for _, tied := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/tied=%v", arch, tied), func(t *testing.T) {
				cfg := tinyCfg(arch, tied)
				checkSharedPrefix[float64](t, cfg, randWeights(cfg, 1), 1e-9)
				checkSharedPrefix[float32](t, cfg, RandomWeights(cfg, 1), 1e-4)
			})
		}
	}
}
