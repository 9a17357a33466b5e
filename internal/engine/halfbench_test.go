package engine

import (
	"sync"
	"testing"
	"time"

	"flywheel/internal/engine/kernels"
)

var (
	benchHalfOnce  sync.Once
	benchHalfModel *Model
)

// model135MBF16 is model135M's weights rounded to BF16 and kept in BF16, as
// a BF16 checkpoint loads.
func model135MBF16(b *testing.B) *Model {
	m := model135M(b)
	benchHalfOnce.Do(func() {
		benchHalfModel = NewModel("bench/smollm2-135m-random-bf16", m.Config, m.Weights.ToHalf(kernels.BF16), nil, nil)
	})
	return benchHalfModel
}

// decodeSteps decodes steps tokens on batch sequences (prefilled, and
// truncated back to their prompts afterwards) and returns the seconds.
func decodeSteps(b *testing.B, m *Model, seqs []*Seq, steps int) float64 {
	toks := make([][]int, len(seqs))
	lens := make([]int, len(seqs))
	for i, s := range seqs {
		toks[i] = []int{i + 1}
		lens[i] = s.Len()
	}
	start := time.Now()
	for range steps {
		if _, err := m.Forward(seqs, toks); err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(start).Seconds()
	for i, s := range seqs {
		s.Truncate(lens[i])
	}
	return el
}

func prefilled(b *testing.B, m *Model, batch int) []*Seq {
	return prefilledWith(b, m, batch, nil)
}

// prefilledWith is prefilled with sequences that use adapter ad.
func prefilledWith(b *testing.B, m *Model, batch int, ad *Adapter) []*Seq {
	return prefilledAt(b, m, batch, ad, benchContext)
}

// prefilledAt is prefilledWith with prompts of ctx tokens.
func prefilledAt(b *testing.B, m *Model, batch int, ad *Adapter, ctx int) []*Seq {
	seqs := make([]*Seq, batch)
	for i := range seqs {
		seqs[i] = m.NewSeq(ad)
		if _, err := m.Forward([]*Seq{seqs[i]}, [][]int{randTokens(ctx, m.Config.VocabSize, uint64(i))}); err != nil {
			b.Fatal(err)
		}
	}
	return seqs
}

// BenchmarkInference135M is the issue-15 benchmark: in one run, interleaved
// so every figure sees the same machine, it measures the read bandwidth
// (probeBytes, all cores), batch-1 decode with float32 and with BF16 weights
// (the SmolLM2-135M shape, random weights, 128-token context), 8-sequence
// decode and a 512-token prefill for both, and batch-1 decode of the BF16
// model with a rank-16 adapter on every module (a checkpoint, as RL samples
// from). It reports decode tok/s against the bandwidth limit (weight bytes
// per token / read bandwidth; with the adapter, its factors' bytes too) for
// each precision and BF16's speed-up over float32.
func BenchmarkInference135M(b *testing.B) {
	benchInference(b, model135M(b), model135MBF16(b), 16)
}

func BenchmarkInference360M(b *testing.B) {
	cfg := smolLM2Config()
	cfg.HiddenSize, cfg.IntermediateSize, cfg.NumLayers, cfg.NumHeads, cfg.NumKVHeads = 960, 2560, 32, 15, 5
	w := RandomWeights(cfg, 1)
	f32 := NewModel("bench/smollm2-360m-random", cfg, w, nil, nil)
	bf := NewModel("bench/smollm2-360m-random-bf16", cfg, w.ToHalf(kernels.BF16), nil, nil)
	benchInference(b, f32, bf, 16)
}

func benchInference(b *testing.B, f32, bf *Model, steps int) {
	wf, wh := float64(weightBytes(f32.Weights)), float64(weightBytes(bf.Weights))
	buf := make([]float32, probeBytes/4)
	for i := range buf {
		buf[i] = 1
	}
	s1f, s1h := prefilled(b, f32, 1), prefilled(b, bf, 1)
	// A checkpoint's adapter, as RL samples from: rank 16 on every module.
	ad, err := NewAdapter(bf.Config, LoRAConfig{Rank: 16, Alpha: 32, TargetModules: AllModules}, 1)
	if err != nil {
		b.Fatal(err)
	}
	randomizeB(ad, 2)
	s1l := prefilledWith(b, bf, 1, ad)
	var wl float64 // the adapter's factor bytes, read every step too
	for _, mods := range ad.Layers {
		for _, p := range mods {
			wl += 4 * float64(len(p.A)+len(p.B))
		}
	}
	s8f, s8h := prefilled(b, f32, 8), prefilled(b, bf, 8)
	const T = 512
	ptoks := randTokens(T, f32.Config.VocabSize, 7)
	pf, ph := f32.NewSeq(nil), bf.NewSeq(nil)
	var bwBytes, bwTime, d1f, d1h, d1l, d8f, d8h, pff, pfh float64
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		bw := readBandwidth(buf)
		bwBytes += 4 * float64(len(buf))
		bwTime += 4 * float64(len(buf)) / bw
		d1f += decodeSteps(b, f32, s1f, steps)
		d1h += decodeSteps(b, bf, s1h, steps)
		d1l += decodeSteps(b, bf, s1l, steps)
		d8f += decodeSteps(b, f32, s8f, steps)
		d8h += decodeSteps(b, bf, s8h, steps)
		pff += prefillSecs(b, f32, pf, ptoks)
		pfh += prefillSecs(b, bf, ph, ptoks)
	}
	bw := bwBytes / bwTime
	tf, th := float64(b.N*steps)/d1f, float64(b.N*steps)/d1h
	b.ReportMetric(bw/1e9, "readGB/s")
	b.ReportMetric(tf, "f32-tok/s")
	b.ReportMetric(tf/(bw/wf), "f32-of-limit")
	b.ReportMetric(th, "bf16-tok/s")
	b.ReportMetric(th/(bw/wh), "bf16-of-limit")
	b.ReportMetric(th/tf, "bf16/f32")
	tl := float64(b.N*steps) / d1l
	b.ReportMetric(tl, "bf16-lora-tok/s")
	b.ReportMetric(tl/(bw/(wh+wl)), "bf16-lora-of-limit")
	b.ReportMetric(float64(8*b.N*steps)/d8f, "f32-b8-tok/s")
	b.ReportMetric(float64(8*b.N*steps)/d8h, "bf16-b8-tok/s")
	b.ReportMetric(float64(b.N*T)/pff, "f32-prefill-tok/s")
	b.ReportMetric(float64(b.N*T)/pfh, "bf16-prefill-tok/s")
}

