package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"flywheel/internal/cputime"
	"flywheel/internal/hugemem"
)

// benchBackends lists the backends to benchmark: naive, go, and openblas
// when its shared library loads.
func benchBackends(b *testing.B, withNaive bool) []Backend {
	bs := []Backend{Go{}}
	if withNaive {
		bs = append([]Backend{Naive{}}, bs...)
	}
	if ob, err := LoadOpenBLAS(); err == nil {
		bs = append(bs, ob)
	} else {
		b.Logf("openblas: %v", err)
	}
	return bs
}

// BenchmarkSgemm1024 measures C = A·B at 1024x1024x1024 and reports GFLOP/s.
func BenchmarkSgemm1024(b *testing.B) {
	const n = 1024
	r := rand.New(rand.NewPCG(1, 1))
	a, bm, c := randSlice(r, n*n), randSlice(r, n*n), make([]float32, n*n)
	for _, be := range benchBackends(b, false) {
		b.Run(be.Name(), func(b *testing.B) {
			for b.Loop() {
				be.Sgemm(false, false, n, n, n, 1, a, n, bm, n, 0, c, n)
			}
			b.ReportMetric(2*n*n*n*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkSgemmKernels runs the Go backend at 1024^3 with each micro-kernel
// the CPU supports (avx512 6x32, avx2 6x16, pure go only with -short off).
func BenchmarkSgemmKernels(b *testing.B) {
	const n = 1024
	r := rand.New(rand.NewPCG(1, 1))
	a, bm, c := randSlice(r, n*n), randSlice(r, n*n), make([]float32, n*n)
	h2, h5 := haveAVX2, haveAVX512
	defer func() { haveAVX2, haveAVX512 = h2, h5 }()
	for _, v := range []struct {
		name   string
		h2, h5 bool
	}{{"avx512", true, true}, {"avx2", true, false}, {"purego", false, false}} {
		if (v.h2 && !h2) || (v.h5 && !h5) {
			continue
		}
		b.Run(v.name, func(b *testing.B) {
			haveAVX2, haveAVX512 = v.h2, v.h5
			for b.Loop() {
				Go{}.Sgemm(false, false, n, n, n, 1, a, n, bm, n, 0, c, n)
			}
			b.ReportMetric(2*n*n*n*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// shape is one matrix product for the shape benchmarks.
type shape struct {
	name    string
	ta, tb  bool
	m, n, k int
}

// BenchmarkSgemmShapes covers the transposed layouts the engine and trainer use.
func BenchmarkSgemmShapes(b *testing.B) {
	benchShapes(b, benchBackends(b, false), []shape{
		{"", false, true, 128, 1536, 576}, // prefill of 128 tokens, x·Wᵀ
		{"", false, false, 128, 576, 1536},
		{"", true, false, 576, 1536, 128}, // weight gradient dW = dYᵀ·X
		{"", false, true, 1024, 1024, 1024},
	})
}

// benchShapes runs each shape on each backend and reports GFLOP/s.
func benchShapes(b *testing.B, bes []Backend, shapes []shape) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range shapes {
		a := randSlice(r, s.m*s.k)
		bm := randSlice(r, s.k*s.n)
		c := make([]float32, s.m*s.n)
		lda, ldb := s.k, s.n
		if s.ta {
			lda = s.m
		}
		if s.tb {
			ldb = s.k
		}
		for _, be := range bes {
			name := fmt.Sprintf("%s/ta=%v,tb=%v,%dx%dx%d", be.Name(), s.ta, s.tb, s.m, s.n, s.k)
			if s.name != "" {
				name = fmt.Sprintf("%s/%s/%dx%dx%d", be.Name(), s.name, s.m, s.n, s.k)
			}
			b.Run(name, func(b *testing.B) {
				cpu0 := cputime.Used().Seconds()
				for b.Loop() {
					be.Sgemm(s.ta, s.tb, s.m, s.n, s.k, 1, a, lda, bm, ldb, 0, c, s.n)
				}
				flop := 2 * float64(s.m*s.n*s.k) * float64(b.N)
				b.ReportMetric(flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				b.ReportMetric(flop/(cputime.Used().Seconds()-cpu0)/1e9, "GFLOP/cpu-s")
			})
		}
	}
}

// BenchmarkGemv measures single-stream decode shapes y = W·x with W [out,in]
// row-major, i.e. Sgemm(false, true, 1, out, in, ...), and reports GB/s of
// weight bytes read.
func BenchmarkGemv(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 2))
	for _, s := range [][2]int{{576, 1536}, {1536, 576}, {49152, 576}} {
		out, in := s[0], s[1]
		w := randSlice(r, out*in)
		x := randSlice(r, in)
		y := make([]float32, out)
		bes := append(benchBackends(b, false), matVecBackend{})
		for _, be := range bes {
			b.Run(fmt.Sprintf("%dx%d/%s", out, in, be.Name()), func(b *testing.B) {
				for b.Loop() {
					be.Sgemm(false, true, 1, out, in, 1, x, in, w, in, 0, y, out)
				}
				b.ReportMetric(4*float64(out*in)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}

// BenchmarkSmallM compares the packed GEMM with the streaming multi-dot path
// for few-row x·Wᵀ products (batched decode, tiny prefill).
func BenchmarkSmallM(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 3))
	const n, k = 1536, 576
	w := randSlice(r, n*k)
	for _, m := range []int{2, 4, 6, 8} {
		x := randSlice(r, m*k)
		y := make([]float32, m*n)
		for _, dot := range []bool{false, true} {
			b.Run(fmt.Sprintf("m=%d/dot=%v", m, dot), func(b *testing.B) {
				defer func(v int) { smallMDot = v }(smallMDot)
				smallMDot = 0
				if dot {
					smallMDot = m
				}
				for b.Loop() {
					Go{}.Sgemm(false, true, m, n, k, 1, x, k, w, k, 0, y, n)
				}
				b.ReportMetric(4*float64(n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}

// matVecBackend routes the GEMV benchmark through MatVec.
type matVecBackend struct{}

func (matVecBackend) Name() string { return "matvec" }
func (matVecBackend) Sgemm(_, _ bool, _, n, k int, _ float32, a []float32, _ int, b []float32, _ int, _ float32, c []float32, _ int) {
	MatVec(c[:n], b, a[:k])
}

// BenchmarkReadBandwidth sums a 256 MiB float32 slice with all cores
// (GOMAXPROCS goroutines) and reports GB/s: the memory read bandwidth the
// engine's decode-speed target is computed from.
func BenchmarkReadBandwidth(b *testing.B) {
	const n = 256 << 20 / 4
	x := hugemem.Make[float32](n)
	for i := range x {
		x[i] = 1
	}
	var sink float32
	for b.Loop() {
		sink += SumParallel(x)
	}
	b.ReportMetric(4*float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
	_ = sink
}

// BenchmarkVec measures the vector helpers at model-sized lengths
// (hidden 576, MLP 1536, vocab 49152), reporting ns per element.
func BenchmarkVec(b *testing.B) {
	r := rand.New(rand.NewPCG(4, 4))
	for _, n := range []int{576, 1536, 49152} {
		x, y, z := randSlice(r, n), randSlice(r, n), make([]float32, n)
		ops := []struct {
			name string
			f    func()
		}{
			{"Dot", func() { _ = Dot(x, y) }},
			{"Axpy", func() { Axpy(0.5, x, z) }},
			{"Add", func() { Add(z, x) }},
			{"RMSNorm", func() { RMSNorm(z, x, y, 1e-5) }},
			{"Softmax", func() { copy(z, x); Softmax(z) }},
			{"SwiGLU", func() { SwiGLU(z, x, y) }},
		}
		for _, op := range ops {
			b.Run(fmt.Sprintf("%s/%d", op.name, n), func(b *testing.B) {
				for b.Loop() {
					op.f()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/elem")
			})
		}
	}
}
