package chattmpl

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func raws(t testing.TB, js string) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	if err := json.Unmarshal([]byte(js), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func mustRead(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// inputFor builds an Input from one render_contexts.json entry.
func inputFor(t testing.TB, rc renderContexts, file string) Input {
	t.Helper()
	f, ok := rc.Files[file]
	if !ok {
		t.Fatalf("no context %s", file)
	}
	var in Input
	if err := json.Unmarshal(f.Context["messages"], &in.Messages); err != nil {
		t.Fatal(err)
	}
	if raw, ok := f.Context["tools"]; ok {
		if err := json.Unmarshal(raw, &in.Tools); err != nil {
			t.Fatal(err)
		}
	}
	if raw, ok := f.Context["add_generation_prompt"]; ok {
		if err := json.Unmarshal(raw, &in.AddGenerationPrompt); err != nil {
			t.Fatal(err)
		}
	}
	in.Now = pinned2024
	return in
}

func tokenConfig(t testing.TB, template any, bos, eos any) string {
	t.Helper()
	cfg := map[string]any{"bos_token": bos, "eos_token": eos, "chat_template": template}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestLoadAndRender loads model folders in the tokenizer_config.json layout
// (AddedToken form for bos/eos) and the chat_template.jinja layout and checks
// Render (the apply_chat_template path) against the Python renders.
func TestLoadAndRender(t *testing.T) {
	rc := loadContexts(t)
	cases := []struct {
		model, fixture string
		jinjaFile      bool
	}{
		{"qwen2.5-instruct", "qwen2.5-instruct.toolcalls.rendered.txt", false},
		{"qwen2.5-instruct", "qwen2.5-instruct.tools.rendered.txt", true},
		{"qwen2.5-instruct", "qwen2.5-instruct.genprompt.rendered.txt", false},
		{"llama3-instruct", "llama3-instruct.tricky.rendered.txt", true},
		{"llama3.1-instruct", "llama3.1-instruct.tools.rendered.txt", false},
		{"llama3.2-instruct", "llama3.2-instruct.tools.rendered.txt", true},
		{"llama3.2-instruct", "llama3.2-instruct.genprompt.rendered.txt", false},
		{"smollm2-instruct", "smollm2-instruct.tricky.rendered.txt", false},
	}
	for _, c := range cases {
		t.Run(c.fixture, func(t *testing.T) {
			dir := t.TempDir()
			src := mustRead(t, filepath.Join("testdata", c.model+".chat_template.jinja"))
			var bos, eos any
			if raw, ok := rc.SpecialTokens[c.model]["bos_token"]; ok {
				var s string
				_ = json.Unmarshal(raw, &s)
				bos = map[string]any{"__type": "AddedToken", "content": s, "lstrip": false}
			}
			if raw, ok := rc.SpecialTokens[c.model]["eos_token"]; ok {
				var s string
				_ = json.Unmarshal(raw, &s)
				eos = s
			}
			if c.jinjaFile {
				writeFile(t, filepath.Join(dir, "tokenizer_config.json"), tokenConfig(t, nil, bos, eos))
				writeFile(t, filepath.Join(dir, "chat_template.jinja"), src)
			} else {
				writeFile(t, filepath.Join(dir, "tokenizer_config.json"), tokenConfig(t, src, bos, eos))
			}
			tmpl, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tmpl.Render(inputFor(t, rc, c.fixture))
			if err != nil {
				t.Fatal(err)
			}
			want := mustRead(t, filepath.Join("testdata", "rendered", c.fixture))
			if got != want {
				t.Errorf("mismatch\n%s", firstDiff(got, want))
			}
		})
	}
}

func TestLoadNamedTemplates(t *testing.T) {
	dir := t.TempDir()
	list := []map[string]string{
		{"name": "default", "template": "D{{ bos_token }}{{ eos_token }}{{ tools is none }}"},
		{"name": "tool_use", "template": "T{{ tools|length }}"},
		{"name": "rag", "template": "R{{ documents|length }}"},
	}
	writeFile(t, filepath.Join(dir, "tokenizer_config.json"), tokenConfig(t, list, "<s>", map[string]any{"content": "</s>", "special": true}))
	tmpl, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.BOSToken() != "<s>" || tmpl.EOSToken() != "</s>" {
		t.Fatalf("tokens %q %q", tmpl.BOSToken(), tmpl.EOSToken())
	}
	msgs := raws(t, `[{"role":"user","content":"x"}]`)
	for _, c := range []struct {
		in   Input
		want string
	}{
		{Input{Messages: msgs}, "D<s></s>True"},
		{Input{Messages: msgs, Tools: raws(t, `[{"a":1},{"b":2}]`)}, "T2"},
		{Input{Messages: msgs, Tools: []json.RawMessage{}}, "T0"},
		{Input{Messages: msgs, TemplateName: "rag", Documents: raws(t, `[{"title":"t","text":"x"}]`)}, "R1"},
	} {
		got, err := tmpl.Render(c.in)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("got %q want %q", got, c.want)
		}
	}
	if _, err := tmpl.Render(Input{Messages: msgs, TemplateName: "nope"}); err == nil {
		t.Error("want error for unknown template name")
	}

	// additional_chat_templates/ beside chat_template.jinja (newest layout)
	dir2 := t.TempDir()
	writeFile(t, filepath.Join(dir2, "tokenizer_config.json"), `{"eos_token": "<e>"}`)
	writeFile(t, filepath.Join(dir2, "chat_template.jinja"), "main{{ eos_token }}\n")
	writeFile(t, filepath.Join(dir2, "additional_chat_templates", "tool_use.jinja"), "tools{{ eos_token }}")
	tmpl2, err := Load(dir2)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := tmpl2.Render(Input{Messages: msgs}); got != "main<e>" {
		t.Errorf("got %q", got)
	}
	if got, _ := tmpl2.Render(Input{Messages: msgs, Tools: raws(t, `[]`)}); got != "tools<e>" {
		t.Errorf("got %q", got)
	}
}

func TestNoChatTemplate(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "tokenizer_config.json"), `{"bos_token": "<s>", "eos_token": "</s>"}`)
	_, err := Load(dir)
	if !errors.Is(err, ErrNoChatTemplate) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("got %v", err)
	}
	_, err = Load(filepath.Join(dir, "does-not-exist"))
	if !errors.Is(err, ErrNoChatTemplate) {
		t.Fatalf("got %v", err)
	}
}

