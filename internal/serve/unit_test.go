package serve

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"flywheel/internal/auth"
	"flywheel/internal/engine"
	"flywheel/internal/httpx"
	"flywheel/internal/store"
)

func accepts(root *jnode, s string) (complete bool, ok bool) {
	js := jstate{push(nil, root)}.feedBytes([]byte(s))
	if js == nil {
		return false, false
	}
	return js.complete(), true
}

func TestGrammarSchema(t *testing.T) {
	fns := []ToolFunction{{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"},"unit":{"enum":["c","f"]},"tags":{"type":"array","items":{"type":"string"}},"x":{"type":"number"}},"required":["city","days","unit","tags","x"]}`)},
		{Name: "get_time", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)}}
	g, err := toolCallGrammar(fns, []int{0, 1}, fmtHermes)
	if err != nil {
		t.Fatal(err)
	}
	good := []string{
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3, \"unit\": \"c\", \"tags\": [], \"x\": -1.5}}\n</tool_call>",
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"\", \"days\": 0, \"unit\": \"f\", \"tags\": [\"a\", \"b\"], \"x\": 10}}\n</tool_call>",
		"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
		"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"k\": [1, \"s\"], \"o\": {\"a\": null}, \"z\": true}}\n</tool_call>",
	}
	for _, s := range good {
		if c, ok := accepts(g, s); !ok || !c {
			t.Fatalf("rejected %q (ok=%v complete=%v)", s, ok, c)
		}
		// and its parse is a valid call
		_, calls := parseToolCalls(s, fmtHermes)
		if len(calls) != 1 || !json.Valid([]byte(calls[0].Function.Arguments)) {
			t.Fatalf("parse of %q: %+v", s, calls)
		}
	}
	bad := []string{
		"<tool_call>\n{\"name\": \"other\"",
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": 3",
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"a\", \"days\": 1.5",
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"a\", \"days\": 01",
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"a\", \"days\": 1, \"unit\": \"x\"",
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"a\tb",
		"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>x",
	}
	for _, s := range bad {
		if _, ok := accepts(g, s); ok {
			t.Fatalf("accepted %q", s)
		}
	}
	// Random walks always end in a complete, parseable call within a bound.
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 300; trial++ {
		out := randomDoc(t, g, rng, g.minCost+rng.IntN(150))
		_, calls := parseToolCalls(out, fmtHermes)
		if len(calls) != 1 {
			t.Fatalf("random walk produced an unparseable call: %q", out)
		}
		var args map[string]any
		if err := json.Unmarshal([]byte(calls[0].Function.Arguments), &args); err != nil {
			t.Fatalf("arguments %q: %v", calls[0].Function.Arguments, err)
		}
	}
	// Llama JSON form.
	gl, _ := toolCallGrammar(fns[:1], []int{0}, fmtLlamaJSON)
	if c, ok := accepts(gl, `{"name": "get_weather", "parameters": {"city": "a", "days": 1, "unit": "f", "tags": ["x"], "x": 0.25}}`); !ok || !c {
		t.Fatal("llama form rejected")
	}
}

func TestParseToolCalls(t *testing.T) {
	content, calls := parseToolCalls("Let me check.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>", fmtHermes)
	if len(calls) != 2 || calls[0].Function.Name != "f" || calls[0].Function.Arguments != `{"a": 1}` || calls[1].Function.Name != "g" || content == nil || *content != "Let me check." {
		t.Fatalf("%v %+v", content, calls)
	}
	if calls[0].ID == calls[1].ID {
		t.Fatal("duplicate ids")
	}
	if c, calls := parseToolCalls("no calls here", fmtHermes); calls != nil || *c != "no calls here" {
		t.Fatal("plain text")
	}
	if c, calls := parseToolCalls("<tool_call>\n{broken</tool_call>", fmtHermes); calls != nil || *c == "" {
		t.Fatal("broken call must stay content")
	}
	if _, calls := parseToolCalls("<tool_call>\n{\"name\": \"f\", \"arguments\": {}}", fmtHermes); len(calls) != 1 {
		t.Fatal("unterminated final call")
	}
	c, calls := parseToolCalls(`<|python_tag|>{"name": "f", "parameters": {"x": "y"}}; {"name": "g", "parameters": {}}`, fmtLlamaJSON)
	if c != nil || len(calls) != 2 || calls[0].Function.Arguments != `{"x": "y"}` {
		t.Fatalf("llama: %v %+v", c, calls)
	}
	if _, calls := parseToolCalls(`{"a": 1}`, fmtLlamaJSON); calls != nil {
		t.Fatal("json without name is not a call")
	}
}

