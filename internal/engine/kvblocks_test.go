package engine

import (
	"testing"
)

// TestKVBlocksRoundTrip: keys and values exported from one sequence and
// appended to another (in blocks, into caches of other capacities) make it
// the same sequence: the next Forward gives bit-identical logits, on every
// variant of the model definition, with and without an adapter.
func TestKVBlocksRoundTrip(t *testing.T) {
	for _, tc := range variantSpecs() {
		t.Run(tc.name, func(t *testing.T) {
			m := loadParts(t, writeModel(t, tc.spec))
			V, F := m.Config.VocabSize, m.KVFloatsPerToken()
			a, err := NewAdapter(m.Config, LoRAConfig{Rank: 4, Alpha: 8, TargetModules: AllModules}, 1)
			if err != nil {
				t.Fatal(err)
			}
			randomizeB(a, 3)
			for _, ad := range []*Adapter{nil, a} {
				toks := randTokens(90, V, 7)
				const split = 80
				src := m.NewSeq(ad)
				if _, err := m.Forward([]*Seq{src}, [][]int{toks[:split]}); err != nil {
					t.Fatal(err)
				}
				dst := m.NewSeq(ad)
				// a block of 16, then the rest, then nothing
				for _, r := range [][2]int{{0, 16}, {16, split}, {split, split}} {
					n := r[1] - r[0]
					dst.AppendKV(src.ExportKV(r[0], r[1], make([]float32, n*F+3)), n)
				}
				if dst.Len() != split || dst.Logits() != nil {
					t.Fatalf("Len %d, logits %v after appending %d positions", dst.Len(), dst.Logits() != nil, split)
				}
				want := src.ExportKV(0, split, make([]float32, split*F))
				got := dst.ExportKV(0, split, make([]float32, split*F))
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("KV float %d: %v appended, %v exported", i, got[i], want[i])
					}
				}
				lw, err := m.Forward([]*Seq{src}, [][]int{toks[split:]})
				if err != nil {
					t.Fatal(err)
				}
				lg, err := m.Forward([]*Seq{dst}, [][]int{toks[split:]})
				if err != nil {
					t.Fatal(err)
				}
				for i := range V {
					if lg[0][i] != lw[0][i] {
						t.Fatalf("logit %d: %v after AppendKV, %v on the source sequence", i, lg[0][i], lw[0][i])
					}
				}
			}
		})
	}
}

func TestKVBlocksPanics(t *testing.T) {
	m := loadParts(t, writeModel(t, variantSpecs()[0].spec))
	s := m.NewSeq(nil)
	if _, err := m.Forward([]*Seq{s}, [][]int{randTokens(5, m.Config.VocabSize, 1)}); err != nil {
		t.Fatal(err)
	}
	F := m.KVFloatsPerToken()
	for name, f := range map[string]func(){
		"export past the end": func() { s.ExportKV(0, 6, make([]float32, 6*F)) },
		"export short dst":    func() { s.ExportKV(0, 5, make([]float32, 5*F-1)) },
		"append wrong size":   func() { s.AppendKV(make([]float32, F), 2) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}
