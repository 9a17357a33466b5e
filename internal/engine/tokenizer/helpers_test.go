package tokenizer

import (
	"compress/gzip"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

type loaded struct {
	once sync.Once
	tok  *Tokenizer
	err  error
}

var (
	tokNames   = []string{"qwen2.5", "llama3.2", "gpt2"}
	tokLoaded  = map[string]*loaded{"qwen2.5": {}, "llama3.2": {}, "gpt2": {}}
	preloadAll sync.Once
)

func (l *loaded) get(name string) (*Tokenizer, error) {
	l.once.Do(func() {
		l.tok, l.err = Load(filepath.Join("testdata", name+".tokenizer.json.gz"))
	})
	return l.tok, l.err
}

// loadTok loads testdata/<name>.tokenizer.json.gz once per test binary.
// When tests (not only benchmarks) run, the first call loads all the
// tokenizers concurrently, which halves the wait on two cores.
func loadTok(tb testing.TB, name string) *Tokenizer {
	tb.Helper()
	l, ok := tokLoaded[name]
	if !ok {
		tb.Fatalf("unknown test tokenizer %s", name)
	}
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		preloadAll.Do(func() {
			for _, n := range tokNames {
				if n != name {
					go tokLoaded[n].get(n)
				}
			}
		})
	}
	t, err := l.get(name)
	if err != nil {
		tb.Fatalf("load %s: %v", name, err)
	}
	return t
}

func readJSON(tb testing.TB, path string, v any) {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", path))
	if err != nil {
		tb.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
}

type llamaCppCase struct {
	text string
	ids  []int
}

// llamaCppCases reads the llama.cpp .inp/.out pair of a vocab.
func llamaCppCases(tb testing.TB, vocab string) []llamaCppCase {
	tb.Helper()
	inp, err := os.ReadFile(filepath.Join("testdata", "ggml-vocab-"+vocab+".gguf.inp"))
	if err != nil {
		tb.Fatal(err)
	}
	out, err := os.ReadFile(filepath.Join("testdata", "ggml-vocab-"+vocab+".gguf.out"))
	if err != nil {
		tb.Fatal(err)
	}
	texts := strings.Split(string(inp), "\n__ggml_vocab_test__\n")
	if texts[len(texts)-1] == "" {
		texts = texts[:len(texts)-1]
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(texts) {
		tb.Fatalf("%s: %d inputs, %d outputs", vocab, len(texts), len(lines))
	}
	cases := make([]llamaCppCase, len(texts))
	for i, text := range texts {
		ids := []int{}
		for _, f := range strings.Fields(lines[i]) {
			id, err := strconv.Atoi(f)
			if err != nil {
				tb.Fatal(err)
			}
			ids = append(ids, id)
		}
		cases[i] = llamaCppCase{text, ids}
	}
	return cases
}

type multilingualInput struct {
	ID, Category, Text string
}

type multilingualFile struct {
	Entries []struct {
		ID                 string   `json:"id"`
		InputIDs           []int    `json:"input_ids"`
		Tokens             []string `json:"tokens"`
		DecodedWithSpecial string   `json:"decoded_with_special"`
		DecodedSkipSpecial string   `json:"decoded_skip_special"`
	} `json:"entries"`
}

type tjsCase struct {
	Text    string   `json:"text"`
	Tokens  []string `json:"tokens"`
	IDs     []int    `json:"ids"`
	Decoded string   `json:"decoded"`
}

// allTexts gathers every reference input string (for the matcher, round-trip
// and stream tests).
func allTexts(tb testing.TB) []string {
	var texts []string
	for _, v := range []string{"qwen2", "llama-bpe", "gpt-2"} {
		for _, c := range llamaCppCases(tb, v) {
			texts = append(texts, c.text)
		}
	}
	var ml []multilingualInput
	readJSON(tb, "swift/multilingual_inputs.json", &ml)
	for _, m := range ml {
		texts = append(texts, m.Text)
	}
	var tjs struct {
		Models map[string]map[string]tjsCase `json:"models"`
	}
	readJSON(tb, "transformersjs_tokenization_tests.json", &tjs)
	for _, cases := range tjs.Models {
		for _, c := range cases {
			texts = append(texts, c.Text)
		}
	}
	var enc struct {
		Text string `json:"text"`
	}
	readJSON(tb, "swift/gpt2_encoded_tokens.json", &enc)
	texts = append(texts, enc.Text)
	return texts
}

func eqInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func jsonQuote(s string) (string, error) {
	b, err := json.Marshal(s)
	return string(b), err
}

func itoa(i int) string { return strconv.Itoa(i) }

func mustGunzip(tb testing.TB, path string) []byte {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}
