package engine

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"flywheel/internal/engine/chattmpl"
	"flywheel/internal/engine/tiny"
)

func TestLoadTinyAndGenerate(t *testing.T) {
	dir := t.TempDir()
	if err := tiny.Ensure(dir); err != nil {
		t.Fatal(err)
	}
	m, err := Load(filepath.Join(dir, "flywheel", "tiny"))
	if err != nil {
		t.Fatal(err)
	}
	tk := tiny.Vocab(tiny.DefaultSpec())
	if m.Config.VocabSize != tk.VocabSize || m.Tokenizer == nil || m.Template == nil || m.TemplateErr != nil {
		t.Fatalf("tiny model: vocab %d (want %d), tokenizer %v, template %v (%v)", m.Config.VocabSize, tk.VocabSize, m.Tokenizer != nil, m.Template != nil, m.TemplateErr)
	}
	eos := m.EOS()
	if len(eos) != 2 || eos[0] != tk.ImEnd || eos[1] != tk.EndOfText {
		t.Fatalf("EOS %v, want [%d %d]", eos, tk.ImEnd, tk.EndOfText)
	}
	if m.Gen.Temperature != 1 || m.Gen.TopP != 1 || m.Gen.TopK != 0 {
		t.Fatalf("generation defaults %+v", m.Gen)
	}
	ids := m.Tokenizer.Encode("<|im_start|>user\nHello, world!<|im_end|>\n", false)
	if ids[0] != tk.ImStart || len(ids) < 5 {
		t.Fatalf("encode: %v", ids)
	}
	if got := m.Tokenizer.Decode(ids, false); got != "<|im_start|>user\nHello, world!<|im_end|>\n" {
		t.Fatalf("decode round trip: %q", got)
	}
	seed := uint64(42)
	gen := func() []int {
		s := m.NewSeq(nil)
		sm := NewSampler(SamplingParams{Temperature: 1, TopP: 0.95, Seed: &seed})
		toks := ids
		var out []int
		for i := 0; i < 8; i++ {
			logits, err := m.Forward([]*Seq{s}, [][]int{toks})
			if err != nil {
				t.Fatal(err)
			}
			id, lp, _ := sm.Sample(logits[0])
			if lp > 0 {
				t.Fatalf("logprob %v > 0", lp)
			}
			out = append(out, id)
			toks = []int{id}
		}
		return out
	}
	a, b := gen(), gen()
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seeded generation differs: %v vs %v", a, b)
		}
	}
}

func TestRegistry(t *testing.T) {
	dir := t.TempDir()
	if err := tiny.Ensure(dir); err != nil {
		t.Fatal(err)
	}
	if err := tiny.Write(filepath.Join(dir, "org", "qwen-tiny"), tiny.Spec{Arch: ArchQwen2, Merges: 100}); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, ".hidden", "x"), 0o755)
	os.WriteFile(filepath.Join(dir, ".hidden", "x", "config.json"), []byte("{}"), 0o644)
	os.MkdirAll(filepath.Join(dir, "empty"), 0o755)
	r := NewRegistry(dir)
	ids, err := r.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2 || ids[0] != tiny.ID || ids[1] != "org/qwen-tiny" {
		t.Fatalf("List = %v", ids)
	}
	var wg sync.WaitGroup
	got := make([]*Model, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := r.Get(tiny.ID)
			if err != nil {
				t.Error(err)
			}
			got[i] = m
		}()
	}
	wg.Wait()
	for _, m := range got {
		if m != got[0] || m == nil {
			t.Fatal("concurrent Gets returned different models")
		}
	}
	if got[0].ID != tiny.ID {
		t.Fatalf("ID %q", got[0].ID)
	}
	for _, bad := range []string{"", "../x", "/abs", "a//b", "a/./b", "missing/model", ".hidden/x"} {
		if _, err := r.Get(bad); err == nil {
			t.Errorf("Get(%q): want error", bad)
		}
	}
	if ids, _ := NewRegistry(filepath.Join(dir, "nope")).List(); len(ids) != 0 {
		t.Fatalf("missing dir: %v", ids)
	}
}

func TestGenerationConfigMerge(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"eos_token_id":[7,3],"temperature":0.7,"top_p":0.8,"top_k":20}`), 0o644)
	g, err := ReadGenerationConfig(dir, &Config{EOSTokenIDs: []int{3}, BOSTokenID: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.EOSTokenIDs) != 2 || g.EOSTokenIDs[0] != 3 || g.EOSTokenIDs[1] != 7 || g.Temperature != 0.7 || g.TopP != 0.8 || g.TopK != 20 {
		t.Fatalf("%+v", g)
	}
}

func TestTinyChatTemplateWithTools(t *testing.T) {
	dir := t.TempDir()
	if err := tiny.Ensure(dir); err != nil {
		t.Fatal(err)
	}
	m, err := Load(filepath.Join(dir, "flywheel", "tiny"))
	if err != nil {
		t.Fatal(err)
	}
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	got, err := m.Template.Render(chattmpl.Input{
		Messages: []json.RawMessage{
			raw(`{"role":"user","content":"Weather in Paris?"}`),
			raw(`{"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"get_weather","arguments":{"city":"Paris"}}}]}`),
			raw(`{"role":"tool","content":"{\"temp\": 21}"}`),
		},
		Tools:               []json.RawMessage{raw(`{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}`)},
		AddGenerationPrompt: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Rendered by Python Jinja2 with Hugging Face's settings.
	want := "<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Fatalf("render:\n%q\nwant\n%q", got, want)
	}
	ids := m.Tokenizer.Encode(got, false)
	tk := tiny.Vocab(tiny.DefaultSpec())
	n := 0
	for _, id := range ids {
		if id == tk.ToolCall || id == tk.ToolEnd {
			n++
		}
	}
	if n != 6 { // two pairs in the system prompt, one in the call
		t.Fatalf("%d tool-call tokens in %v", n, ids)
	}
	if m.Tokenizer.Decode(ids, false) != got {
		t.Fatal("decode(encode(render)) != render")
	}
}
