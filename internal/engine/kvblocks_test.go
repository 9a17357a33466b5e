package engine

import (
	"fmt"
	"testing"
)

// TestKVBlocksBitExact: a prefix's keys and values exported from one
// sequence and appended to another give bit-identical logits to
// forwarding the whole prompt (the property infer's prefix cache rests on).
func TestKVBlocksBitExact(t *testing.T) {
	for _, tc := range variantSpecs() {
		t.Run(tc.name, func(t *testing.T) {
			m := loadParts(t, writeModel(t, tc.spec))
			V := m.Config.VocabSize
			var a *Adapter
			if tc.spec.Arch == ArchQwen2 {
				a, _ = NewAdapter(m.Config, LoRAConfig{Rank: 4, Alpha: 8, TargetModules: AllModules}, 1)
				randomizeB(a, 3)
			}
			toks := randTokens(70, V, 7)
			full := m.NewSeq(a)
			want, err := m.Forward([]*Seq{full}, [][]int{toks})
			if err != nil {
				t.Fatal(err)
			}
			for _, split := range []int{32, 48, 16} {
				src := m.NewSeq(a)
				if _, err := m.Forward([]*Seq{src}, [][]int{toks[:split]}); err != nil {
					t.Fatal(err)
				}
				blk := src.ExportKV(0, split, make([]float32, split*m.KVFloatsPerToken()))
				ref := full.ExportKV(0, split, make([]float32, split*m.KVFloatsPerToken()))
				for i := range blk {
					if blk[i] != ref[i] {
						t.Fatalf("split %d: KV float %d: prefix alone %v, in the full prompt %v", split, i, blk[i], ref[i])
					}
				}
				dst := m.NewSeq(a)
				dst.AppendKV(blk, split)
				got, err := m.Forward([]*Seq{dst}, [][]int{toks[split:]})
				if err != nil {
					t.Fatal(err)
				}
				for i := range V {
					if got[0][i] != want[0][i] {
						t.Fatalf("split %d: logit %d: %v with appended KV, %v forwarded whole", split, i, got[0][i], want[0][i])
					}
				}
			}
			_ = fmt.Sprint
		})
	}
}
