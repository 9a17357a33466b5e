package tokenizer

import (
	"flywheel/internal/cputime"
	"strings"
	"testing"
)

const benchProse = `The quick brown fox jumps over the lazy dog. In 2024, researchers at several
universities published results showing that small language models, when trained on carefully
curated data, can match much larger models on reasoning benchmarks. "It's not just about scale,"
said one of the authors; "data quality matters at least as much." The team's code is available
online, and they've released checkpoints for 125M, 350M and 1.3B parameter variants.

Meanwhile, the weather forecast for Tuesday predicts 23°C with scattered showers — bring an
umbrella! Prices rose 3.5% year-over-year (see Table 2), while unemployment fell to 4.1%.
`

const benchCode = `package main

import (
	"fmt"
	"net/http"
)

// handler writes a greeting.
func handler(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	if name == "" {
		name = "world"
	}
	fmt.Fprintf(w, "Hello, %s!\n", name)
}

func main() {
	http.HandleFunc("/", handler)
	if err := http.ListenAndServe(":8080", nil); err != nil {
		panic(err)
	}
}
`

const benchChat = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nCan you explain what a transformer is?<|im_end|>\n<|im_start|>assistant\nA transformer is a neural network architecture based on self-attention.<|im_end|>\n"

// benchText is realistic mixed text: English prose, Go code, chat markup and
// the 83 multilingual reference inputs (CJK, Arabic, emoji, ...).
func benchText(tb testing.TB) string {
	var ml []multilingualInput
	readJSON(tb, "swift/multilingual_inputs.json", &ml)
	var b strings.Builder
	for i := 0; i < 4; i++ {
		b.WriteString(benchProse)
		b.WriteString(benchCode)
		b.WriteString(benchChat)
	}
	for _, m := range ml {
		b.WriteString(m.Text)
		b.WriteString("\n")
	}
	return b.String()
}

// BenchmarkEncode measures Encode throughput with the Qwen2.5 tokenizer on
// mixed text (warm BPE cache: the steady state of a server).
func BenchmarkEncode(b *testing.B) {
	tok := loadTok(b, "qwen2.5")
	text := benchText(b)
	tok.Encode(text, false)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, ok := cputime.Process()
	n := 0
	for b.Loop() {
		tok.Encode(text, false)
		n++
	}
	if cpu1, ok2 := cputime.Process(); ok && ok2 && cpu1 > cpu0 {
		b.ReportMetric(float64(n*len(text))/1e6/(cpu1-cpu0).Seconds(), "MB/cpu-s")
	}
}

// BenchmarkEncodeColdCache clears the BPE cache before every iteration.
func BenchmarkEncodeColdCache(b *testing.B) {
	tok := loadTok(b, "qwen2.5")
	text := benchText(b)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		tok.model.cache.init()
		b.StartTimer()
		tok.Encode(text, false)
	}
}

// BenchmarkEncodeRegexp2 is BenchmarkEncode with the generic regexp2 splitter
// instead of the hand-written one (for comparison).
func BenchmarkEncodeRegexp2(b *testing.B) {
	fast := loadTok(b, "qwen2.5")
	tok, err := loadFromBytes(mustGunzip(b, "testdata/qwen2.5.tokenizer.json.gz"), true)
	if err != nil {
		b.Fatal(err)
	}
	if _, ok := tok.steps[0].(*splitStep).m.(*regexMatcher); !ok {
		b.Fatal("not using regexp2")
	}
	text := benchText(b)
	if !eqInts(tok.Encode(text, false), fast.Encode(text, false)) {
		b.Fatal("regexp2 and fast splitter disagree")
	}
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		tok.Encode(text, false)
	}
}

// BenchmarkDecode measures Decode throughput (output bytes).
func BenchmarkDecode(b *testing.B) {
	tok := loadTok(b, "qwen2.5")
	text := benchText(b)
	ids := tok.Encode(text, false)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		tok.Decode(ids, false)
	}
}

// BenchmarkLoad measures parsing the Qwen2.5 tokenizer.json (uncompressed).
func BenchmarkLoad(b *testing.B) {
	data := mustGunzip(b, "testdata/qwen2.5.tokenizer.json.gz")
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	cpu0, ok := cputime.Process()
	n := 0
	for b.Loop() {
		if _, err := LoadFromBytes(data); err != nil {
			b.Fatal(err)
		}
		n++
	}
	if cpu1, ok2 := cputime.Process(); ok && ok2 && n > 0 {
		b.ReportMetric(float64((cpu1-cpu0).Milliseconds())/float64(n), "cpu-ms/op")
	}
}

// BenchmarkEncodeParallel runs Encode from all CPUs at once (shared cache).
func BenchmarkEncodeParallel(b *testing.B) {
	tok := loadTok(b, "qwen2.5")
	text := benchText(b)
	tok.Encode(text, false)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tok.Encode(text, false)
		}
	})
}