func TestToolStreamer(t *testing.T) {
	text := "Sure <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call> done <tool"
	for _, split := range []int{1, 2, 3, 7} {
		ts := &toolStreamer{format: fmtHermes}
		var content strings.Builder
		var calls []ToolCall
		for i := 0; i < len(text); i += split {
			c, cs := ts.push(text[i:min(i+split, len(text))])
			content.WriteString(c)
			calls = append(calls, cs...)
		}
		c, cs := ts.flush()
		content.WriteString(c)
		calls = append(calls, cs...)
		if len(calls) != 1 || calls[0].Function.Arguments != `{"a": 1}` || content.String() != "Sure  done <tool" {
			t.Fatalf("split %d: %q %+v", split, content.String(), calls)
		}
	}
	ts := &toolStreamer{format: fmtLlamaJSON}
	c1, _ := ts.push(`  {"name": "f", `)
	c2, calls := ts.flush()
	if c1 != "" || len(calls) != 0 || c2 == "" {
		t.Fatal("broken llama call must come back as content")
	}
	ts = &toolStreamer{format: fmtLlamaJSON}
	ts.push(`{"name": "f", "parameters": {}}`)
	if _, calls := ts.flush(); len(calls) != 1 {
		t.Fatal("llama call")
	}
}

func TestModelRefs(t *testing.T) {
	cases := map[string]ModelRef{
		"a/b/c":         {"a", "b", "c", -1},
		"a/b/c:step12":  {"a", "b", "c", 12},
		"a/b/c:step0":   {"a", "b", "c", 0},
		"a/b:step1":     {},
		"a/b/c/d":       {},
		"a/b/c:latest":  {},
		"a/b/c:step-1":  {},
		"a//c":          {},
		"flywheel/tiny": {},
	}
	for in, want := range cases {
		got, ok := ParseModelRef(in)
		if ok != (want.Entity != "") || (ok && got != want) {
			t.Fatalf("%q: %+v %v", in, got, ok)
		}
	}
	if StripArtifactPrefix("wandb-artifact:///e/p/n:step3") != "e/p/n:step3" || StripArtifactPrefix("e/p/n") != "e/p/n" {
		t.Fatal("strip")
	}
}

type fakeStore struct {
	models map[string]store.TrainedModel
	cks    map[string][]store.Checkpoint
}

func (f *fakeStore) ModelByName(ctx context.Context, e, p, n string) (store.TrainedModel, error) {
	m, ok := f.models[e+"/"+p+"/"+n]
	if !ok {
		return store.TrainedModel{}, store.ErrNotFound
	}
	return m, nil
}
func (f *fakeStore) ListModels(ctx context.Context, entities []string) ([]store.TrainedModel, error) {
	var out []store.TrainedModel
	for _, m := range f.models {
		for _, e := range entities {
			if m.Entity == e {
				out = append(out, m)
			}
		}
	}
	return out, nil
}
func (f *fakeStore) CheckpointByStep(ctx context.Context, id string, step int) (store.Checkpoint, error) {
	for _, c := range f.cks[id] {
		if c.Step == step {
			return c, nil
		}
	}
	return store.Checkpoint{}, store.ErrNotFound
}
func (f *fakeStore) LatestCheckpoint(ctx context.Context, id string) (store.Checkpoint, error) {
	cs := f.cks[id]
	if len(cs) == 0 {
		return store.Checkpoint{}, store.ErrNotFound
	}
	return cs[len(cs)-1], nil
}

