package serve

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"flywheel/internal/engine"
	"flywheel/internal/engine/tokenizer"
)

// BenchmarkLoRAStreamVsEngine is issue 24's HTTP figure: in one run,
// alternating so both see the same machine, one stream over
// /v1/chat/completions (temperature 1, logprobs on, 64 tokens) from a
// trained checkpoint (a rank-16 adapter on every module of the
// SmolLM2-135M shape, float32, over GPT-2's real vocabulary, saved and
// served as a checkpoint is) and the
// engine's own decode of the same model and adapter (Forward of one token
// at a time, as the engine benchmarks measure). It reports both decode
// tok/s (the stream's tokens after its first, over the time from first to
// last) and their ratio.
func BenchmarkLoRAStreamVsEngine(b *testing.B) {
	shape := smolLM2Shape(b)
	// A real vocabulary (GPT-2's 50257 tokens cover the shape's 49152), so
	// the stream detokenises real token bytes.
	tok, err := tokenizer.Load(filepath.Join(tokTestdata, "gpt2.tokenizer.json.gz"))
	if err != nil {
		b.Fatal(err)
	}
	m := engine.NewModel("bench/smollm2-135m-gpt2-vocab", shape.Config, shape.Weights, tok, shape.Template)
	reg := testRegistry(b)
	reg.Put(m)
	env := newTestEnvWith(b, reg, Options{})
	ad, err := engine.NewAdapter(m.Config, engine.LoRAConfig{Rank: 16, Alpha: 32, TargetModules: engine.AllModules}, 1)
	if err != nil {
		b.Fatal(err)
	}
	for _, mods := range ad.Layers {
		for _, p := range mods {
			for i := range p.B {
				p.B[i] = float32((i%13)-6) * 0.01
			}
		}
	}
	dir := filepath.Join(b.TempDir(), "step1")
	if err := ad.Save(dir, m.ID); err != nil {
		b.Fatal(err)
	}
	env.res.add("alice/proj/m:step1", Target{Name: "alice/proj/m", BaseModel: m.ID, AdapterDir: dir, Step: 1, Entity: "alice", Project: "proj", ModelName: "m"})
	const n = 64
	body := fmt.Sprintf(`{"model":"alice/proj/m:step1","max_tokens":%d,"ignore_eos":true,"stream":true,"logprobs":true,"top_logprobs":0,"temperature":1,"messages":[{"role":"user","content":"Benchmark the decode loop of this server, please."}]}`, n)
	if _, err := streamOnce(context.Background(), env.http.URL, body); err != nil { // loads the adapter
		b.Fatal(err)
	}
	seq := m.NewSeq(ad)
	prompt := make([]int, 40)
	for i := range prompt {
		prompt[i] = i + 3
	}
	var httpSecs, engSecs float64
	var httpToks int
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		r, err := streamOnce(context.Background(), env.http.URL, body)
		if err != nil {
			b.Fatal(err)
		}
		if r.tokens != n {
			b.Fatalf("stream gave %d tokens, want %d", r.tokens, n)
		}
		httpSecs += r.end.Sub(r.first).Seconds()
		httpToks += r.tokens - 1
		seq.Reset()
		if _, err := m.Forward([]*engine.Seq{seq}, [][]int{prompt}); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for k := range n - 1 {
			if _, err := m.Forward([]*engine.Seq{seq}, [][]int{{k + 5}}); err != nil {
				b.Fatal(err)
			}
		}
		engSecs += time.Since(start).Seconds()
	}
	h, e := float64(httpToks)/httpSecs, float64(b.N*(n-1))/engSecs
	b.ReportMetric(h, "http-tok/s")
	b.ReportMetric(e, "engine-tok/s")
	b.ReportMetric(h/e, "http/engine")
}
