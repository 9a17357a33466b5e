package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"flywheel/internal/engine"
	"flywheel/internal/engine/kernels"
	"flywheel/internal/safetensors"
	"flywheel/internal/store"
)

// BenchmarkHTTPStreamFromCheckpoint is issue 24's HTTP figure measured on
// the real binary: it builds ./cmd/flywheel (or takes FLYWHEEL_BIN), writes
// a Hugging Face folder of the SmolLM2-135M shape (random float32 weights,
// GPT-2's real tokenizer, a ChatML template) into a temp models dir, runs
// `flywheel serve` on a temp data dir (SQLite store, call store recording
// every completion), creates a model with a rank-16 LoRA on every module,
// and trains it one RL step as an RL client does (two answers sampled with
// logprobs, rewards 1 and 0; the real trainer) to get checkpoint step 1.
// Then each round, for the checkpoint and for the base model, one stream
// over /v1/chat/completions (128 tokens, temperature 1, logprobs on) and,
// next to it (alternating which goes first), the engine's own decode
// (Forward of one token at a time, as the engine benchmarks measure) of the
// same folder and the same checkpoint's adapter, loaded in this process,
// after a prompt of the stream's length.
//
// The engine's decode kernels pick their access order per process from a
// short timing at start (kernels/order.go); on a loaded machine two
// processes can pick differently, which is a difference of kernels, not of
// the serving path. The engine side therefore uses the order the server's
// log says it picked (both are logged).
//
// It reports, per side, decode tok/s of the stream (its tokens after the
// first, over the time from first to last token) and of the engine, the
// median over rounds of each round's HTTP/engine ratio, the stream's wall
// tok/s (128 over request to last token), its median time to first token,
// the CPU milliseconds per token of each, and the median ratio of a second
// stream each round with the engine decoding at the same time
// (streamSide.alongside: on a machine shared with other work the two
// then see the same load); each round's figures are logged.
// bench/http_stream.sh runs it and prints the CPU and load.
//
// With FLYWHEEL_HTTP_GGUF naming a .gguf file (the real
// SmolLM2-135M-Instruct.Q4_1.gguf, say), the base model is that file,
// linked into the models dir (its id its file name): the checkpoint is then
// a LoRA on a quantized base, and every decode kernel family the server
// calibrated is set alike in the engine side.
func BenchmarkHTTPStreamFromCheckpoint(b *testing.B) {
	const n = 128
	dir := b.TempDir()
	models := filepath.Join(dir, "models")
	baseID := "bench/smollm2-135m"
	modelDir := filepath.Join(models, filepath.FromSlash(baseID))
	if g := os.Getenv("FLYWHEEL_HTTP_GGUF"); g != "" {
		abs, err := filepath.Abs(g)
		if err != nil {
			b.Fatal(err)
		}
		baseID = filepath.Base(abs)
		modelDir = filepath.Join(models, baseID)
		if err := os.MkdirAll(models, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.Symlink(abs, modelDir); err != nil {
			b.Fatal(err)
		}
	} else {
		writeSmolLM2Folder(b, modelDir)
	}
	bin := os.Getenv("FLYWHEEL_BIN")
	if bin == "" {
		bin = buildBinary(b, dir)
	}
	dataDir := filepath.Join(dir, "data")
	srv := startProcess(b, bin, nil, dataDir, models)
	m := call(b, "POST", srv.url+"/v1/preview/models", map[string]any{
		"project": "bench", "name": "m", "base_model": baseID, "lora": map[string]any{"rank": 16, "alpha": 32}})
	modelID, entity := m["id"].(string), m["entity"].(string)
	prompt := []any{map[string]any{"role": "user", "content": "Name a colour."}}
	sampled := call(b, "POST", srv.url+"/v1/chat/completions", map[string]any{"model": entity + "/bench/m", "messages": prompt,
		"n": 2, "max_tokens": 16, "temperature": 1, "logprobs": true})
	var trajs []any
	for i, ch := range sampled["choices"].([]any) {
		trajs = append(trajs, map[string]any{"reward": float64(1 - i), "messages_and_choices": append(append([]any(nil), prompt...), ch)})
	}
	job := call(b, "POST", srv.url+"/v1/preview/training-jobs", map[string]any{"model_id": modelID,
		"trajectory_groups": []any{map[string]any{"trajectories": trajs}}})
	jobID := job["id"].(string)
	deadline := time.Now().Add(10 * time.Minute)
	for {
		st := call(b, "GET", srv.url+"/v1/preview/training-jobs/"+jobID, nil)
		if s := st["status"].(string); s == "COMPLETED" {
			break
		} else if s == "FAILED" || s == "CANCELLED" || time.Now().After(deadline) {
			b.Fatalf("training job %s: %v\n%s", s, st, srv.out)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The engine side: the same folder and the checkpoint's adapter.
	em, err := engine.Load(modelDir)
	if err != nil {
		b.Fatal(err)
	}
	ad, err := engine.LoadAdapter(store.Layout{DataDir: dataDir}.CheckpointDir(modelID, 1), em.Config)
	if err != nil {
		b.Fatal(err)
	}
	if ad.Config.Rank != 16 || len(ad.Config.TargetModules) != len(engine.AllModules) {
		b.Fatalf("checkpoint adapter %+v, want rank 16 on every module", ad.Config)
	}
	sides := []*streamSide{{name: "lora", model: entity + "/bench/m:step1", ad: ad}, {name: "base", model: baseID}}
	for _, s := range sides { // loads the adapter, calibrates the server's kernels
		r := s.stream(b, srv, n)
		s.promptLen = r.promptTokens
	}
	// The server's calibrated settings, as it logged them, for the engine
	// side too (float32/16-bit weights; a quantized file's four-row
	// layouts and block-quantized rows).
	// (slog quotes a value only when it has spaces: setting=lockstep.)
	sets := regexp.MustCompile(`kernels=("[^"]*"|\S+) setting=("[^"]*"|\S+)`).FindAllStringSubmatch(srv.out.String(), -1)
	if sets == nil {
		b.Fatalf("the server logged no kernel calibration:\n%s", srv.out)
	}
	var logged []string
	for _, set := range sets {
		family, setting := strings.Trim(set[1], `"`), strings.Trim(set[2], `"`)
		if err := kernels.SetDecodeSetting(family, setting); err != nil {
			b.Fatal(err)
		}
		logged = append(logged, fmt.Sprintf("%s: %q", family, setting))
	}
	b.Logf("kernels: the server's calibrated settings %s (used by the engine side too); %s", strings.Join(logged, ", "), kernels.Describe(kernels.Default()))
	for _, s := range sides {
		s.decode(b, em, n)
	}

	b.Run("rounds", func(b *testing.B) {
		for _, s := range sides {
			s.reset()
		}
		for it := 0; it < b.N; it++ {
			for _, s := range sides {
				var r streamTimes
				var e float64
				// Each side's CPU, and the other process's while it waits
				// (the client reading the stream; the idle server), which
				// competes for the same cores.
				streamCPU := func() {
					c0, o0 := procCPU(b, srv.cmd.Process.Pid), procCPU(b, os.Getpid())
					r = s.stream(b, srv, n)
					s.httpCPU += procCPU(b, srv.cmd.Process.Pid) - c0
					s.clientCPU += procCPU(b, os.Getpid()) - o0
				}
				decodeCPU := func() {
					c0, o0 := procCPU(b, os.Getpid()), procCPU(b, srv.cmd.Process.Pid)
					e = s.decode(b, em, n)
					s.engCPU += procCPU(b, os.Getpid()) - c0
					s.idleCPU += procCPU(b, srv.cmd.Process.Pid) - o0
				}
				if it%2 == 0 {
					streamCPU()
					decodeCPU()
				} else {
					decodeCPU()
					streamCPU()
				}
				h := float64(r.tokens-1) / r.end.Sub(r.first).Seconds()
				s.httpSecs += r.end.Sub(r.first).Seconds()
				s.httpToks += r.tokens - 1
				s.wallSecs += r.end.Sub(r.start).Seconds()
				s.ttft = append(s.ttft, r.first.Sub(r.start))
				s.engSecs += e
				s.ratios = append(s.ratios, h/(float64(n-1)/e))
				ch, ce := s.alongside(b, srv, em, n)
				s.together = append(s.together, ch/ce)
				b.Logf("round %d %s: http %.1f tok/s, engine %.1f tok/s, %.2fx; at the same time: http %.1f, engine %.1f, %.2fx (load %s)",
					it+1, s.name, h, float64(n-1)/e, h/(float64(n-1)/e), ch, ce, ch/ce, loadAvg())
			}
		}
		for _, s := range sides {
			h, e := float64(s.httpToks)/s.httpSecs, float64(b.N*(n-1))/s.engSecs
			b.ReportMetric(h, s.name+"-http-tok/s")
			b.ReportMetric(e, s.name+"-engine-tok/s")
			b.ReportMetric(median(s.ratios), s.name+"-http/engine")
			b.ReportMetric(median(s.together), s.name+"-http/engine-together")
			b.ReportMetric(float64(b.N*n)/s.wallSecs, s.name+"-http-wall-tok/s")
			b.ReportMetric(float64(median(s.ttft).Milliseconds()), s.name+"-ttft-ms")
			b.ReportMetric(1e3*s.httpCPU/float64(b.N*n), s.name+"-http-cpu-ms/tok")
			b.ReportMetric(1e3*s.engCPU/float64(b.N*n), s.name+"-engine-cpu-ms/tok")
			b.Logf("%s: CPU of the client during the streams %.2f s, of the idle server during the engine's decodes %.2f s", s.name, s.clientCPU, s.idleCPU)
		}
	})
}

// streamSide is one model of BenchmarkHTTPStreamFromCheckpoint (the
// checkpoint or the base) and its totals over the rounds.
type streamSide struct {
	name, model string
	ad          *engine.Adapter
	promptLen   int // the stream's prompt tokens, prefilled before the engine's decode
	httpSecs    float64
	httpToks    int
	wallSecs    float64
	engSecs     float64
	ttft        []time.Duration
	ratios      []float64
	together    []float64 // each round's ratio with both running at once
	// CPU seconds (user+system) of the server over its streams (prompt,
	// decode, the whole request) and of this process over the engine's
	// prefill and decode: on a machine shared with other work, where wall
	// times swing, the work per token still compares.
	httpCPU, engCPU    float64
	clientCPU, idleCPU float64
}

func (s *streamSide) reset() {
	s.httpSecs, s.httpToks, s.wallSecs, s.engSecs, s.ttft, s.ratios, s.together = 0, 0, 0, 0, nil, nil, nil
	s.httpCPU, s.engCPU, s.clientCPU, s.idleCPU = 0, 0, 0, 0
}

// stream runs one streaming chat completion of n tokens at temperature 1
// with logprobs.
func (s *streamSide) stream(b testing.TB, srv *child, n int) streamTimes {
	body := fmt.Sprintf(`{"model":%q,"max_tokens":%d,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":0,"temperature":1,"messages":[{"role":"user","content":"Benchmark the decode loop of this server, please."}]}`, s.model, n)
	r, err := benchStream(srv.url, body)
	if err != nil {
		b.Fatalf("%v\n%s", err, srv.out)
	}
	if r.tokens != n {
		b.Fatalf("%s: stream gave %d tokens, want %d", s.model, r.tokens, n)
	}
	return r
}

// decode prefills a prompt of the stream's length and returns the seconds
// of n-1 one-token Forward steps, as the engine benchmarks decode.
func (s *streamSide) decode(b testing.TB, m *engine.Model, n int) float64 {
	seq := m.NewSeq(s.ad)
	prompt := make([]int, s.promptLen)
	for i := range prompt {
		prompt[i] = i + 3
	}
	if _, err := m.Forward([]*engine.Seq{seq}, [][]int{prompt}); err != nil {
		b.Fatal(err)
	}
	start := time.Now() // the prefill is in the CPU figure (as in the stream's), not in the decode time
	for k := range n - 1 {
		if _, err := m.Forward([]*engine.Seq{seq}, [][]int{{k + 5}}); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start).Seconds()
}

// alongside runs one stream and, at the same time in this process, the
// engine's decode of the same model (a prompt of the stream's length, then
// one token per step; every 2n tokens it starts over), and returns the tok/s
// of each over the stream's decode window (its first to last token; engine
// steps that end inside it). Both see the same machine at the same moment,
// so other work on it moves both alike; each has about half the cores.
func (s *streamSide) alongside(b testing.TB, srv *child, m *engine.Model, n int) (httpTPS, engineTPS float64) {
	var stop atomic.Bool
	var ends []time.Time
	errc := make(chan error, 1)
	go func() {
		prompt := make([]int, s.promptLen)
		for i := range prompt {
			prompt[i] = i + 3
		}
		seq := m.NewSeq(s.ad)
		for !stop.Load() {
			seq.Reset()
			if _, err := m.Forward([]*engine.Seq{seq}, [][]int{prompt}); err != nil {
				errc <- err
				return
			}
			for k := 0; k < 2*n && !stop.Load(); k++ {
				if _, err := m.Forward([]*engine.Seq{seq}, [][]int{{k + 5}}); err != nil {
					errc <- err
					return
				}
				ends = append(ends, time.Now())
			}
		}
		errc <- nil
	}()
	defer stop.Store(true) // also when the stream fails
	r := s.stream(b, srv, n)
	stop.Store(true)
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	inside := 0
	for _, t := range ends {
		if t.After(r.first) && !t.After(r.end) {
			inside++
		}
	}
	window := r.end.Sub(r.first).Seconds()
	return float64(r.tokens-1) / window, float64(inside) / window
}

// procCPU is the user+system CPU seconds process pid has used
// (/proc/PID/stat, in clock ticks of 1/100 s).
func procCPU(b testing.TB, pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name (which may hold spaces) in parentheses;
	// utime and stime are fields 14 and 15.
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, raw)
	}
	return (utime + stime) / 100
}

// loadAvg is the 1-, 5- and 15-minute load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

func median[T float64 | time.Duration](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// streamTimes is one stream's token count and times: request sent, first
// and last token (chunks carrying logprobs), and the prompt's token count
// (the usage chunk).
type streamTimes struct {
	start, first, end time.Time
	tokens            int
	promptTokens      int
}

// benchStream posts one streaming chat completion and reads it to the end.
func benchStream(url, body string) (streamTimes, error) {
	r := streamTimes{start: time.Now()}
	req, err := http.NewRequestWithContext(context.Background(), "POST", url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return r, err
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return r, err
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		raw, _ := io.ReadAll(res.Body)
		return r, fmt.Errorf("chat completion: status %d: %s", res.StatusCode, raw)
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: {")
		if !ok {
			continue
		}
		var c struct {
			Choices []struct {
				Logprobs *struct {
					Content []json.RawMessage `json:"content"`
				} `json:"logprobs"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte("{"+line), &c); err != nil {
			return r, fmt.Errorf("chunk %q: %w", line, err)
		}
		for _, ch := range c.Choices {
			if ch.Logprobs != nil && len(ch.Logprobs.Content) > 0 {
				if r.tokens == 0 {
					r.first = time.Now()
				}
				r.tokens += len(ch.Logprobs.Content)
				r.end = time.Now()
			}
		}
		if c.Usage != nil {
			r.promptTokens = c.Usage.PromptTokens
		}
	}
	if err := sc.Err(); err != nil {
		return r, fmt.Errorf("stream cut after %d tokens, %s after the request: %w", r.tokens, time.Since(r.start).Round(time.Millisecond), err)
	}
	return r, nil
}

// writeSmolLM2Folder writes a Hugging Face model folder of the
// SmolLM2-135M shape into dir: config.json, model.safetensors (the engine
// benchmarks' random float32 weights, tied embeddings: 538 MB read per
// token), GPT-2's real tokenizer.json (its 50,257 tokens cover the shape's
// 49,152, so streams detokenise real token bytes) and a ChatML template.
func writeSmolLM2Folder(b testing.TB, dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	cfgJSON := `{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":576,"intermediate_size":1536,
"num_hidden_layers":30,"num_attention_heads":9,"num_key_value_heads":3,"head_dim":64,"vocab_size":49152,
"max_position_embeddings":2048,"rms_norm_eps":1e-5,"rope_theta":100000,"tie_word_embeddings":true,
"torch_dtype":"float32","bos_token_id":0,"eos_token_id":0}`
	cfg, err := engine.ParseConfig([]byte(cfgJSON))
	if err != nil {
		b.Fatal(err)
	}
	w := engine.RandomWeights(cfg, 1)
	ts := []safetensors.WriteTensor{
		{Name: "model.embed_tokens.weight", Shape: []int{cfg.VocabSize, cfg.HiddenSize}, Data: w.Embed.F32, DType: "F32"},
		{Name: "model.norm.weight", Shape: []int{cfg.HiddenSize}, Data: w.Norm, DType: "F32"},
	}
	for l, L := range w.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		ts = append(ts,
			safetensors.WriteTensor{Name: p + "input_layernorm.weight", Shape: []int{cfg.HiddenSize}, Data: L.AttnNorm, DType: "F32"},
			safetensors.WriteTensor{Name: p + "post_attention_layernorm.weight", Shape: []int{cfg.HiddenSize}, Data: L.MLPNorm, DType: "F32"})
		for mod, mat := range map[string]engine.Mat{engine.ModQ: L.Wq, engine.ModK: L.Wk, engine.ModV: L.Wv, engine.ModO: L.Wo,
			engine.ModGate: L.Wgate, engine.ModUp: L.Wup, engine.ModDown: L.Wdown} {
			out, in, _ := cfg.ModuleShape(mod)
			ts = append(ts, safetensors.WriteTensor{Name: engine.ModulePrefix(l, mod) + ".weight", Shape: []int{out, in}, Data: mat.F32, DType: "F32"})
		}
	}
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		b.Fatal(err)
	}
	gz, err := os.Open(filepath.Join("..", "..", "internal", "engine", "tokenizer", "testdata", "gpt2.tokenizer.json.gz"))
	if err != nil {
		b.Fatal(err)
	}
	defer gz.Close()
	zr, err := gzip.NewReader(gz)
	if err != nil {
		b.Fatal(err)
	}
	tok, err := io.ReadAll(zr)
	if err != nil {
		b.Fatal(err)
	}
	tmpl := "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}" +
		"{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
	tcfg, err := json.Marshal(map[string]any{"chat_template": tmpl, "eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>"})
	if err != nil {
		b.Fatal(err)
	}
	for name, data := range map[string][]byte{"config.json": []byte(cfgJSON), "tokenizer.json": tok, "tokenizer_config.json": tcfg} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}
