package train

import (
	"math"
	"math/rand/v2"
	"testing"

	"flywheel/internal/engine"
)

// Sequences that share a prefix cost a batch their prefix once: a group of
// 8 trajectories with a 100-token prompt and 20-token completions fits a
// 300-token budget as one batch (8·120 tokens in full).
func TestPackingCountsSharedPrefixOnce(t *testing.T) {
	prompt := make([]int, 100)
	for i := range prompt {
		prompt[i] = i + 1
	}
	var seqs []*sequence
	for k := 0; k < 8; k++ {
		toks := append(append([]int(nil), prompt...), make([]int, 20)...)
		for i := 100; i < 120; i++ {
			toks[i] = 1000 + 20*k + i
		}
		seqs = append(seqs, &sequence{Tokens: toks, Mask: make([]bool, 120), OldLP: make([]float64, 120)})
	}
	bins := packSequences(seqs, 300)
	if len(bins) != 1 {
		t.Fatalf("%d batches, want 1", len(bins))
	}
	sb := buildBatch(bins[0])
	if got, want := len(sb.b.Tokens), 100+8*20; got != want {
		t.Fatalf("batch of %d tokens, want %d (the prompt once)", got, want)
	}
	if sb.ntoken != 8*120 {
		t.Fatalf("ntoken %d, want the sequences' %d", sb.ntoken, 8*120)
	}
	if bins := packSequences(seqs, 250); len(bins) != 2 {
		t.Fatalf("budget 250: %d batches, want 2", len(bins))
	}
}

// buildBatch's prefix tree gives every trainable token the logprob the
// model gives it in its own full sequence: random sequences with shared
// prefixes at several depths (a multi-turn tree), one identical pair, one
// sequence that is a prefix of another.
func TestBuildBatchTreeMatchesFullSequences(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	cfg := &engine.Config{Architecture: engine.ArchLlama, HiddenSize: 16, IntermediateSize: 24, NumLayers: 2,
		NumHeads: 4, NumKVHeads: 2, HeadDim: 4, VocabSize: 50, MaxPositionEmbeddings: 64,
		RMSNormEps: 1e-5, RopeTheta: 10000, BOSTokenID: -1}
	m := engine.NewModel("t", cfg, engine.RandomWeights(cfg, 2), nil, nil)
	toks := func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = rng.IntN(cfg.VocabSize)
		}
		return s
	}
	cat := func(parts ...[]int) []int {
		var s []int
		for _, p := range parts {
			s = append(s, p...)
		}
		return s
	}
	sys, turn1, turn2 := toks(6), toks(4), toks(3)
	all := [][]int{
		cat(sys, turn1, toks(5)),
		cat(sys, turn1, toks(2)),
		cat(sys, turn1, turn2, toks(4)),
		cat(sys, turn1, turn2),
		cat(sys, toks(7)),
		cat(sys, toks(7)),
		toks(9),
	}
	all = append(all, all[4]) // identical to another
	var seqs []*sequence
	for _, s := range all {
		sq := &sequence{Tokens: s, Mask: make([]bool, len(s)), OldLP: make([]float64, len(s)), A: 1, W: 1}
		for i := 1; i < len(s); i++ {
			sq.Mask[i] = rng.IntN(3) > 0
		}
		seqs = append(seqs, sq)
	}
	sb := buildBatch(seqs)
	n := 0
	for _, s := range all {
		n += len(s)
	}
	if len(sb.b.Tokens) >= n {
		t.Fatalf("tree of %d tokens for %d in full", len(sb.b.Tokens), n)
	}
	p, err := m.Net().ForwardBatch(sb.b, nil, engine.DefaultBudgets)
	if err != nil {
		t.Fatal(err)
	}
	row := 0
	for si, s := range seqs {
		logits, err := m.Logits(nil, s.Tokens)
		if err != nil {
			t.Fatal(err)
		}
		V := cfg.VocabSize
		for tk := 1; tk < len(s.Tokens); tk++ {
			if !s.Mask[tk] {
				continue
			}
			z := logits[(tk-1)*V : tk*V]
			mx := math.Inf(-1)
			for _, v := range z {
				mx = math.Max(mx, float64(v))
			}
			var sum float64
			for _, v := range z {
				sum += math.Exp(float64(v) - mx)
			}
			want := float64(z[s.Tokens[tk]]) - mx - math.Log(sum)
			if sb.toks[row].Seq != si || math.Abs(p.LogProb[row]-want) > 1e-5 {
				t.Fatalf("sequence %d token %d: tree logprob %.8g (seq %d), full %.8g", si, tk, p.LogProb[row], sb.toks[row].Seq, want)
			}
			row++
		}
	}
	if row != len(sb.b.Rows) {
		t.Fatalf("%d rows checked of %d", row, len(sb.b.Rows))
	}
}