// BenchmarkDecodeOrder135M compares, interleaved in one run with the read
// bandwidth probe between rounds, the decode kernels' two access orders
// (kernels.SetRowOrder: four weight rows in lockstep, or one row at a time)
// on the SmolLM2-135M shape: batch-1 decode with float32, BF16 and F16
// weights and with Q4_1 and Q8_0 (BenchmarkQuantDecode135M's models), and
// 8-sequence decode with float32 and BF16, whose 4x4 kernels keep the
// lockstep order either way (their row/lock ratio shows the noise). Each
// round runs both orders, alternating which goes first. It reports tok/s per order,
// the row order's speed-up and batch 1's fraction of the bandwidth limit.
func BenchmarkDecodeOrder135M(b *testing.B) {
	f32, bf := model135M(b), model135MBF16(b)
	_, q80, q41 := models135MQuant(b) // Q4_1 in the row layout: its kernels have two orders
	f16 := NewModel("bench/smollm2-135m-random-f16", f32.Config, f32.Weights.ToHalf(kernels.F16), nil, nil)
	type shape struct {
		name string
		m    *Model
		seqs []*Seq
	}
	shapes := []shape{
		{"f32", f32, prefilled(b, f32, 1)},
		{"bf16", bf, prefilled(b, bf, 1)},
		{"f16", f16, prefilled(b, f16, 1)},
		{"q4_1", q41, prefilled(b, q41, 1)},
		{"q8_0", q80, prefilled(b, q80, 1)},
		{"f32-b8", f32, prefilled(b, f32, 8)},
		{"bf16-b8", bf, prefilled(b, bf, 8)},
	}
	defer kernels.SetRowOrder(kernels.RowOrder())
	probe := newBWProbe()
	const steps = 16
	secs := make([][2]float64, len(shapes))
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		probe.measure()
		for i, s := range shapes {
			for o := range 2 {
				order := (o + n) % 2 // 0 lockstep, 1 row at a time
				kernels.SetRowOrder(order == 1)
				secs[i][order] += decodeSteps(b, s.m, s.seqs, steps)
			}
		}
	}
	bw := probe.rate()
	b.ReportMetric(bw/1e9, "readGB/s")
	for i, s := range shapes {
		toks := float64(b.N * steps * len(s.seqs))
		lock, row := toks/secs[i][0], toks/secs[i][1]
		b.ReportMetric(lock, s.name+"-lock-tok/s")
		b.ReportMetric(row, s.name+"-row-tok/s")
		b.ReportMetric(row/lock, s.name+"-row/lock")
		if len(s.seqs) == 1 {
			b.ReportMetric(row/(bw/float64(weightBytes(s.m.Weights))), s.name+"-row-of-limit")
		}
	}
}
