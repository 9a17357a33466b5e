package serve

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"flywheel/internal/engine"
	"flywheel/internal/engine/chattmpl"
	"flywheel/internal/engine/tokenizer"
	"flywheel/internal/httpx"
)

// Real tokenizers and chat templates, as committed by the tokenizer and
// chat-template packages.
const (
	tokTestdata  = "../engine/tokenizer/testdata"
	tmplTestdata = "../engine/chattmpl/testdata"
)

// realVocabModel is a small random model over a real tokenizer and chat
// template, so tool calls go through a real vocabulary and real template.
func realVocabModel(t testing.TB, id, tokFile string, tmpl *chattmpl.Template, eos []string) *engine.Model {
	tok, err := tokenizer.Load(tokFile)
	if err != nil {
		t.Fatal(err)
	}
	var eosIDs []int
	for _, e := range eos {
		id, ok := tok.SpecialTokenID(e)
		if !ok {
			t.Fatalf("no special token %s", e)
		}
		eosIDs = append(eosIDs, id)
	}
	cfg := &engine.Config{Architecture: engine.ArchLlama, ModelType: "llama", HiddenSize: 32, IntermediateSize: 64,
		NumLayers: 1, NumHeads: 2, NumKVHeads: 1, HeadDim: 16, VocabSize: tok.VocabSize(), MaxPositionEmbeddings: 4096,
		RMSNormEps: 1e-6, RopeTheta: 10000, TieWordEmbeddings: true, BOSTokenID: -1, EOSTokenIDs: eosIDs}
	return engine.NewModel(id, cfg, engine.RandomWeights(cfg, 3), tok, tmpl)
}

func TestForcedToolCallsRealVocabularies(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	qtok := filepath.Join(tokTestdata, "qwen2.5.tokenizer.json.gz")
	ltok := filepath.Join(tokTestdata, "llama3.2.tokenizer.json.gz")
	qsrc, err := os.ReadFile(filepath.Join(tmplTestdata, "qwen2.5-instruct.chat_template.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	qt, err := chattmpl.Parse(string(qsrc), "", "<|im_end|>")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(tmplTestdata, "llama3.1-instruct.chat_template.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	lt, err := chattmpl.Parse(string(src), "<|begin_of_text|>", "<|eot_id|>")
	if err != nil {
		t.Fatal(err)
	}
	reg := engine.NewRegistry(t.TempDir())
	reg.Put(realVocabModel(t, "test/qwen-vocab", qtok, qt, []string{"<|im_end|>", "<|endoftext|>"}))
	reg.Put(realVocabModel(t, "test/llama-vocab", ltok, lt, []string{"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"}))
	srv := New(reg, nil, nil, Options{})
	mux := http.NewServeMux()
	srv.Register(httpx.NewRoutes(mux))
	hs := httptest.NewServer(authMiddleware(mux))
	t.Cleanup(func() { hs.Close(); srv.Close() })
	client := openai.NewClient(option.WithBaseURL(hs.URL+"/v1/"), option.WithAPIKey(testKey), option.WithMaxRetries(0))

	for _, c := range []struct {
		model  string
		format toolFormat
		end    string
	}{{"test/qwen-vocab", fmtHermes, "<|im_end|>"}, {"test/llama-vocab", fmtLlamaJSON, "<|eot_id|>"}} {
		lm, err := srv.model(c.model)
		if err != nil {
			t.Fatal(err)
		}
		if lm.format != c.format {
			t.Fatalf("%s: tool format %v", c.model, lm.format)
		}
		start := time.Now()
		resp, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model: c.model, Messages: userMsgs("Weather in Paris?"), MaxTokens: openai.Int(300), Seed: openai.Int(2),
			Tools:      []openai.ChatCompletionToolUnionParam{weatherTool, timeTool},
			ToolChoice: openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"}),
			Logprobs:   openai.Bool(true),
		})
		if err != nil {
			t.Fatal(err)
		}
		ch := resp.Choices[0]
		if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 || ch.Message.ToolCalls[0].Function.Name != "get_weather" {
			t.Fatalf("%s: %s", c.model, resp.RawJSON())
		}
		var args map[string]any
		if err := json.Unmarshal([]byte(ch.Message.ToolCalls[0].Function.Arguments), &args); err != nil || len(args) != 3 {
			t.Fatalf("%s: arguments %q", c.model, ch.Message.ToolCalls[0].Function.Arguments)
		}
		lps := ch.Logprobs.Content
		if c.format == fmtHermes && lps[0].Token != "<tool_call>" {
			t.Fatalf("%s: first token %q", c.model, lps[0].Token)
		}
		if lps[len(lps)-1].Token != c.end {
			t.Fatalf("%s: ends with %q", c.model, lps[len(lps)-1].Token)
		}
		var text strings.Builder
		for _, e := range lps[:len(lps)-1] {
			text.WriteString(e.Token)
		}
		t.Logf("%s: %d tokens in %v: %q", c.model, len(lps), time.Since(start).Round(time.Millisecond), text.String())

		// Structured outputs over the real vocabulary: every sample at
		// temperature 1.5 validates against the strict schema.
		sch := compileValidator(t, structuredSchema)
		body := `{"model":"` + c.model + `","messages":[{"role":"user","content":"A person?"}],"n":4,"temperature":1.5,"seed":4,"max_tokens":120,
		  "response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":` + structuredSchema + `}}}`
		req, _ := http.NewRequest("POST", hs.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testKey)
		hr, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var sresp ChatCompletion
		err = json.NewDecoder(hr.Body).Decode(&sresp)
		hr.Body.Close()
		if err != nil || hr.StatusCode != 200 || len(sresp.Choices) != 4 {
			t.Fatalf("%s: structured: %d %v", c.model, hr.StatusCode, err)
		}
		for i, ch := range sresp.Choices {
			v, err := jsonschema.UnmarshalJSON(strings.NewReader(*ch.Message.Content))
			if err == nil {
				err = sch.Validate(v)
			}
			if err != nil {
				t.Fatalf("%s: structured sample %d: %v\n%s", c.model, i, err, *ch.Message.Content)
			}
		}
	}
}
