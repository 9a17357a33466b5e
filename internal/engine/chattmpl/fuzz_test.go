package chattmpl

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzParseRender checks that arbitrary template sources never panic, crash
// or hang in Parse or Render under tight limits (errors are fine). CI runs it
// for a short -fuzztime (.ci/run).
func FuzzParseRender(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.jinja")
	for _, fn := range files {
		b, err := os.ReadFile(fn)
		if err == nil {
			f.Add(string(b))
		}
	}
	// The hostile templates of limits_test.go are not seeds: each builds
	// values of tens of megabytes, which would slow every mutation.
	for _, s := range []string{"{{ x }}", "{{ 'ab' * 3 ~ [1] * 2 }}", "{{ 'x'.center(9) }}", "{{ 'a\nb'|indent(2, true) }}", "{%- if a -%}b{% endif %}", "{# c #}", "{% raw %}{{{% endraw %}", "{{ 'a' ~ [1,2][::-1]|string }}", "{% for a, b in d.items() %}{{ a }}{% endfor %}"} {
		f.Add(s)
	}
	msgs := raws(f, `[{"role":"system","content":"s"},{"role":"user","content":"u é"},{"role":"assistant","content":" a ","tool_calls":[{"function":{"name":"f","arguments":{"x":1}}}]}]`)
	tools := raws(f, `[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]`)
	f.Fuzz(func(t *testing.T, src string) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			tmpl, err := Parse(src, "<s>", "</s>")
			if err != nil {
				return
			}
			lim := Limits{MaxOutputBytes: 1 << 20, MaxAllocBytes: 64 << 20, MaxSteps: 200_000, Timeout: 2 * time.Second}
			_, _ = tmpl.Render(Input{Messages: msgs, Tools: tools, AddGenerationPrompt: true, Now: pinned2024, Limits: lim})
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("hang on %q", src)
		}
	})
}
