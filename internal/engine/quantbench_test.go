package engine

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"flywheel/internal/engine/kernels"
	"flywheel/internal/hugemem"
)

var (
	benchQuantOnce                        sync.Once
	benchQ41Model, benchQ80M, benchQ41Row *Model
)

// models135MQuant are model135M's weights quantized as the real
// SmolLM2-135M-Instruct.Q4_1.gguf stores them (projections Q4_1, the tied
// embedding Q8_0) and all in Q8_0; q41row is q41 with its Q4_1 matrices
// left in the file's row layout (NewModel holds them in the four-row
// layout), the other side of issue 22's A/B.
func models135MQuant(b *testing.B) (q41, q80, q41row *Model) {
	m := model135M(b)
	benchQuantOnce.Do(func() {
		w8 := m.Weights.ToQuant(kernels.Q8_0)
		w4, w4row := m.Weights.ToQuant(kernels.Q4_1), m.Weights.ToQuant(kernels.Q4_1)
		w4.Embed, w4.LMHead = w8.Embed, w8.LMHead
		w4row.Embed, w4row.LMHead = w8.Embed, w8.LMHead
		benchQ41Model = NewModel("bench/smollm2-135m-random-q4_1", m.Config, w4, nil, nil)
		benchQ80M = NewModel("bench/smollm2-135m-random-q8_0", m.Config, w8, nil, nil)
		net, err := NewNet[float32](m.Config, w4row)
		if err != nil {
			b.Fatal(err)
		}
		benchQ41Row = &Model{ID: "bench/smollm2-135m-random-q4_1-rows", Config: m.Config, Weights: w4row, net: net}
	})
	return benchQ41Model, benchQ80M, benchQ41Row
}

// BenchmarkQuantDecode135M measures, interleaved in one run, the read
// bandwidth (probeBytes, all cores) and batch-1 decode of the SmolLM2-135M
// shape (random weights, 128-token context) with Q4_1 projections and a
// Q8_0 tied embedding (the layout of the real Q4_1 file) and with all
// matrices Q8_0, and reports tok/s and the fraction of the bandwidth limit
// (quantized weight bytes per token / read bandwidth), and the same with
// the KV cache's bytes that a step reads as well (kv-MB, "-of-limit-kv":
// at this context ~7 % of the Q4_1 weights, read from memory each step
// because the weights' stream evicts it from the caches); and the Q4_1
// model's decode of 8 sequences at once (tok/s summed over them); and
// the Q4_1 model with its matrices in the file's row layout (q4_1-rows,
// batch 1 and 8: the row-layout kernels, against the four-row layout's).
func BenchmarkQuantDecode135M(b *testing.B) {
	q41, q80, q41row := models135MQuant(b)
	w41, w80 := float64(weightBytes(q41.Weights)), float64(weightBytes(q80.Weights))
	probe := newBWProbe()
	s41, s80, s8, srow := prefilled(b, q41, 1), prefilled(b, q80, 1), prefilled(b, q41, 8), prefilled(b, q41row, 1)
	s8row := prefilled(b, q41row, 8)
	const steps = 32
	var d41, d80, d8, drow, d8row float64
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		probe.measure()
		d41 += decodeSteps(b, q41, s41, steps)
		d80 += decodeSteps(b, q80, s80, steps)
		d8 += decodeSteps(b, q41, s8, steps)
		drow += decodeSteps(b, q41row, srow, steps)
		d8row += decodeSteps(b, q41row, s8row, steps)
	}
	bw := probe.rate()
	t41, t80, trow := float64(b.N*steps)/d41, float64(b.N*steps)/d80, float64(b.N*steps)/drow
	b.ReportMetric(bw/1e9, "readGB/s")
	b.ReportMetric(w41/1e6, "q4_1-MB")
	b.ReportMetric(t41, "q4_1-tok/s")
	b.ReportMetric(t41/(bw/w41), "q4_1-of-limit")
	b.ReportMetric(trow, "q4_1-rows-tok/s")
	b.ReportMetric(trow/(bw/w41), "q4_1-rows-of-limit")
	b.ReportMetric(w80/1e6, "q8_0-MB")
	b.ReportMetric(t80, "q8_0-tok/s")
	b.ReportMetric(t80/(bw/w80), "q8_0-of-limit")
	kv := kvBytesPerToken(*q41.Config, steps)
	b.ReportMetric(kv/1e6, "kv-MB")
	b.ReportMetric(t41/(bw/(w41+kv)), "q4_1-of-limit-kv")
	b.ReportMetric(t80/(bw/(w80+kv)), "q8_0-of-limit-kv")
	b.ReportMetric(float64(8*b.N*steps)/d8, "q4_1-b8-tok/s")
	b.ReportMetric(float64(8*b.N*steps)/d8row, "q4_1-rows-b8-tok/s")
}

