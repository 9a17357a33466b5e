package serve

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"flywheel/internal/engine"
	"flywheel/internal/engine/tiny"
)

// hostileChatTemplates are the templates of issue 12 that killed or hung the
// process; each now fails its own request with a 400 naming a limit (or, for
// 1 ** n, renders at once, as Python does).
var hostileChatTemplates = []struct{ name, src string }{
	{"center", `{{ 'x'.center(1000000000000) }}`},
	{"indent", `{{ 'x'|indent(1000000000000, true) }}`},
	{"tojson indent", `{{ messages|tojson(indent=1000000000000) }}`},
	{"list repetition overflow", `{{ ([1, 1] * 4611686018427387904)|length }}`},
	{"60 MB printed 100 times", `{% set s = 'x' * 60000000 %}{% for i in range(100) %}{{ s }}{% endfor %}`},
	{"doubling through namespace", `{% set ns = namespace(s='x' * 1000000) %}{% for i in range(12) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}`},
	{"2 million nested parentheses", `{{ ` + strings.Repeat("(", 2_000_000) + `1` + strings.Repeat(")", 2_000_000) + ` }}`},
	{"nested empty range loops", `{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}`},
	{"huge power", `{{ 1 ** 9000000000000000000 }}<|im_start|>assistant
`},
}

// hostileEnv serves flywheel/tiny and one copy of it per hostile template
// (hostile/<i>), each with the template in its tokenizer_config.json.
func hostileEnv(t *testing.T, opts Options) *testEnv {
	t.Helper()
	dir := t.TempDir()
	if err := tiny.Ensure(dir); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "flywheel", "tiny")
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range hostileChatTemplates {
		dst := filepath.Join(dir, "hostile", fmt.Sprint(i))
		if err := os.MkdirAll(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.IsDir() {
				continue
			}
			if err := os.Link(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
		var cfg map[string]any
		b, err := os.ReadFile(filepath.Join(src, "tokenizer_config.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
		cfg["chat_template"] = h.src
		b, _ = json.Marshal(cfg)
		_ = os.Remove(filepath.Join(dst, "tokenizer_config.json"))
		if err := os.WriteFile(filepath.Join(dst, "tokenizer_config.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return newTestEnvWith(t, engine.NewRegistry(dir), opts)
}

func TestHostileChatTemplatesOverHTTP(t *testing.T) {
	env := hostileEnv(t, Options{})
	alive := func() {
		t.Helper()
		r := postJSON(t, env, "/v1/chat/completions", `{"model": "flywheel/tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}`)
		if r.status != 200 {
			t.Fatalf("server not serving after a hostile template: %d %s", r.status, r.body)
		}
	}
	alive()
	for i, h := range hostileChatTemplates {
		t.Run(h.name, func(t *testing.T) {
			start := time.Now()
			r := postJSON(t, env, "/v1/chat/completions", fmt.Sprintf(`{"model": "hostile/%d", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}`, i))
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("answered after %v", d)
			}
			if h.name == "huge power" {
				if r.status != 200 {
					t.Errorf("status %d: %s", r.status, r.body)
				}
			} else {
				var e struct {
					Error struct{ Code, Message string }
				}
				_ = json.Unmarshal([]byte(r.body), &e)
				if r.status != 400 || e.Error.Code != "chat_template_limit" || !strings.Contains(e.Error.Message, "limit") {
					t.Errorf("status %d: %s", r.status, r.body)
				}
				t.Logf("%d %s", r.status, e.Error.Message)
			}
			alive()
		})
	}
}

func TestFieldLimits(t *testing.T) {
	env := newTestEnv(t, Options{})
	base := `"model": "flywheel/tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1`
	for _, tc := range []struct{ name, extra, param string }{
		{"user", `"user": "` + strings.Repeat("u", MaxUserChars+1) + `"`, "user"},
		{"user type", `"user": {"id": 1}`, "user"},
		{"metadata pairs", `"metadata": {"k": "v"` + func() string {
			var b strings.Builder
			for i := 0; i < MaxMetadataPairs+1; i++ {
				fmt.Fprintf(&b, `, "k%d": "v"`, i)
			}
			return b.String()
		}() + `}`, "metadata"},
		{"metadata value", `"metadata": {"k": "` + strings.Repeat("v", MaxMetadataValueChars+1) + `"}`, "metadata.k"},
		{"stop", `"stop": ["` + strings.Repeat("s", MaxStopBytes+1) + `"]`, "stop"},
		{"model", `"model": "` + strings.Repeat("m", MaxModelBytes+1) + `"`, "model"},
		{"chat_template_kwargs", `"chat_template_kwargs": {"x": "` + strings.Repeat("k", MaxKwargsBytes) + `"}`, "chat_template_kwargs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := postJSON(t, env, "/v1/chat/completions", `{`+base+`, `+tc.extra+`}`)
			var e struct {
				Error struct{ Param, Message string }
			}
			_ = json.Unmarshal([]byte(r.body), &e)
			if r.status != 400 || e.Error.Param != tc.param {
				t.Errorf("status %d: %s", r.status, r.body)
			}
		})
	}
	// Within the limits: answered, and the call is recorded.
	r := postJSON(t, env, "/v1/chat/completions", `{`+base+`, "user": "`+strings.Repeat("u", MaxUserChars)+`", "metadata": {"k": "v"}}`)
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
}

// Recorded inputs and outputs are bounded: a request within every field
// limit but over the recording limit is recorded as a stub.
func TestRecordBounded(t *testing.T) {
	env := newTestEnv(t, Options{MaxRecordBytes: 4096})
	r := postJSON(t, env, "/v1/chat/completions", `{"model": "flywheel/tiny", "messages": [{"role": "user", "content": "`+strings.Repeat("a ", 1000)+`"}], "max_tokens": 1, "unknown_field": "`+strings.Repeat("x", 100000)+`"}`)
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	c, ok := env.rec.last()
	if !ok {
		t.Fatal("not recorded")
	}
	if len(c.Inputs) > 4096 || !strings.Contains(string(c.Inputs), "_truncated") || !strings.Contains(string(c.Inputs), "flywheel/tiny") {
		t.Errorf("recorded inputs of %d bytes: %.200s", len(c.Inputs), c.Inputs)
	}
}

// A prompt that cannot fit the context is refused before it is rendered or
// tokenized, naming the field.
func TestHugePromptRefusedCheaply(t *testing.T) {
	env := newTestEnv(t, Options{})
	huge := strings.Repeat("word ", 10<<20) // 50 MB
	start := time.Now()
	r := postJSON(t, env, "/v1/chat/completions", `{"model": "flywheel/tiny", "messages": [{"role": "user", "content": "`+huge+`"}], "max_tokens": 1}`)
	var e struct {
		Error struct{ Param, Code, Message string }
	}
	_ = json.Unmarshal([]byte(r.body), &e)
	if r.status != 400 || e.Error.Param != "messages" || e.Error.Code != "context_length_exceeded" || !strings.Contains(e.Error.Message, "before tokenization") {
		t.Errorf("status %d: %.300s", r.status, r.body)
	}
	if d := time.Since(start); d > 30*time.Second { // decoding 50 MB of JSON, under -race too
		t.Errorf("took %v", d)
	}
	r = postJSON(t, env, "/tokenize", `{"model": "flywheel/tiny", "prompt": "`+huge+`"}`)
	if r.status != 400 || !strings.Contains(r.body, `"prompt"`) {
		t.Errorf("tokenize: status %d: %.300s", r.status, r.body)
	}
}
