package kernels

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkQuantGemv: one decode product W [n,k]·x of the SmolLM2-135M
// MLP shape (1536×576), per format, against float32 GemvNT; reports the
// weight bytes streamed per second and the CPU time per product (which
// moves less with a shared machine's load than wall time).
func BenchmarkQuantGemv(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	const n, k = 1536, 768
	x := randSlice(r, k)
	c := make([]float32, n)
	for _, qt := range []QuantType{Q4_1, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K} {
		if k%qt.BlockElems() != 0 {
			continue
		}
		w, _ := randQuant(r, qt, n, k)
		b.Run(qt.String(), func(b *testing.B) {
			b.SetBytes(int64(len(w)))
			c0 := cpuSeconds()
			for range b.N {
				QuantGemmNT(qt, 1, n, k, x, k, w, 0, c, n)
			}
			b.ReportMetric((cpuSeconds()-c0)*1e9/float64(b.N), "cpu-ns/op")
		})
	}
	wf := randSlice(r, n*k)
	b.Run("F32", func(b *testing.B) {
		b.SetBytes(int64(4 * len(wf)))
		c0 := cpuSeconds()
		for range b.N {
			GemvNT(1, n, k, x, k, wf, k, 0, c, n)
		}
		b.ReportMetric((cpuSeconds()-c0)*1e9/float64(b.N), "cpu-ns/op")
	})
}

// BenchmarkQuantDot4L1: the bare 4-row decode kernels on weights that stay
// in L1 (8 rows of 1024 values), in CPU ns per 32-value block of one row: the
// compute cost without memory.
func BenchmarkQuantDot4L1(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	const k = 1024
	x := randSlice(r, k)
	for _, qt := range []QuantType{Q4_1, Q8_0, Q4_0} {
		kern := quantKernel(qt)
		if kern == nil {
			b.Skip("no kernel")
		}
		w, _ := randQuant(r, qt, 8, k)
		prep := make([]float32, kern.prepLen*k/32)
		if kern.prep != nil {
			kern.prep(prep, x)
		} else {
			prep = nil
		}
		b.Run(qt.String(), func(b *testing.B) {
			var out [8]float32
			c0 := cpuSeconds()
			for range b.N {
				kern.dots(k/32, x, prep, w, qt.RowBytes(k), out[:])
			}
			b.ReportMetric((cpuSeconds()-c0)*1e9/float64(b.N)/(8*k/32), "cpu-ns/block-row")
		})
	}
}

// BenchmarkDequantRow: dequantising 1536×768 weights (what prefill and
// training do per matrix and pass), per format, in values per second.
func BenchmarkDequantRow(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	const n = 1536 * 768
	dst := make([]float32, n)
	for _, qt := range []QuantType{Q4_1, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K} {
		w, _ := randQuant(r, qt, 1, n)
		b.Run(qt.String(), func(b *testing.B) {
			for range b.N {
				DequantRow(qt, dst, w)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gvalues/s")
		})
	}
}
