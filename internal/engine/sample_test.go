package engine

import (
	"math"
	"testing"
)

func logits4() []float32 {
	// probabilities 0.5, 0.3, 0.15, 0.05 at temperature 1
	return []float32{float32(math.Log(0.5)), float32(math.Log(0.3)), float32(math.Log(0.15)), float32(math.Log(0.05))}
}

func u64(x uint64) *uint64 { return &x }

func freq(p SamplingParams, logits []float32, n int) []float64 {
	s := NewSampler(p)
	f := make([]float64, len(logits))
	for i := 0; i < n; i++ {
		id, _, _ := s.Sample(logits)
		f[id]++
	}
	for i := range f {
		f[i] /= float64(n)
	}
	return f
}

func near(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	for i := range want {
		if math.Abs(got[i]-want[i]) > tol {
			t.Fatalf("%s: frequencies %v, want %v", what, got, want)
		}
	}
}

func TestSamplerGreedy(t *testing.T) {
	l := []float32{1, 3, 3, -2}
	id, lp, top := NewSampler(SamplingParams{Temperature: 0, TopLogprobs: 2}).Sample(l)
	if id != 1 {
		t.Fatalf("greedy picked %d, want 1 (lowest id of the tie)", id)
	}
	lse := math.Log(math.Exp(1) + 2*math.Exp(3) + math.Exp(-2))
	if math.Abs(float64(lp)-(3-lse)) > 1e-6 {
		t.Fatalf("greedy logprob %v, want %v (temperature-1 log-softmax)", lp, 3-lse)
	}
	if len(top) != 2 || top[0].ID != 1 || top[1].ID != 2 || top[0].Logprob != lp {
		t.Fatalf("top %v", top)
	}
}

func TestSamplerSeeded(t *testing.T) {
	l := make([]float32, 200)
	for i := range l {
		l[i] = float32(math.Sin(float64(i)))
	}
	run := func(seed uint64) []int {
		s := NewSampler(SamplingParams{Temperature: 0.8, TopP: 0.9, TopK: 50, Seed: &seed})
		var out []int
		for i := 0; i < 50; i++ {
			id, _, _ := s.Sample(l)
			out = append(out, id)
		}
		return out
	}
	a, b, c := run(1), run(1), run(2)
	same := true
	for i := range a {
		if a[i] != b[i] {
			t.Fatal("same seed, different tokens")
		}
		same = same && a[i] == c[i]
	}
	if same {
		t.Fatal("different seeds gave identical sequences")
	}
}

func TestSamplerTruncation(t *testing.T) {
	l := logits4()
	const n = 40000
	near(t, "plain", freq(SamplingParams{Temperature: 1, Seed: u64(1)}, l, n), []float64{0.5, 0.3, 0.15, 0.05}, 0.015)
	near(t, "top_k=2", freq(SamplingParams{Temperature: 1, TopK: 2, Seed: u64(2)}, l, n), []float64{0.625, 0.375, 0, 0}, 0.015)
	near(t, "top_k=1", freq(SamplingParams{Temperature: 1, TopK: 1, Seed: u64(3)}, l, 1000), []float64{1, 0, 0, 0}, 0)
	near(t, "top_p=0.7", freq(SamplingParams{Temperature: 1, TopP: 0.7, Seed: u64(4)}, l, n), []float64{0.625, 0.375, 0, 0}, 0.015)
	near(t, "top_p=0.5", freq(SamplingParams{Temperature: 1, TopP: 0.5, Seed: u64(5)}, l, 1000), []float64{1, 0, 0, 0}, 0)
	near(t, "top_p=0.9", freq(SamplingParams{Temperature: 1, TopP: 0.9, Seed: u64(6)}, l, n), []float64{0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}, 0.015)
	near(t, "min_p=0.2", freq(SamplingParams{Temperature: 1, MinP: 0.2, Seed: u64(7)}, l, n), []float64{0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}, 0.015)
	near(t, "min_p=0.7", freq(SamplingParams{Temperature: 1, MinP: 0.7, Seed: u64(8)}, l, 1000), []float64{1, 0, 0, 0}, 0)
	// top_k then top_p on the renormalised top-k: {0.625, 0.375}, top_p 0.6 keeps token 0.
	near(t, "top_k=2,top_p=0.6", freq(SamplingParams{Temperature: 1, TopK: 2, TopP: 0.6, Seed: u64(9)}, l, 1000), []float64{1, 0, 0, 0}, 0)
	// Temperature 2 flattens: p ∝ sqrt(p).
	sq := []float64{math.Sqrt(0.5), math.Sqrt(0.3), math.Sqrt(0.15), math.Sqrt(0.05)}
	var z float64
	for _, v := range sq {
		z += v
	}
	for i := range sq {
		sq[i] /= z
	}
	near(t, "temperature 2", freq(SamplingParams{Temperature: 2, Seed: u64(10)}, l, n), sq, 0.015)
}

func TestSamplerLogprobs(t *testing.T) {
	l := logits4()
	s := NewSampler(SamplingParams{Temperature: 0.5, TopK: 2, TopLogprobs: 3, Seed: u64(1)})
	// The distribution sampled from: softmax(l/0.5), before top-k.
	var z float64
	for _, v := range l {
		z += math.Exp(float64(v) / 0.5)
	}
	for i := 0; i < 20; i++ {
		id, lp, top := s.Sample(l)
		want := float64(l[id])/0.5 - math.Log(z)
		if math.Abs(float64(lp)-want) > 1e-5 {
			t.Fatalf("logprob of %d: %v, want %v", id, lp, want)
		}
		if len(top) != 3 || top[0].ID != 0 || top[1].ID != 1 || top[2].ID != 2 {
			t.Fatalf("top %v", top)
		}
		for _, tl := range top {
			if w := float64(l[tl.ID])/0.5 - math.Log(z); math.Abs(float64(tl.Logprob)-w) > 1e-5 {
				t.Fatalf("top logprob %v, want %v", tl, w)
			}
		}
	}
	// -Inf logits (masked tokens) are never sampled.
	m := []float32{float32(math.Inf(-1)), 0, float32(math.Inf(-1))}
	for i := 0; i < 100; i++ {
		if id, _, _ := NewSampler(SamplingParams{Temperature: 1}).Sample(m); id != 1 {
			t.Fatalf("sampled masked token %d", id)
		}
	}
}

func BenchmarkSampleTopP(b *testing.B) {
	l := make([]float32, 151936)
	for i := range l {
		l[i] = float32(math.Sin(float64(i)*0.37)) * 8
	}
	s := NewSampler(SamplingParams{Temperature: 0.7, TopP: 0.95, Seed: u64(1)})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.Sample(l)
	}
}