// bwProbe accumulates read-bandwidth measurements (readBandwidth over
// probeBytes) interleaved with the figures they bound.
type bwProbe struct {
	buf         []float32
	bytes, secs float64
}

func newBWProbe() *bwProbe {
	p := &bwProbe{buf: hugemem.Make[float32](probeBytes / 4)}
	for i := range p.buf {
		p.buf[i] = 1
	}
	return p
}

func (p *bwProbe) measure() {
	n := 4 * float64(len(p.buf))
	p.bytes += n
	p.secs += n / readBandwidth(p.buf)
}

// rate is the mean bandwidth in bytes/s.
func (p *bwProbe) rate() float64 { return p.bytes / p.secs }

// BenchmarkDecodeModelFiles decodes batch 1 (128-token context) with the
// models named in FLYWHEEL_BENCH_MODELS (comma-separated paths that Load
// accepts: a model folder, or a GGUF file where the loader reads them),
// interleaved with the read-bandwidth probe, and reports each one's tok/s
// and fraction of the bandwidth limit (weight bytes per token / read
// bandwidth). Skipped when the variable is unset. With
// FLYWHEEL_BENCH_CONTEXT=n the decoding sequences start from n-token
// contexts instead (as llama-bench's -d n), and each model's fraction of
// the limit counting the KV cache a step reads too (of-limit-kv) is
// reported beside the weights-only one. With
// FLYWHEEL_BENCH_LORA=r it also decodes each from a checkpoint (a rank-r
// adapter on every module, float32 factors, as RL samples from) and
// reports its tok/s and its speed over the base's. With
// FLYWHEEL_BENCH_BATCH=n it also decodes n sequences at once (each from
// its own 128-token context) and reports their tokens per second, and
// with FLYWHEEL_BENCH_PREFILL=t it runs a t-token prompt through an empty
// sequence and reports the prompt's tokens per second.
func BenchmarkDecodeModelFiles(b *testing.B) {
	env := os.Getenv("FLYWHEEL_BENCH_MODELS")
	if env == "" {
		b.Skip("FLYWHEEL_BENCH_MODELS not set")
	}
	rank := envCount(b, "FLYWHEEL_BENCH_LORA")
	ctx := envCount(b, "FLYWHEEL_BENCH_CONTEXT")
	if ctx == 0 {
		ctx = benchContext
	}
	batch, prompt := envCount(b, "FLYWHEEL_BENCH_BATCH"), envCount(b, "FLYWHEEL_BENCH_PREFILL")
	var ms []*Model
	var seqs, lseqs, bseqs [][]*Seq
	var pseqs []*Seq  // FLYWHEEL_BENCH_PREFILL: a sequence for the prompt,
	var ptoks [][]int // and the prompt
	for _, p := range strings.Split(env, ",") {
		m, err := Load(p)
		if err != nil {
			b.Fatal(err)
		}
		ms = append(ms, m)
		seqs = append(seqs, prefilledAt(b, m, 1, nil, ctx))
		if rank > 0 {
			ad, err := NewAdapter(m.Config, LoRAConfig{Rank: rank, Alpha: 2 * float64(rank), TargetModules: AllModules}, 1)
			if err != nil {
				b.Fatal(err)
			}
			randomizeB(ad, 2)
			lseqs = append(lseqs, prefilledAt(b, m, 1, ad, ctx))
		}
		if batch > 0 {
			bseqs = append(bseqs, prefilledAt(b, m, batch, nil, ctx))
		}
		if prompt > 0 {
			pseqs = append(pseqs, m.NewSeq(nil))
			ptoks = append(ptoks, randTokens(prompt, m.Config.VocabSize, 7))
		}
	}
	probe := newBWProbe()
	const steps = 32
	secs, lsecs, bsecs, psecs := make([]float64, len(ms)), make([]float64, len(ms)), make([]float64, len(ms)), make([]float64, len(ms))
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		probe.measure()
		for i, m := range ms {
			secs[i] += decodeSteps(b, m, seqs[i], steps)
			if rank > 0 {
				lsecs[i] += decodeSteps(b, m, lseqs[i], steps)
			}
			if batch > 0 {
				bsecs[i] += decodeSteps(b, m, bseqs[i], steps)
			}
			if prompt > 0 {
				psecs[i] += prefillSecs(b, m, pseqs[i], ptoks[i])
			}
		}
	}
	bw := probe.rate()
	b.ReportMetric(bw/1e9, "readGB/s")
	for i, m := range ms {
		tps := float64(b.N*steps) / secs[i]
		name := fmt.Sprintf("m%d", i)
		b.ReportMetric(float64(weightBytes(m.Weights))/1e6, name+"-MB")
		b.ReportMetric(tps, name+"-tok/s")
		b.ReportMetric(tps/(bw/float64(weightBytes(m.Weights))), name+"-of-limit")
		if ctx != benchContext {
			kv := kvBytesAt(*m.Config, ctx, steps)
			b.ReportMetric(tps/(bw/(float64(weightBytes(m.Weights))+kv)), name+"-of-limit-kv")
		}
		if rank > 0 {
			ltps := float64(b.N*steps) / lsecs[i]
			b.ReportMetric(ltps, name+"-lora-tok/s")
			b.ReportMetric(ltps/tps, name+"-lora/base")
		}
		if batch > 0 {
			b.ReportMetric(float64(batch*b.N*steps)/bsecs[i], fmt.Sprintf("%s-b%d-tok/s", name, batch))
		}
		if prompt > 0 {
			b.ReportMetric(float64(prompt*b.N)/psecs[i], name+"-prefill-tok/s")
		}
	}
}

