package chattmpl

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzParseRender checks that arbitrary template sources never panic in
// Parse or Render (errors are fine).
func FuzzParseRender(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.jinja")
	for _, fn := range files {
		b, err := os.ReadFile(fn)
		if err == nil {
			f.Add(string(b))
		}
	}
	for _, s := range []string{"{{ x }}", "{%- if a -%}b{% endif %}", "{# c #}", "{% raw %}{{{% endraw %}", "{{ 'a' ~ [1,2][::-1]|string }}", "{% for a, b in d.items() %}{{ a }}{% endfor %}"} {
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
			_, _ = tmpl.Render(Input{Messages: msgs, Tools: tools, AddGenerationPrompt: true, Now: pinned2024})
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("hang on %q", src)
		}
	})
}
