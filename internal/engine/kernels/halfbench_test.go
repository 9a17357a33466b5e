package kernels

import (
	"testing"
	"time"

	"flywheel/internal/safetensors"
)

// BenchmarkGemvStream streams 256 MiB of weights (matrices of [3072, 576],
// the SmolLM2-135M gate/up shape) through one-row products, in float32
// (the Go backend's Sgemm and GemvNT), BF16 and F16, interleaved with the 256 MiB read-bandwidth probe, and
// reports each precision's weight bytes per second as a fraction of the
// read bandwidth measured in the same run.
func BenchmarkGemvStream(b *testing.B) {
	const bytes = 256 << 20
	const n, k = 3072, 576
	probe := make([]float32, bytes/4)
	for i := range probe {
		probe[i] = 1
	}
	wf := make([]float32, bytes/4)
	wh := make([]uint16, bytes/2)
	for i := range wf {
		wf[i] = float32(i%13) * 0.01
	}
	for i := range wh {
		wh[i] = safetensors.F32ToBF16(float32(i%13) * 0.01)
	}
	x := make([]float32, k)
	for i := range x {
		x[i] = 1
	}
	c := make([]float32, n)
	var tProbe, tF32, tGemv, tBF16, tF16 float64
	timeIt := func(f func()) float64 {
		s := time.Now()
		f()
		return time.Since(s).Seconds()
	}
	b.ResetTimer()
	for range b.N {
		tProbe += timeIt(func() { SumParallel(probe) })
		tF32 += timeIt(func() {
			for o := 0; o+n*k <= len(wf); o += n * k {
				Go{}.Sgemm(false, true, 1, n, k, 1, x, k, wf[o:], k, 0, c, n)
			}
		})
		tGemv += timeIt(func() {
			for o := 0; o+n*k <= len(wf); o += n * k {
				GemvNT(1, n, k, x, k, wf[o:], k, 0, c, n)
			}
		})
		tBF16 += timeIt(func() {
			for o := 0; o+n*k <= len(wh); o += n * k {
				HalfGemmNT(BF16, 1, n, k, x, k, wh[o:], k, 0, c, n)
			}
		})
		tF16 += timeIt(func() {
			for o := 0; o+n*k <= len(wh); o += n * k {
				HalfGemmNT(F16, 1, n, k, x, k, wh[o:], k, 0, c, n)
			}
		})
	}
	bw := float64(bytes) * float64(b.N) / tProbe
	streamed := func(elems, size int) float64 { return float64(elems/(n*k)*n*k*size) * float64(b.N) }
	b.ReportMetric(bw/1e9, "readGB/s")
	b.ReportMetric(streamed(len(wf), 4)/tF32/bw, "f32-sgemm-of-bw")
	b.ReportMetric(streamed(len(wf), 4)/tGemv/bw, "f32-gemv-of-bw")
	b.ReportMetric(streamed(len(wh), 2)/tBF16/bw, "bf16-of-bw")
	b.ReportMetric(streamed(len(wh), 2)/tF16/bw, "f16-of-bw")
}
