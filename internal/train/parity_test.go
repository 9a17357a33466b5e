package train

import (
	"math"
	"testing"

	"flywheel/internal/engine"
)

// The training forward must compute what inference computes: logprobs of
// the packed training forward equal log_softmax of engine.Model.Logits.
func TestForwardMatchesEngineLogits(t *testing.T) {
	prev := attnBlock
	attnBlock = 5 // several query blocks per sequence
	defer func() { attnBlock = prev }()
	for _, arch := range []string{engine.ArchLlama, engine.ArchQwen2, engine.ArchQwen3, engine.ArchMistral} {
		t.Run(arch, func(t *testing.T) {
			cfg := tinyCfg(arch, arch != engine.ArchMistral)
			cfg.HiddenSize, cfg.IntermediateSize, cfg.VocabSize = 16, 24, 40
			if cfg.RopeScaling != nil {
				cfg.RopeScaling.OriginalMaxPositionEmbeddings = 16
			}
			w := engine.RandomWeights(cfg, 5)
			ad := randAdapter(t, cfg, 4, 6)
			em := engine.NewModel("test", cfg, w, nil, nil)
			m, err := newModel[float32](cfg, w, ad)
			if err != nil {
				t.Fatal(err)
			}
			// two sequences packed; positions restart per sequence
			seqs := [][]int{{1, 5, 9, 3, 7, 22, 31, 4, 0, 12, 39, 2}, {8, 6, 17, 25, 3}}
			b := &batch{}
			for _, s := range seqs {
				off := len(b.Tokens)
				for i, tok := range s {
					b.Tokens = append(b.Tokens, tok)
					b.Pos = append(b.Pos, i)
					if i+1 < len(s) {
						b.Rows = append(b.Rows, off+i)
						b.Targets = append(b.Targets, s[i+1])
					}
				}
				b.Segs = append(b.Segs, seg{off, len(s)})
			}
			p := m.forward(b)
			row := 0
			V := cfg.VocabSize
			var worst float64
			for _, s := range seqs {
				logits, err := em.Logits(ad, s)
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i+1 < len(s); i++ {
					z := logits[i*V : (i+1)*V]
					mx := math.Inf(-1)
					for _, v := range z {
						mx = math.Max(mx, float64(v))
					}
					var sum float64
					for _, v := range z {
						sum += math.Exp(float64(v) - mx)
					}
					want := float64(z[s[i+1]]) - mx - math.Log(sum)
					d := math.Abs(p.LogProb[row] - want)
					worst = max(worst, d)
					if d > 1e-4*math.Max(1, math.Abs(want)) {
						t.Fatalf("row %d: training forward %v, engine %v", row, p.LogProb[row], want)
					}
					row++
				}
			}
			t.Logf("max abs diff %.2g", worst)
		})
	}
}
