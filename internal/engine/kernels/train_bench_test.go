package kernels

import (
	"flywheel/internal/cputime"
	"math/rand/v2"
	"testing"
)

// trainShapes are the matrix products of one training step of the
// SmolLM2-135M shape over 1024 rows (4×256 tokens): per layer the fused
// q/k/v, o, fused gate/up and down products forward (x·Wᵀ) and backward
// (dy·W), the lm head over all rows, and the LoRA r=16 products.
var trainShapes = []shape{
	{"qkv.fwd", false, true, 1024, 960, 576},
	{"o.fwd", false, true, 1024, 576, 576},
	{"gu.fwd", false, true, 1024, 3072, 576},
	{"down.fwd", false, true, 1024, 576, 1536},
	{"head.fwd", false, true, 1024, 49152, 576},
	{"qkv.bwd", false, false, 1024, 576, 960},
	{"o.bwd", false, false, 1024, 576, 576},
	{"gu.bwd", false, false, 1024, 576, 3072},
	{"down.bwd", false, false, 1024, 1536, 576},
	{"head.bwd", false, false, 1024, 576, 49152},
	{"lora.xA", false, true, 1024, 16, 576},
	{"lora.xaB", false, true, 1024, 576, 16},
	{"lora.dyB", false, false, 1024, 16, 576},
	{"lora.dx", false, false, 1024, 576, 16},
	{"lora.dB", true, false, 576, 16, 1024},
	{"lora.dA", true, false, 16, 576, 1024},
}

// BenchmarkSgemmTrainShapes runs the Go backend on the training step's
// products and reports GFLOP/s.
func BenchmarkSgemmTrainShapes(b *testing.B) {
	benchShapes(b, []Backend{Go{}}, trainShapes)
}

// BenchmarkMicroKernel runs the micro-kernel alone on panels that stay in
// L1 (kc=256) and reports GFLOP/s of one core: the ceiling of the GEMM.
func BenchmarkMicroKernel(b *testing.B) {
	const kc = 256
	nr := tileN()
	r := rand.New(rand.NewPCG(8, 8))
	ap, bp := randSlice(r, mr*kc), randSlice(r, nr*kc)
	c := make([]float32, mr*nr)
	cpu0 := cputime.Used().Seconds()
	for b.Loop() {
		for range 64 {
			microKernel(kc, nr, ap, mr, 1, bp, nr, c, nr, 1, false)
		}
	}
	flop := 64 * 2 * float64(mr*nr*kc) * float64(b.N)
	b.ReportMetric(flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	b.ReportMetric(flop/(cputime.Used().Seconds()-cpu0)/1e9, "GFLOP/cpu-s")
}
