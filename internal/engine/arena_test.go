package engine

import "testing"

// separately copies w's matrices into slices of their own (the Go heap,
// 4 KiB pages for all but the largest): the layout before the arena.
func separately(w *Weights) *Weights {
	return w.mapMats(func(m Mat) Mat {
		switch {
		case m.Quant != nil:
			return Mat{Quant: append([]byte(nil), m.Quant...), QuantType: m.QuantType}
		case m.Half != nil:
			return Mat{Half: append([]uint16(nil), m.Half...), HalfType: m.HalfType}
		}
		return Mat{F32: append([]float32(nil), m.F32...)}
	})
}

// BenchmarkDecodeArena135M measures what the weight arena buys: batch-1
// decode of the SmolLM2-135M shape (float32, BF16, and Q4_1 as the real
// file) from the arena and from the same weights in separate slices,
// interleaved in one process, and reports each format's tok/s and the
// ratio arena/separate.
func BenchmarkDecodeArena135M(b *testing.B) {
	q41, _, _ := models135MQuant(b)
	type pair struct {
		name           string
		arena, sep     *Model
		sa, ss         []*Seq
		secsA, secsSep float64
	}
	var ps []*pair
	for _, x := range []struct {
		name string
		m    *Model
	}{{"f32", model135M(b)}, {"bf16", model135MBF16(b)}, {"q4_1", q41}} {
		sep := NewModel(x.m.ID+"-separate", x.m.Config, separately(x.m.Weights), nil, nil)
		ps = append(ps, &pair{name: x.name, arena: x.m, sep: sep, sa: prefilled(b, x.m, 1), ss: prefilled(b, sep, 1)})
	}
	const steps = 16
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		for _, p := range ps {
			p.secsA += decodeSteps(b, p.arena, p.sa, steps)
			p.secsSep += decodeSteps(b, p.sep, p.ss, steps)
		}
	}
	for _, p := range ps {
		b.ReportMetric(float64(b.N*steps)/p.secsA, p.name+"-arena-tok/s")
		b.ReportMetric(float64(b.N*steps)/p.secsSep, p.name+"-separate-tok/s")
		b.ReportMetric(p.secsSep/p.secsA, p.name+"-arena/separate")
	}
}
