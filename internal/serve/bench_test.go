package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"flywheel/internal/engine"
	"flywheel/internal/engine/kernels"
	"flywheel/internal/httpx"
)

// streamResult is what one streamed request saw.
type streamResult struct {
	start, first, end time.Time
	tokens            int
}

// streamOnce posts a streaming request and counts logprob entries (one per
// token) as they arrive.
func streamOnce(ctx context.Context, url, body string) (streamResult, error) {
	res := streamResult{start: time.Now()}
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return res, fmt.Errorf("status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: {") {
			continue
		}
		var c ChatCompletionChunk
		if err := json.Unmarshal([]byte(line[6:]), &c); err != nil {
			return res, err
		}
		for _, ch := range c.Choices {
			if ch.Logprobs != nil && len(ch.Logprobs.Content) > 0 {
				if res.tokens == 0 {
					res.first = time.Now()
				}
				res.tokens += len(ch.Logprobs.Content)
			}
		}
	}
	res.end = time.Now()
	return res, sc.Err()
}

func benchServer(b testing.TB, model *engine.Model, opts Options) (*Server, *httptest.Server) {
	reg := testRegistry(b)
	if model != nil {
		reg.Put(model)
	}
	srv := New(reg, nil, nil, opts)
	mux := http.NewServeMux()
	srv.Register(httpx.NewRoutes(mux))
	hs := httptest.NewServer(authMiddleware(mux))
	b.Cleanup(func() { hs.Close(); srv.Close() })
	return srv, hs
}

var (
	smolOnce  sync.Once
	smolModel *engine.Model
)

// smolLM2Shape is a random-weight model of SmolLM2-135M's shape with the
// tiny model's tokenizer and chat template (token ids beyond the tiny
// vocabulary decode to nothing; logprobs still count them).
func smolLM2Shape(b testing.TB) *engine.Model {
	smolOnce.Do(func() {
		tinyM, err := testRegistry(b).Get(tinyID)
		if err != nil {
			b.Fatal(err)
		}
		cfg := &engine.Config{Architecture: engine.ArchLlama, ModelType: "llama", HiddenSize: 576, IntermediateSize: 1536,
			NumLayers: 30, NumHeads: 9, NumKVHeads: 3, HeadDim: 64, VocabSize: 49152, MaxPositionEmbeddings: 2048,
			RMSNormEps: 1e-5, RopeTheta: 100000, TieWordEmbeddings: true, BOSTokenID: -1, EOSTokenIDs: tinyM.EOS()}
		smolModel = engine.NewModel("bench/smollm2-135m-shape", cfg, engine.RandomWeights(cfg, 1), tinyM.Tokenizer, tinyM.Template)
	})
	return smolModel
}

func median(ds []time.Duration) time.Duration {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

// runStreams runs c concurrent streams of n tokens each and returns the
// aggregate decode tokens/s (tokens after each stream's first, over the
// window from the first first-token to the last end), wall tokens/s and the
// median time to first token.
func runStreams(b testing.TB, url, model string, c, n int) (decodeTPS, wallTPS float64, ttft, wall time.Duration) {
	body := fmt.Sprintf(`{"model":%q,"max_tokens":%d,"ignore_eos":true,"stream":true,"logprobs":true,"temperature":0,"messages":[{"role":"user","content":"Benchmark the decode loop of this server, please."}]}`, model, n)
	results := make([]streamResult, c)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := streamOnce(context.Background(), url, body)
			if err != nil {
				b.Error(err)
			}
			results[i] = r
		}()
	}
	wg.Wait()
	end := time.Now()
	var firsts []time.Duration
	lastFirst := start
	decodeTokens, total := 0, 0
	for _, r := range results {
		firsts = append(firsts, r.first.Sub(r.start))
		if r.first.After(lastFirst) {
			lastFirst = r.first
		}
		decodeTokens += r.tokens - 1
		total += r.tokens
	}
	if total != c*n {
		b.Fatalf("got %d tokens, want %d", total, c*n)
	}
	return float64(decodeTokens) / end.Sub(lastFirst).Seconds(), float64(total) / end.Sub(start).Seconds(), median(firsts), end.Sub(start)
}

// BenchmarkDecodeStreams measures aggregate decode tokens/s and time to
// first token at 1, 4 and 16 concurrent streams on the SmolLM2-135M shape.
// Run with -benchtime=1x.
func BenchmarkDecodeStreams(b *testing.B) {
	m := smolLM2Shape(b)
	srv, hs := benchServer(b, m, Options{})
	b.Logf("kernels: %s", kernels.Describe(kernels.Default()))
	runStreams(b, hs.URL, m.ID, 1, 4) // warm up
	for _, c := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("streams=%d", c), func(b *testing.B) {
			var dec, wallTPS float64
			var ttft, wall time.Duration
			s0 := srv.Stats(m.ID)
			for i := 0; i < b.N; i++ {
				var w time.Duration
				dec, wallTPS, ttft, w = runStreams(b, hs.URL, m.ID, c, 64)
				wall += w
			}
			s1 := srv.Stats(m.ID)
			b.ReportMetric(dec, "decode_tok/s")
			b.ReportMetric(wallTPS, "wall_tok/s")
			b.ReportMetric(float64(ttft.Microseconds())/1000, "ttft_ms")
			// share of the wall time the scheduler spent in engine forward
			// passes, and in its own sampling and bookkeeping
			b.ReportMetric(100*float64(s1.Forward-s0.Forward)/float64(wall), "%forward")
			b.ReportMetric(100*float64((s1.Compute-s0.Compute)-(s1.Forward-s0.Forward))/float64(wall), "%sample+book")
		})
	}
}

