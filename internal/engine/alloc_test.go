package engine

import (
	"testing"

	"flywheel/internal/engine/gguf"
	"flywheel/internal/engine/tiny"
)

// BenchmarkTinyDecodeStep is one decode step of two sequences of the tiny
// model: per-step overhead and allocations outside the matrix products.
func BenchmarkTinyDecodeStep(b *testing.B) {
	m := loadParts(b, writeModel(b, tiny.Spec{Merges: 100}))
	seqs := []*Seq{m.NewSeq(nil), m.NewSeq(nil)}
	toks := [][]int{{1}, {2}}
	m.Forward(seqs, [][]int{{1, 2, 3}, {4}})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if i%500 == 0 {
			seqs[0].Truncate(3)
			seqs[1].Truncate(1)
		}
		m.Forward(seqs, toks)
	}
}

// A decode step's heap allocations do not grow with the model's depth: the
// per-layer products, attention and row loops allocate nothing (batch-1
// decode makes ~300 such calls a token, and their garbage once cost ~4 %
// of its speed) — float32 weights, and a Q4_1 GGUF file with q/k/v biases
// (the four-row layout's kernels). Skipped under the race detector, whose
// sync.Pool drops items at random.
func TestDecodeAllocsIndependentOfDepth(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under -race")
	}
	allocs := func(m *Model) float64 {
		seqs := []*Seq{m.NewSeq(nil), m.NewSeq(nil)}
		if _, err := m.Forward(seqs, [][]int{{1, 2, 3}, {4}}); err != nil {
			t.Fatal(err)
		}
		steps := 0
		return testing.AllocsPerRun(40, func() {
			if steps%16 == 0 { // stay inside the caches' capacity
				seqs[0].Truncate(3)
				seqs[1].Truncate(1)
			}
			steps++
			if _, err := m.Forward(seqs, [][]int{{1}, {2}}); err != nil {
				t.Fatal(err)
			}
		})
	}
	for _, c := range []struct {
		name string
		load func(layers int) *Model
	}{
		{"float32", func(layers int) *Model {
			return loadParts(t, writeModel(t, tiny.Spec{Merges: 100, Layers: layers}))
		}},
		{"Q4_1 GGUF, biases", func(layers int) *Model {
			m, err := LoadGGUF(writeGGUF(t, tiny.Spec{Arch: "Qwen2ForCausalLM", Merges: 100, Layers: layers}, gguf.Q4_1))
			if err != nil {
				t.Fatal(err)
			}
			return m
		}},
	} {
		// Six more layers that each allocated once would add six a step; one
		// of slack absorbs a pool refilled after a garbage collection.
		if a2, a8 := allocs(c.load(2)), allocs(c.load(8)); a8 > a2+1 {
			t.Errorf("%s: a decode step of two sequences allocates %v times with 8 layers, %v with 2", c.name, a8, a2)
		}
	}
}