var _ ModelStore = store.Models(nil)

func TestStoreResolver(t *testing.T) {
	dir := t.TempDir()
	ck0, ck1 := filepath.Join(dir, "0"), filepath.Join(dir, "1")
	for _, d := range []string{ck0, ck1} {
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, engine.AdapterConfigFile), []byte("{}"), 0o644)
	}
	fs := &fakeStore{
		models: map[string]store.TrainedModel{"alice/p/m": {ID: "m1", Entity: "alice", Project: "p", Name: "m", BaseModel: tinyID, LatestStep: 1},
			"bob/p/m": {ID: "m2", Entity: "bob", Project: "p", Name: "m", BaseModel: tinyID}},
		cks: map[string][]store.Checkpoint{"m1": {{Step: 0, Dir: ck0}, {Step: 1, Dir: ck1}}},
	}
	r := NewStoreResolver(fs)
	p := &auth.Principal{UserName: "alice", PersonalEntity: "alice", Entities: []string{"alice"}}
	tg, err := r.Resolve(context.Background(), p, "alice/p/m")
	if err != nil || tg.Step != 1 || tg.AdapterDir != ck1 || tg.BaseModel != tinyID || tg.Entity != "alice" || tg.Project != "p" {
		t.Fatalf("%+v %v", tg, err)
	}
	tg, err = r.Resolve(context.Background(), p, "alice/p/m:step0")
	if err != nil || tg.Step != 0 || tg.AdapterDir != ck0 {
		t.Fatalf("%+v %v", tg, err)
	}
	for in, want := range map[string]string{"alice/p/m:step5": "step 5", "bob/p/m": "not found", "alice/p/zz": "not found"} {
		_, err := r.Resolve(context.Background(), p, in)
		var he *httpx.Error
		if !errors.As(err, &he) || he.Status != 404 || !strings.Contains(he.Message, want) {
			t.Fatalf("%s: %v", in, err)
		}
	}
	ts, _ := r.List(context.Background(), p)
	if len(ts) != 1 || ts[0].Name != "alice/p/m" {
		t.Fatalf("%+v", ts)
	}
}

// TestParseChatLeavesRequest: parsing reads the request without changing
// it (the plan holds "developer" read as "system" and max_completion_tokens
// in place of max_tokens), and an invalid max_tokens is named as sent.
func TestParseChatLeavesRequest(t *testing.T) {
	var opts Options
	opts.defaults()
	body := []byte(`{"model": "m", "messages": [{"role": "developer", "content": "be brief"}, {"role": "user", "content": "hi"}],
		"max_tokens": 5, "max_completion_tokens": 7, "tools": [{"type": "function", "function": {"name": "f"}}]}`)
	var req ChatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	pl, err := parseChat(&req, body, &opts)
	if err != nil {
		t.Fatal(err)
	}
	if req.Messages[0].Role != "developer" || *req.MaxTokens != 5 {
		t.Fatalf("request changed: role %q, max_tokens %d", req.Messages[0].Role, *req.MaxTokens)
	}
	if pl.messages[0].Role != "system" || pl.messages[1].Role != "user" || pl.maxTokens != 7 || pl.maxTokensParam != "max_completion_tokens" ||
		pl.toolChoice != "auto" || pl.model != "m" || !pl.addGen {
		t.Fatalf("plan: %+v", pl)
	}
	var bad ChatRequest
	badBody := []byte(`{"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}`)
	if err := json.Unmarshal(badBody, &bad); err != nil {
		t.Fatal(err)
	}
	if _, err := parseChat(&bad, badBody, &opts); err == nil || !strings.Contains(err.Error(), "max_tokens must be at least 1") {
		t.Fatalf("max_tokens 0: %v", err)
	}
}