// BenchmarkServerOverhead measures the wall time of a one-token request on
// the tiny model minus the scheduler's compute time (forward passes and
// sampling): HTTP on loopback, JSON, template rendering, tokenization,
// queueing and response assembly.
func BenchmarkServerOverhead(b *testing.B) {
	srv, hs := benchServer(b, nil, Options{})
	body := `{"model":"flywheel/tiny","max_tokens":1,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say one word."}]}`
	client := &http.Client{}
	post := func() {
		req, _ := http.NewRequest("POST", hs.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testKey)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var cc ChatCompletion
		json.NewDecoder(resp.Body).Decode(&cc)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	post()
	c0 := srv.Stats(tinyID).Compute
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		post()
	}
	wall := time.Since(start)
	compute := srv.Stats(tinyID).Compute - c0
	b.ReportMetric(float64(wall.Microseconds())/float64(b.N), "wall_us/req")
	b.ReportMetric(float64((wall-compute).Microseconds())/float64(b.N), "overhead_us/req")
}

// TestLoadThroughput is a bounded loopback load test: 48 requests from 12
// concurrent clients on the tiny model; it reports requests/s and tokens/s.
func TestLoadThroughput(t *testing.T) {
	_, hs := benchServer(t, nil, Options{})
	const clients, perClient, tokens = 12, 4, 32
	body := fmt.Sprintf(`{"model":"flywheel/tiny","max_tokens":%d,"ignore_eos":true,"stream":true,"logprobs":true,"messages":[{"role":"user","content":"load test"}]}`, tokens)
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	start := time.Now()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perClient; i++ {
				r, err := streamOnce(context.Background(), hs.URL, body)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				total += r.tokens
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	if total != clients*perClient*tokens {
		t.Fatalf("%d tokens, want %d", total, clients*perClient*tokens)
	}
	t.Logf("load: %d requests in %v: %.1f req/s, %.0f tokens/s", clients*perClient, el.Round(time.Millisecond), float64(clients*perClient)/el.Seconds(), float64(total)/el.Seconds())
}

// BenchmarkDecodeStreamsInterleaved alternates rounds at 1, 4 and 16
// concurrent streams (32 tokens each) so that all three see the same
// background load, and reports the aggregate decode tokens/s of each, the
// 16-vs-1 ratio and the median time to first token at 1 and 16 streams.
// Each b.N iteration is one round of the three; run with -benchtime=3x.
func BenchmarkDecodeStreamsInterleaved(b *testing.B) {
	m := smolLM2Shape(b)
	_, hs := benchServer(b, m, Options{})
	runStreams(b, hs.URL, m.ID, 1, 4) // warm up
	conc := []int{1, 4, 16}
	tokens := make([]float64, len(conc))
	secs := make([]float64, len(conc))
	ttfts := make([][]time.Duration, len(conc))
	for i := 0; i < b.N; i++ {
		for k, c := range conc {
			dec, _, ttft, _ := runStreams(b, hs.URL, m.ID, c, 32)
			// decode tokens and the window they took, summed over rounds
			n := float64(c * 31)
			tokens[k] += n
			secs[k] += n / dec
			ttfts[k] = append(ttfts[k], ttft)
		}
	}
	for k, c := range conc {
		b.ReportMetric(tokens[k]/secs[k], fmt.Sprintf("tok/s@%d", c))
	}
	b.ReportMetric((tokens[2]/secs[2])/(tokens[0]/secs[0]), "x16vs1")
	b.ReportMetric(float64(median(ttfts[0]).Microseconds())/1000, "ttft@1_ms")
	b.ReportMetric(float64(median(ttfts[2]).Microseconds())/1000, "ttft@16_ms")
}

// BenchmarkChatN8 measures time to last token of one non-streamed request
// with n=8 choices of 8 tokens each on a ≈300-token prompt, on the
// SmolLM2-135M shape: the prompt is prefilled once and cloned into the
// other seven choices.
func BenchmarkChatN8(b *testing.B) {
	_, hs := benchServer(b, smolLM2Shape(b), Options{})
	prompt := strings.Repeat("Sample a group of completions for reinforcement learning. ", 25)
	body := fmt.Sprintf(`{"model":"bench/smollm2-135m-shape","n":8,"seed":1,"max_tokens":8,"ignore_eos":true,"temperature":1,"messages":[{"role":"user","content":%q}]}`, prompt)
	post := func() time.Duration {
		t0 := time.Now()
		req, _ := http.NewRequest("POST", hs.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var out ChatCompletion
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || len(out.Choices) != 8 {
			b.Fatalf("status %d, %d choices, %v", resp.StatusCode, len(out.Choices), err)
		}
		b.ReportMetric(float64(out.Usage.PromptTokens), "prompt-tokens")
		return time.Since(t0)
	}
	post() // warm up
	var ds []time.Duration
	b.ResetTimer()
	for range b.N {
		ds = append(ds, post())
	}
	b.ReportMetric(float64(median(ds).Milliseconds()), "ms-last-token")
}
