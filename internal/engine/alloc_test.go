package engine

import (
	"testing"

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