// envCount is the positive count in the environment variable key, 0 when
// it is unset; anything else fails the benchmark.
func envCount(b *testing.B, key string) int {
	v := os.Getenv(key)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive count", key, v)
	}
	return n
}

// prefillSecs runs the prompt toks through s (of m) from its start and
// returns the seconds it took.
func prefillSecs(b *testing.B, m *Model, s *Seq, toks []int) float64 {
	s.Reset()
	start := time.Now()
	if _, err := m.Forward([]*Seq{s}, [][]int{toks}); err != nil {
		b.Fatal(err)
	}
	return time.Since(start).Seconds()
}

// kvBytesPerToken is the float32 KV cache a decode step of a sequence
// reads, averaged over the steps of decodeSteps from benchContext: every
// layer's keys and values of the positions attended (the context plus the
// new token).
func kvBytesPerToken(c Config, steps int) float64 { return kvBytesAt(c, benchContext, steps) }

// kvBytesAt is kvBytesPerToken from a ctx-token context: step s attends
// ctx+s+1 positions, at most the model's sliding window.
func kvBytesAt(c Config, ctx, steps int) float64 {
	var pos int
	for s := range steps {
		n := ctx + s + 1
		if c.SlidingWindow > 0 {
			n = min(n, c.SlidingWindow)
		}
		pos += n
	}
	return float64(c.NumLayers*2*c.NumKVHeads*c.HeadDim*4) * float64(pos) / float64(steps)
}
