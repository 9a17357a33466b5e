package chattmpl

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fuzzLimits bound each fuzz input's render: tight, so that no input can stall
// the fuzzer (a render ends within Timeout plus one operation on at most
// MaxValueBytes).
var fuzzLimits = Limits{MaxOutputBytes: 1 << 20, MaxAllocBytes: 64 << 20, MaxSteps: 200_000, Timeout: 50 * time.Millisecond}

// fuzzSeeds are FuzzParseRender's seeds: the real templates of testdata and a
// few constructs. The hostile templates of limits_test.go are not seeds: each
// builds values of tens of megabytes, which would slow every mutation.
func fuzzSeeds(tb testing.TB) []string {
	var seeds []string
	files, _ := filepath.Glob("testdata/*.jinja")
	for _, fn := range files {
		b, err := os.ReadFile(fn)
		if err != nil {
			tb.Fatal(err)
		}
		seeds = append(seeds, string(b))
	}
	return append(seeds, "{{ x }}", "{{ 'ab' * 3 ~ [1] * 2 }}", "{{ 'x'.center(9) }}", "{{ 'a\nb'|indent(2, true) }}", "{%- if a -%}b{% endif %}", "{# c #}", "{% raw %}{{{% endraw %}", "{{ 'a' ~ [1,2][::-1]|string }}", "{% for a, b in d.items() %}{{ a }}{% endfor %}")
}

// fuzzRender parses src and renders it under fuzzLimits (errors are fine).
func fuzzRender(tb testing.TB, src string) {
	tmpl, err := Parse(src, "<s>", "</s>")
	if err != nil {
		return
	}
	msgs := raws(tb, `[{"role":"system","content":"s"},{"role":"user","content":"u é"},{"role":"assistant","content":" a ","tool_calls":[{"function":{"name":"f","arguments":{"x":1}}}]}]`)
	tools := raws(tb, `[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]`)
	_, _ = tmpl.Render(Input{Messages: msgs, Tools: tools, AddGenerationPrompt: true, Now: pinned2024, Limits: fuzzLimits})
}

// FuzzParseRender checks that arbitrary template sources never panic, crash
// or hang in Parse or Render under tight limits (errors are fine). CI runs it
// for a short -fuzztime (.ci/run).
func FuzzParseRender(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			fuzzRender(t, src)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("hang on %q", src)
		}
	})
}

// The fuzz corpus (seeds and testdata/fuzz, which holds the inputs that once
// stalled the fuzzer) parses and renders in under 100 ms an input, so the fuzz
// step spends its time on new inputs. Each input gets three tries, the fastest
// counting, so that load on the machine does not fail it.
func TestFuzzCorpusFast(t *testing.T) {
	inputs := fuzzSeeds(t)
	files, _ := filepath.Glob("testdata/fuzz/FuzzParseRender/*")
	for _, fn := range files {
		b, err := os.ReadFile(fn)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitN(strings.TrimSpace(string(b)), "\n", 2)
		if len(lines) != 2 || lines[0] != "go test fuzz v1" || !strings.HasPrefix(lines[1], "string(") || !strings.HasSuffix(lines[1], ")") {
			t.Fatalf("%s: not a one-string fuzz input", fn)
		}
		s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "string("), ")"))
		if err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		inputs = append(inputs, s)
	}
	if len(files) < 2 {
		t.Fatalf("testdata/fuzz/FuzzParseRender holds %d inputs, want the regression inputs", len(files))
	}
	var slowest time.Duration
	for _, src := range inputs {
		best := time.Duration(1 << 62)
		for range 3 {
			start := time.Now()
			fuzzRender(t, src)
			best = min(best, time.Since(start))
			if best < 100*time.Millisecond {
				break
			}
		}
		if best >= 100*time.Millisecond {
			t.Errorf("fuzz input takes %v (fastest of 3), want < 100ms: %.80q", best, src)
		}
		slowest = max(slowest, best)
	}
	t.Logf("%d inputs, slowest %v", len(inputs), slowest)
}