func TestRaiseException(t *testing.T) {
	tmpl, err := Parse(mustRead(t, "testdata/llama3.1-instruct.chat_template.jinja"), "<|begin_of_text|>", "<|eot_id|>")
	if err != nil {
		t.Fatal(err)
	}
	// Two tool calls in one message: the template raises.
	in := Input{
		Messages: raws(t, `[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[
			{"function":{"name":"a","arguments":{}}},{"function":{"name":"b","arguments":{}}}]}]`),
		Tools: raws(t, `[{"type":"function","function":{"name":"a"}}]`),
		Now:   pinned2024,
	}
	_, err = tmpl.Render(in)
	var re *RaisedError
	if !errors.As(err, &re) || re.Msg != "This model only supports single tool-calls at once!" {
		t.Fatalf("got %v", err)
	}
}

func TestContinueFinalMessage(t *testing.T) {
	qwen, err := Parse(mustRead(t, "testdata/qwen2.5-instruct.chat_template.jinja"), "", "<|im_end|>")
	if err != nil {
		t.Fatal(err)
	}
	llama, err := Parse(mustRead(t, "testdata/llama3-instruct.chat_template.jinja"), "<|begin_of_text|>", "<|eot_id|>")
	if err != nil {
		t.Fatal(err)
	}
	msgs := func(last string) []json.RawMessage {
		b, _ := json.Marshal(last)
		return raws(t, `[{"role":"user","content":"Capital of France?"},{"role":"assistant","content":`+string(b)+`}]`)
	}
	for _, c := range []struct {
		tmpl *Template
		last string
		want string
	}{
		{qwen, "The capital is", "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nCapital of France?<|im_end|>\n<|im_start|>assistant\nThe capital is"},
		{qwen, "The capital is ", "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nCapital of France?<|im_end|>\n<|im_start|>assistant\nThe capital is "},
		// Llama-3 trims content, so the trailing space is lost, as in transformers.
		{llama, "The capital is ", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nCapital of France?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nThe capital is"},
	} {
		got, err := c.tmpl.Render(Input{Messages: msgs(c.last), ContinueFinalMessage: true})
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("got  %q\nwant %q", got, c.want)
		}
	}
	// List content: the last text block is continued.
	blocks, err := Parse(`{% for m in messages %}<{{ m.role }}>{% for b in m.content %}{{ b.text }}{% endfor %}</{{ m.role }}>{% endfor %}`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := blocks.Render(Input{Messages: raws(t, `[{"role":"user","content":[{"type":"text","text":"q"}]},
		{"role":"assistant","content":[{"type":"text","text":"A "},{"type":"text","text":"Par"},{"type":"image"}]}]`), ContinueFinalMessage: true})
	if want := "<user>q</user><assistant>A Par"; err != nil || got != want {
		t.Fatalf("got %q, %v; want %q", got, err, want)
	}
	if _, err := qwen.Render(Input{Messages: msgs("x"), ContinueFinalMessage: true, AddGenerationPrompt: true}); err == nil {
		t.Error("want error for continue_final_message + add_generation_prompt")
	}
}

// TestToJSONKeyOrder checks that tojson keeps the key order of the input JSON
// and uses Python's separators.
func TestToJSONKeyOrder(t *testing.T) {
	tmpl, err := Parse(`{{ tools[0]|tojson }}|{{ tools[0]|tojson(indent=2) }}|{{ messages[0]|tojson }}`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(Input{
		Messages: raws(t, `[{"role":"user","content":"ü \"q\"\n","zeta":1,"alpha":[1.0,2.5e-7,null]}]`),
		Tools:    raws(t, `[{"z":{"y":true,"b":[]},"a":{}}]`),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"z": {"y": true, "b": []}, "a": {}}|{
  "z": {
    "y": true,
    "b": []
  },
  "a": {}
}|{"role": "user", "content": "ü \"q\"\n", "zeta": 1, "alpha": [1.0, 2.5e-07, null]}`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestExtraKwargs(t *testing.T) {
	tmpl, err := Parse(`{{ enable_thinking }} {{ bos_token }} {{ cfg.b }} {{ cfg }}`, "<s>", "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(Input{Extra: map[string]any{
		"enable_thinking": false,
		"bos_token":       "<override>",
		"cfg":             json.RawMessage(`{"b":2,"a":1}`),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "False <override> 2 {'b': 2, 'a': 1}"; got != want {
		t.Errorf("got %q want %q", got, want)
	}
	if _, err := tmpl.Render(Input{Extra: map[string]any{"messages": 1}}); err == nil {
		t.Error("want error for colliding extra variable")
	}
}

func TestRenderWithSpans(t *testing.T) {
	for _, model := range []string{"qwen2.5-instruct", "llama3-instruct", "llama3.1-instruct", "llama3.2-instruct", "smollm2-instruct"} {
		t.Run(model, func(t *testing.T) {
			tmpl, err := Parse(mustRead(t, filepath.Join("testdata", model+".chat_template.jinja")), "<bos>", "<eos>")
			if err != nil {
				t.Fatal(err)
			}
			in := Input{
				Messages: raws(t, `[{"role":"system","content":"sys"},{"role":"user","content":"hi"},
					{"role":"assistant","content":"  first answer \n"},{"role":"user","content":"again"},
					{"role":"assistant","content":"second"}]`),
				Now: pinned2024,
			}
			text, spans, err := tmpl.RenderWithSpans(in)
			if err != nil {
				t.Fatal(err)
			}
			plain, err := tmpl.Render(in)
			if err != nil || plain != text {
				t.Fatalf("RenderWithSpans text differs from Render: %v", err)
			}
			if len(spans) != 2 || spans[0].Message != 2 || spans[1].Message != 4 {
				t.Fatalf("spans %+v", spans)
			}
			if got := text[spans[1].Start:spans[1].End]; got != "second" {
				t.Errorf("span 1 = %q", got)
			}
			if got := text[spans[0].Start:spans[0].End]; strings.TrimSpace(got) != "first answer" {
				t.Errorf("span 0 = %q", got)
			}
			// Continue the final message: the last span ends the text.
			in.ContinueFinalMessage = true
			text, spans, err = tmpl.RenderWithSpans(in)
			if err != nil {
				t.Fatal(err)
			}
			if len(spans) != 2 || spans[1].End != len(text) || text[spans[1].Start:] != "second" {
				t.Errorf("continue: spans %+v text %q", spans, text)
			}
		})
	}
	// Tool calls with empty content: no span for the empty message, no error.
	rc := loadContexts(t)
	qwen, _ := Parse(mustRead(t, "testdata/qwen2.5-instruct.chat_template.jinja"), "", "<|im_end|>")
	in := inputFor(t, rc, "qwen2.5-instruct.toolcalls.rendered.txt")
	in.Messages = append(in.Messages, json.RawMessage(`{"role":"assistant","content":"It is 26.1 °C now."}`))
	text, spans, err := qwen.RenderWithSpans(in)
	if err != nil || len(spans) != 1 || spans[0].Message != 5 || text[spans[0].Start:spans[0].End] != "It is 26.1 °C now." {
		t.Fatalf("spans %+v err %v", spans, err)
	}
	// A template that renders the content twice cannot give a span.
	tmpl, _ := Parse(`{% for m in messages %}{{ m.content }}{{ m.content }}{% endfor %}`, "", "")
	_, _, err = tmpl.RenderWithSpans(Input{Messages: raws(t, `[{"role":"assistant","content":"x"}]`)})
	if !errors.Is(err, ErrUnstableSpans) {
		t.Fatalf("got %v", err)
	}
}

func TestGenerationSpans(t *testing.T) {
	tmpl, err := Parse(`{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}{% generation %}{{ m.content }}</s>{% endgeneration %}{% else %}{{ m.content }}{% endif %}
{% endfor %}`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	text, spans, err := tmpl.RenderWithGenerationSpans(Input{Messages: raws(t, `[{"role":"user","content":"é"},{"role":"assistant","content":"ok"}]`)})
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) != 1 || text[spans[0].Start:spans[0].End] != "ok</s>" {
		t.Fatalf("text %q spans %+v", text, spans)
	}
}

// TestConcurrentRender renders one Template from many goroutines (run with -race).
func TestConcurrentRender(t *testing.T) {
	rc := loadContexts(t)
	tmpl, err := Parse(mustRead(t, "testdata/qwen2.5-instruct.chat_template.jinja"), "", "<|im_end|>")
	if err != nil {
		t.Fatal(err)
	}
	in := inputFor(t, rc, "qwen2.5-instruct.toolcalls.rendered.txt")
	want := mustRead(t, "testdata/rendered/qwen2.5-instruct.toolcalls.rendered.txt")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				got, err := tmpl.Render(in)
				if err != nil {
					errs <- err
					return
				}
				if got != want {
					errs <- errors.New("concurrent render mismatch")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func BenchmarkRenderQwenTools(b *testing.B) {
	rc := loadContexts(b)
	tmpl, err := Parse(mustRead(b, "testdata/qwen2.5-instruct.chat_template.jinja"), "", "<|im_end|>")
	if err != nil {
		b.Fatal(err)
	}
	in := inputFor(b, rc, "qwen2.5-instruct.toolcalls.rendered.txt")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := tmpl.Render(in); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "renders/s")
}

func BenchmarkParseQwenTemplate(b *testing.B) {
	src := mustRead(b, "testdata/qwen2.5-instruct.chat_template.jinja")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Parse(src, "", ""); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRenderLlama31Tools(b *testing.B) {
	rc := loadContexts(b)
	tmpl, err := Parse(mustRead(b, "testdata/llama3.1-instruct.chat_template.jinja"), "<|begin_of_text|>", "<|eot_id|>")
	if err != nil {
		b.Fatal(err)
	}
	in := inputFor(b, rc, "llama3.1-instruct.tools.rendered.txt")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := tmpl.Render(in); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "renders/s")
}

func BenchmarkRenderWithSpansQwen(b *testing.B) {
	rc := loadContexts(b)
	tmpl, err := Parse(mustRead(b, "testdata/qwen2.5-instruct.chat_template.jinja"), "", "<|im_end|>")
	if err != nil {
		b.Fatal(err)
	}
	in := inputFor(b, rc, "qwen2.5-instruct.toolcalls.rendered.txt")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := tmpl.RenderWithSpans(in); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "renders/s")
}

func TestExecutionBudget(t *testing.T) {
	tmpl, err := Parse(`{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmpl.Render(Input{Limits: Limits{MaxSteps: 100_000}}); err == nil || !strings.Contains(err.Error(), "execution steps") {
		t.Fatalf("got %v", err)
	}
	if _, err := Parse("{% raw %}{{{% endraw ra", "", ""); err == nil {
		t.Fatal("want syntax error")
	}
}
