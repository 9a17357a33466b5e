package kernels

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"flywheel/internal/hugemem"
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
	probe, wf, wh, x, c := streamBuffers(bytes, bytes, n, k)
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

// BenchmarkStreamOrder compares the two access orders of the one-row
// decode kernels (SetRowOrder) on 128 MiB of weights ([3072, 576]
// matrices, as BenchmarkGemvStream) in float32, BF16 and F16, on the
// AVX-512 kernels and (AVX-512 turned off) the AVX2 ones, interleaved
// round by round with the read-bandwidth probe, and reports each order's
// weight GB/s and the row order's speed-up: the order.go choice measured
// outside a model, on both instruction sets of this machine.
func BenchmarkStreamOrder(b *testing.B) {
	const bytes = 128 << 20
	const n, k = 3072, 576
	probe, wf, wh, x, c := streamBuffers(2*bytes, bytes, n, k)
	defer SetRowOrder(SetRowOrder(true))
	h5 := haveAVX512
	defer func() { haveAVX512 = h5 }()
	type kind struct {
		name  string
		avx   bool // AVX-512 kernels
		run   func()
		bytes float64
	}
	var kinds []kind
	for _, avx := range []bool{true, false} {
		if avx && !h5 || !haveAVX2 {
			continue
		}
		isa := "avx2"
		if avx {
			isa = "avx512"
		}
		kinds = append(kinds,
			kind{isa + "-f32", avx, func() {
				for o := 0; o+n*k <= len(wf); o += n * k {
					GemvNT(1, n, k, x, k, wf[o:], k, 0, c, n)
				}
			}, float64(len(wf) / (n * k) * n * k * 4)},
			kind{isa + "-bf16", avx, func() {
				for o := 0; o+n*k <= len(wh); o += n * k {
					HalfGemmNT(BF16, 1, n, k, x, k, wh[o:], k, 0, c, n)
				}
			}, float64(len(wh) / (n * k) * n * k * 2)},
			kind{isa + "-f16", avx, func() {
				for o := 0; o+n*k <= len(wh); o += n * k {
					HalfGemmNT(F16, 1, n, k, x, k, wh[o:], k, 0, c, n)
				}
			}, float64(len(wh) / (n * k) * n * k * 2)})
	}
	secs := make([][2]float64, len(kinds))
	var tProbe float64
	b.ResetTimer()
	for it := range b.N {
		s := time.Now()
		SumParallel(probe)
		tProbe += time.Since(s).Seconds()
		for i, kd := range kinds {
			haveAVX512 = kd.avx
			for o := range 2 {
				order := (o + it) % 2
				SetRowOrder(order == 1)
				s := time.Now()
				kd.run()
				secs[i][order] += time.Since(s).Seconds()
			}
		}
	}
	haveAVX512 = h5
	b.ReportMetric(float64(len(probe)*4)*float64(b.N)/tProbe/1e9, "readGB/s")
	for i, kd := range kinds {
		lock, row := kd.bytes*float64(b.N)/secs[i][0], kd.bytes*float64(b.N)/secs[i][1]
		b.ReportMetric(lock/1e9, kd.name+"-lock-GB/s")
		b.ReportMetric(row/1e9, kd.name+"-row-GB/s")
		b.ReportMetric(row/lock, kd.name+"-row/lock")
	}
}

// streamBuffers makes the streaming benchmarks' buffers: a read-bandwidth
// probe of probeBytes, the same weight values as float32 and BF16 in
// weightBytes each, an input of k ones and an output of n.
func streamBuffers(probeBytes, weightBytes, n, k int) (probe, wf []float32, wh []uint16, x, c []float32) {
	probe = hugemem.Make[float32](probeBytes / 4)
	for i := range probe {
		probe[i] = 1
	}
	wf = hugemem.Make[float32](weightBytes / 4)
	wh = hugemem.Make[uint16](weightBytes / 2)
	for i := range wf {
		wf[i] = float32(i%13) * 0.01
	}
	for i := range wh {
		wh[i] = safetensors.F32ToBF16(float32(i%13) * 0.01)
	}
	x = make([]float32, k)
	for i := range x {
		x[i] = 1
	}
	return probe, wf, wh, x, make([]float32, n)
}

// BenchmarkStreamPrefetch compares the one-row decode kernels' prefetch
// distances (SetPrefetch: none, and the calibration's candidates) in row
// order on 128 MiB of weights ([3072, 576] matrices, as
// BenchmarkGemvStream), float32 and BF16, on this machine's kernels
// (AVX-512, else AVX2): each iteration runs every distance once in a
// fresh random order after the read-bandwidth probe, and the report gives
// each distance's weight GB/s and the median over iterations of its speed
// against the default's — the calibration's measure, outside a model.
func BenchmarkStreamPrefetch(b *testing.B) {
	const bytes = 128 << 20
	const n, k = 3072, 576
	probe, wf, wh, x, c := streamBuffers(2*bytes, bytes, n, k)
	defer fixDecode()()
	dists := append([]int{0}, prefetchCands...)
	kinds := []struct {
		name  string
		run   func()
		bytes float64
	}{
		{"f32", func() {
			for o := 0; o+n*k <= len(wf); o += n * k {
				GemvNT(1, n, k, x, k, wf[o:], k, 0, c, n)
			}
		}, float64(len(wf) / (n * k) * n * k * 4)},
		{"bf16", func() {
			for o := 0; o+n*k <= len(wh); o += n * k {
				HalfGemmNT(BF16, 1, n, k, x, k, wh[o:], k, 0, c, n)
			}
		}, float64(len(wh) / (n * k) * n * k * 2)},
	}
	r := rand.New(rand.NewPCG(3, 4))
	secs := make([][]float64, len(kinds)) // per kind and distance: seconds
	ratios := make([][][]float64, len(kinds))
	for i := range kinds {
		secs[i] = make([]float64, len(dists))
		ratios[i] = make([][]float64, len(dists))
	}
	var tProbe float64
	b.ResetTimer()
	for range b.N {
		s := time.Now()
		SumParallel(probe)
		tProbe += time.Since(s).Seconds()
		for i, kd := range kinds {
			t := make([]float64, len(dists))
			for _, d := range r.Perm(len(dists)) {
				SetPrefetch(Prefetch{Half: dists[d], Quant: defaultPrefetch.Quant, Repacked: defaultPrefetch.Repacked})
				s := time.Now()
				kd.run()
				t[d] = time.Since(s).Seconds()
				secs[i][d] += t[d]
			}
			for d := range dists {
				ratios[i][d] = append(ratios[i][d], t[slices.Index(dists, defaultPrefetch.Half)]/t[d])
			}
		}
	}
	b.ReportMetric(float64(len(probe)*4)*float64(b.N)/tProbe/1e9, "readGB/s")
	for i, kd := range kinds {
		for d, dist := range dists {
			name := fmt.Sprintf("%s-pf%dK", kd.name, dist>>10)
			b.ReportMetric(kd.bytes*float64(b.N)/secs[i][d]/1e9, name+"-GB/s")
			slices.Sort(ratios[i][d])
			b.ReportMetric(ratios[i][d][len(ratios[i][d])/2], name+"-vs-default")
		}
	}
}
