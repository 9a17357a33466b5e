package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"flywheel/internal/engine"
)

const tinyID = "flywheel/tiny"

func userMsgs(s string) []openai.ChatCompletionMessageParamUnion {
	return []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are terse."), openai.UserMessage(s)}
}

func TestChatPlain(t *testing.T) {
	env := newTestEnv(t, Options{})
	var httpResp *http.Response
	resp, err := env.client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:     tinyID,
		Messages:  userMsgs("Hello there"),
		MaxTokens: openai.Int(12),
		Seed:      openai.Int(7),
		User:      openai.String("someone"),
	}, option.WithResponseInto(&httpResp))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Object != "chat.completion" || !strings.HasPrefix(resp.ID, "chatcmpl-") || resp.Model != tinyID || resp.Created == 0 {
		t.Fatalf("bad envelope: %s", resp.RawJSON())
	}
	if len(resp.Choices) != 1 || resp.Choices[0].Message.Role != "assistant" || resp.Choices[0].Index != 0 {
		t.Fatalf("bad choices: %s", resp.RawJSON())
	}
	fr := resp.Choices[0].FinishReason
	if fr != "length" && fr != "stop" {
		t.Fatalf("finish_reason %q", fr)
	}
	u := resp.Usage
	if u.PromptTokens == 0 || u.CompletionTokens == 0 || u.CompletionTokens > 12 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Fatalf("usage %+v", u)
	}
	callID := httpResp.Header.Get("x-call-id")
	rc, ok := env.rec.last()
	if !ok || callID == "" || rc.ID != callID {
		t.Fatalf("call not recorded or header missing: %q %+v", callID, rc)
	}
	if rc.Project != "alice/inference" || rc.Op != "chat.completions" || rc.Exception != "" {
		t.Fatalf("recorded call %+v", rc)
	}
	var summary struct {
		Usage map[string]map[string]int `json:"usage"`
	}
	if err := json.Unmarshal(rc.Summary, &summary); err != nil {
		t.Fatal(err)
	}
	if su := summary.Usage[tinyID]; su["requests"] != 1 || su["prompt_tokens"] != int(u.PromptTokens) || su["completion_tokens"] != int(u.CompletionTokens) || su["total_tokens"] != int(u.TotalTokens) {
		t.Fatalf("summary %s", rc.Summary)
	}
	var in map[string]any
	if err := json.Unmarshal(rc.Inputs, &in); err != nil || in["model"] != tinyID {
		t.Fatalf("inputs %s", rc.Inputs)
	}
	var out ChatCompletion
	if err := json.Unmarshal(rc.Output, &out); err != nil || out.ID != resp.ID {
		t.Fatalf("output %s", rc.Output)
	}

	// Trailing slash and content as a list of text parts.
	raw := postJSON(t, env, "/v1/chat/completions/", `{"model":"flywheel/tiny","max_tokens":3,"messages":[{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"text","text":"there"}]}]}`)
	if raw.status != 200 {
		t.Fatalf("trailing slash: %d %s", raw.status, raw.body)
	}
}

func TestRecorderFailureDoesNotFail(t *testing.T) {
	env := newTestEnv(t, Options{})
	env.rec.fail = true
	var httpResp *http.Response
	_, err := env.client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: tinyID, Messages: userMsgs("Hi"), MaxTokens: openai.Int(3),
	}, option.WithResponseInto(&httpResp))
	if err != nil {
		t.Fatal(err)
	}
	if httpResp.Header.Get("x-call-id") != "" {
		t.Fatal("x-call-id set although recording failed")
	}
}

func TestChatN4(t *testing.T) {
	env := newTestEnv(t, Options{})
	resp, err := env.client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: tinyID, Messages: userMsgs("Tell me a story"), MaxTokens: openai.Int(10), N: openai.Int(4), Seed: openai.Int(3),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 4 {
		t.Fatalf("%d choices", len(resp.Choices))
	}
	distinct := map[string]bool{}
	for i, c := range resp.Choices {
		if int(c.Index) != i {
			t.Fatalf("choice %d has index %d", i, c.Index)
		}
		distinct[c.Message.Content] = true
	}
	if len(distinct) < 2 {
		t.Fatalf("n=4 with temperature 1 gave identical choices: %s", resp.RawJSON())
	}
	if resp.Usage.CompletionTokens < 4 {
		t.Fatalf("usage %+v", resp.Usage)
	}
}

func TestStreamingWithUsage(t *testing.T) {
	env := newTestEnv(t, Options{})
	params := openai.ChatCompletionNewParams{
		Model: tinyID, Messages: userMsgs("Stream something"), MaxTokens: openai.Int(20), Seed: openai.Int(11),
		Logprobs: openai.Bool(true), TopLogprobs: openai.Int(2),
	}
	want, err := env.client.Chat.Completions.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := env.client.Chat.Completions.NewStreaming(context.Background(), params)
	acc := openai.ChatCompletionAccumulator{}
	var chunks []openai.ChatCompletionChunk
	for stream.Next() {
		c := stream.Current()
		chunks = append(chunks, c)
		acc.AddChunk(c)
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(chunks) < 3 {
		t.Fatalf("only %d chunks", len(chunks))
	}
	if first := chunks[0]; first.Object != "chat.completion.chunk" || len(first.Choices) != 1 || first.Choices[0].Delta.Role != "assistant" {
		t.Fatalf("first chunk %s", first.RawJSON())
	}
	last := chunks[len(chunks)-1]
	if len(last.Choices) != 0 || last.Usage.TotalTokens == 0 {
		t.Fatalf("last chunk is not the usage chunk: %s", last.RawJSON())
	}
	if last.Usage.CompletionTokens != want.Usage.CompletionTokens || last.Usage.PromptTokens != want.Usage.PromptTokens {
		t.Fatalf("stream usage %+v, plain %+v", last.Usage, want.Usage)
	}
	got := acc.Choices[0]
	if got.Message.Content != want.Choices[0].Message.Content {
		t.Fatalf("stream content %q != plain %q", got.Message.Content, want.Choices[0].Message.Content)
	}
	if got.FinishReason != want.Choices[0].FinishReason {
		t.Fatalf("finish %q vs %q", got.FinishReason, want.Choices[0].FinishReason)
	}
	var lps []openai.ChatCompletionTokenLogprob
	for _, c := range chunks {
		for _, ch := range c.Choices {
			lps = append(lps, ch.Logprobs.Content...)
		}
	}
	if len(lps) != len(want.Choices[0].Logprobs.Content) {
		t.Fatalf("stream logprobs %d, plain %d", len(lps), len(want.Choices[0].Logprobs.Content))
	}
	for i := range lps {
		if lps[i].Token != want.Choices[0].Logprobs.Content[i].Token || lps[i].Logprob != want.Choices[0].Logprobs.Content[i].Logprob {
			t.Fatalf("logprob %d differs", i)
		}
	}
	// The raw stream ends with data: [DONE].
	raw := postJSON(t, env, "/v1/chat/completions", `{"model":"flywheel/tiny","max_tokens":2,"stream":true,"messages":[{"role":"user","content":"x"}]}`)
	if !strings.HasSuffix(raw.body, "data: [DONE]\n\n") || !strings.HasPrefix(raw.body, "data: {") {
		t.Fatalf("raw stream: %q", raw.body)
	}
	if rc, ok := env.rec.last(); !ok || rc.Exception != "" || !strings.Contains(string(rc.Output), `"chat.completion"`) {
		t.Fatalf("streamed call not recorded: %+v", rc)
	}
	if raw.trailer.Get("x-call-id") == "" {
		t.Fatalf("no x-call-id trailer on the stream")
	}
}

func TestLogprobsTokenIDsAndFidelity(t *testing.T) {
	env := newTestEnv(t, Options{})
	m, err := env.reg.Get(tinyID)
	if err != nil {
		t.Fatal(err)
	}
	msgs := `[{"role":"user","content":"What is a flywheel?"}]`
	for _, temp := range []float64{1, 0.7} {
		resp, err := env.client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model: tinyID, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is a flywheel?")},
			MaxTokens: openai.Int(16), Seed: openai.Int(5), Temperature: openai.Float(temp), TopP: openai.Float(0.9),
			Logprobs: openai.Bool(true), TopLogprobs: openai.Int(3),
		}, option.WithJSONSet("return_tokens_as_token_ids", true))
		if err != nil {
			t.Fatal(err)
		}
		content := resp.Choices[0].Logprobs.Content
		if len(content) != int(resp.Usage.CompletionTokens) || len(content) == 0 {
			t.Fatalf("%d logprobs for %d tokens", len(content), resp.Usage.CompletionTokens)
		}
		tk := tokenizeMessages(t, env, msgs)
		seq := append([]int(nil), tk...)
		for _, e := range content {
			if !strings.HasPrefix(e.Token, "token_id:") {
				t.Fatalf("token %q not in token_id form", e.Token)
			}
			id, err := strconv.Atoi(strings.TrimPrefix(e.Token, "token_id:"))
			if err != nil {
				t.Fatal(err)
			}
			wantBytes := m.Tokenizer.TokenBytes(id)
			if len(e.Bytes) != len(wantBytes) {
				t.Fatalf("bytes of %d: %v want %v", id, e.Bytes, wantBytes)
			}
			for i := range wantBytes {
				if e.Bytes[i] != int64(wantBytes[i]) {
					t.Fatalf("bytes of %d: %v want %v", id, e.Bytes, wantBytes)
				}
			}
			if len(e.TopLogprobs) != 3 || !strings.HasPrefix(e.TopLogprobs[0].Token, "token_id:") {
				t.Fatalf("top_logprobs %+v", e.TopLogprobs)
			}
			if e.TopLogprobs[0].Logprob < e.Logprob-1e-6 {
				t.Fatalf("top logprob below the sampled one")
			}
			seq = append(seq, id)
		}
		// Recompute every position with the engine in one full pass.
		logits, err := m.Logits(nil, seq[:len(seq)-1])
		if err != nil {
			t.Fatal(err)
		}
		V := m.Config.VocabSize
		for j, e := range content {
			pos := len(tk) - 1 + j
			row := logits[pos*V : (pos+1)*V]
			id := seq[len(tk)+j]
			want := logSoftmaxAt(row, id, temp)
			if math.Abs(want-e.Logprob) > 1e-4 {
				t.Fatalf("temperature %v token %d: logprob %v, engine recomputed %v", temp, j, e.Logprob, want)
			}
		}
	}
}

func logSoftmaxAt(row []float32, id int, temp float64) float64 {
	mx := math.Inf(-1)
	for _, v := range row {
		mx = math.Max(mx, float64(v)/temp)
	}
	var s float64
	for _, v := range row {
		s += math.Exp(float64(v)/temp - mx)
	}
	return float64(row[id])/temp - mx - math.Log(s)
}

func tokenizeMessages(t *testing.T, env *testEnv, msgs string) []int {
	t.Helper()
	r := postJSON(t, env, "/tokenize", `{"model":"flywheel/tiny","messages":`+msgs+`}`)
	if r.status != 200 {
		t.Fatalf("tokenize: %d %s", r.status, r.body)
	}
	var tr TokenizeResponse
	if err := json.Unmarshal([]byte(r.body), &tr); err != nil {
		t.Fatal(err)
	}
	return tr.Tokens
}

var weatherTool = openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
	Name:        "get_weather",
	Description: openai.String("Weather for a city"),
	Parameters: shared.FunctionParameters{
		"type": "object",
		"properties": map[string]any{
			"city": map[string]any{"type": "string"},
			"days": map[string]any{"type": "integer"},
			"unit": map[string]any{"type": "string", "enum": []string{"celsius", "fahrenheit"}},
		},
		"required": []string{"city", "days", "unit"},
	},
})

var timeTool = openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
	Name:       "get_time",
	Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"zone": map[string]any{"type": "string"}}},
})

func TestForcedToolChoice(t *testing.T) {
	env := newTestEnv(t, Options{})
	params := openai.ChatCompletionNewParams{
		Model:      tinyID,
		Messages:   userMsgs("What's the weather in Paris for 3 days?"),
		MaxTokens:  openai.Int(200),
		Seed:       openai.Int(1),
		Tools:      []openai.ChatCompletionToolUnionParam{weatherTool, timeTool},
		ToolChoice: openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"}),
		Logprobs:   openai.Bool(true),
	}
	for seed := int64(1); seed <= 3; seed++ {
		params.Seed = openai.Int(seed)
		resp, err := env.client.Chat.Completions.New(context.Background(), params)
		if err != nil {
			t.Fatal(err)
		}
		ch := resp.Choices[0]
		if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 {
			t.Fatalf("seed %d: no tool call: %s", seed, resp.RawJSON())
		}
		tc := ch.Message.ToolCalls[0]
		if tc.Function.Name != "get_weather" || tc.Type != "function" || !strings.HasPrefix(tc.ID, "call_") {
			t.Fatalf("tool call %+v", tc)
		}
		var args struct {
			City *string  `json:"city"`
			Days *float64 `json:"days"`
			Unit *string  `json:"unit"`
		}
		if err := json.Unmarshal([]byte(tc.Function.Arguments), &args); err != nil || args.City == nil || args.Days == nil || args.Unit == nil {
			t.Fatalf("arguments %q: %v", tc.Function.Arguments, err)
		}
		if *args.Unit != "celsius" && *args.Unit != "fahrenheit" || *args.Days != math.Trunc(*args.Days) {
			t.Fatalf("arguments violate the schema: %s", tc.Function.Arguments)
		}
		if ch.Message.Content != "" {
			t.Fatalf("content beside the forced call: %q", ch.Message.Content)
		}
		// The last token is the end-of-turn token.
		lp := ch.Logprobs.Content
		if lp[len(lp)-1].Token != "<|im_end|>" {
			t.Fatalf("last token %q", lp[len(lp)-1].Token)
		}
		// The <tool_call> opener is its added token, as the template renders it.
		if lp[0].Token != "<tool_call>" || lp[len(lp)-2].Token != "</tool_call>" {
			t.Fatalf("markers spelled out: first %q, before last %q", lp[0].Token, lp[len(lp)-2].Token)
		}
	}

	// "required": one of the tools, streamed.
	params.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
	params.Logprobs = openai.Bool(false)
	stream := env.client.Chat.Completions.NewStreaming(context.Background(), params)
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	ch := acc.Choices[0]
	if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 {
		t.Fatalf("stream with required: %+v", ch)
	}
	name := ch.Message.ToolCalls[0].Function.Name
	if name != "get_weather" && name != "get_time" || !json.Valid([]byte(ch.Message.ToolCalls[0].Function.Arguments)) {
		t.Fatalf("streamed call %+v", ch.Message.ToolCalls[0])
	}

	// Assistant tool calls and tool results in the history render.
	hist := `[{"role":"user","content":"weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},{"role":"tool","tool_call_id":"call_1","content":"sunny"}]`
	r := postJSON(t, env, "/v1/chat/completions", `{"model":"flywheel/tiny","max_tokens":4,"tool_choice":"auto","tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}],"messages":`+hist+`}`)
	if r.status != 200 {
		t.Fatalf("history with tool calls: %d %s", r.status, r.body)
	}
	toks := tokenizeMessages(t, env, hist)
	m, _ := env.reg.Get(tinyID)
	text := m.Tokenizer.Decode(toks, false)
	if !strings.Contains(text, `<tool_call>`) || !strings.Contains(text, `"arguments": {"city": "Paris"}`) || !strings.Contains(text, "<tool_response>\nsunny") {
		t.Fatalf("rendered history: %q", text)
	}
}

func TestErrorStatuses(t *testing.T) {
	env := newTestEnv(t, Options{MaxN: 8})
	env.res.add("alice/proj/m", Target{Name: "alice/proj/m", BaseModel: tinyID, Step: 2, Entity: "alice", Project: "proj"})
	ctx := context.Background()
	base := func() openai.ChatCompletionNewParams {
		return openai.ChatCompletionNewParams{Model: tinyID, Messages: userMsgs("x"), MaxTokens: openai.Int(2)}
	}
	cases := []struct {
		name   string
		mod    func(p *openai.ChatCompletionNewParams)
		opts   []option.RequestOption
		status int
		substr string
	}{
		{"unknown model", func(p *openai.ChatCompletionNewParams) { p.Model = "nope/unknown" }, nil, 404, "does not exist"},
		{"n over limit", func(p *openai.ChatCompletionNewParams) { p.N = openai.Int(9) }, nil, 400, "n must be between 1 and 8"},
		{"json_schema", func(p *openai.ChatCompletionNewParams) {
			p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "x",
				Schema: map[string]any{"type": "object", "properties": map[string]any{"age": map[string]any{"type": "integer", "minimum": 0}}}}}}
		}, nil, 400, "response_format.json_schema.schema.properties.age.minimum"},
		{"context length", func(p *openai.ChatCompletionNewParams) { p.MaxTokens = openai.Int(5000) }, nil, 400, "maximum context length is 2048"},
		{"penalty range", func(p *openai.ChatCompletionNewParams) { p.PresencePenalty = openai.Float(2.5) }, nil, 400, "presence_penalty must be between -2 and 2"},
		{"logit_bias range", func(p *openai.ChatCompletionNewParams) { p.LogitBias = map[string]int64{"5": 101} }, nil, 400, "between -100 and 100"},
		{"logit_bias id", func(p *openai.ChatCompletionNewParams) { p.LogitBias = map[string]int64{"99999999": 1} }, nil, 400, "out of range"},
		{"logit_bias key", func(p *openai.ChatCompletionNewParams) { p.LogitBias = map[string]int64{"abc": 1} }, nil, 400, "not a token id"},
		{"repetition_penalty", nil, []option.RequestOption{option.WithJSONSet("repetition_penalty", 0)}, 400, "repetition_penalty must be"},
		{"bad temperature", func(p *openai.ChatCompletionNewParams) { p.Temperature = openai.Float(3) }, nil, 400, "temperature"},
		{"other entity", func(p *openai.ChatCompletionNewParams) { p.Model = "bob/proj/m" }, nil, 404, "not found"},
		{"missing step", func(p *openai.ChatCompletionNewParams) { p.Model = "alice/proj/m:step9" }, nil, 404, "step 9"},
		{"uri prefix missing step", func(p *openai.ChatCompletionNewParams) { p.Model = "wandb-artifact:///alice/proj/m:step9" }, nil, 404, "step 9"},
		{"bad key", nil, []option.RequestOption{option.WithAPIKey("wrong")}, 401, "invalid API key"},
		{"wrong type", nil, []option.RequestOption{option.WithJSONSet("max_tokens", "ten")}, 400, "max_tokens"},
		{"tool choice without tools", func(p *openai.ChatCompletionNewParams) {
			p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
		}, nil, 400, "requires tools"},
		{"unknown named tool", func(p *openai.ChatCompletionNewParams) {
			p.Tools = []openai.ChatCompletionToolUnionParam{timeTool}
			p.ToolChoice = openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "nope"})
		}, nil, 400, "not among the tools"},
	}
	for _, c := range cases {
		p := base()
		if c.mod != nil {
			c.mod(&p)
		}
		_, err := env.client.Chat.Completions.New(ctx, p, c.opts...)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) {
			t.Fatalf("%s: want an API error, got %v", c.name, err)
		}
		if apiErr.StatusCode != c.status || !strings.Contains(apiErr.Message, c.substr) {
			t.Fatalf("%s: got %d %q, want %d containing %q", c.name, apiErr.StatusCode, apiErr.Message, c.status, c.substr)
		}
		if apiErr.Type == "" {
			t.Fatalf("%s: no error type", c.name)
		}
		// A model that does not exist or that the caller cannot see is
		// OpenAI's 404 model_not_found (NotFoundError in the SDKs).
		if c.status == 404 && (apiErr.Code != "model_not_found" || apiErr.Type != "invalid_request_error" || apiErr.Param != "model") {
			t.Fatalf("%s: got code %q type %q param %q, want model_not_found invalid_request_error model", c.name, apiErr.Code, apiErr.Type, apiErr.Param)
		}
	}
}

func TestQueueFull429(t *testing.T) {
	env := newTestEnv(t, Options{MaxBatch: 1, MaxQueue: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Occupy the batch with a long generation, then fill the queue.
	long := `{"model":"flywheel/tiny","max_tokens":1500,"ignore_eos":true,"stream":true,"messages":[{"role":"user","content":"go"}]}`
	startStream(t, ctx, env, long)
	waitFor(t, func() bool { return env.srv.Stats(tinyID).Active == 1 })
	startStream(t, ctx, env, long)
	waitFor(t, func() bool { return env.srv.Stats(tinyID).Queued == 1 })
	var httpResp *http.Response
	_, err := env.client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: tinyID, Messages: userMsgs("x"), MaxTokens: openai.Int(2)}, option.WithResponseInto(&httpResp))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 {
		t.Fatalf("want 429, got %v", err)
	}
	if apiErr.Response.Header.Get("Retry-After") == "" {
		t.Fatal("no retry-after")
	}
	cancel()
	waitFor(t, func() bool { s := env.srv.Stats(tinyID); return s.Active == 0 && s.Queued == 0 })
}

// startStream starts a streaming request and reads it in the background
// until ctx is cancelled.
func startStream(t *testing.T, ctx context.Context, env *testEnv, body string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", env.http.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKey)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
	}()
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestClientDisconnectCancels(t *testing.T) {
	env := newTestEnv(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", env.http.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"flywheel/tiny","max_tokens":2000,"ignore_eos":true,"stream":true,"messages":[{"role":"user","content":"go on"}]}`))
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for i := 0; i < 6; i++ { // a few events
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	if env.srv.Stats(tinyID).Active != 1 {
		t.Fatal("generation not running")
	}
	stepsAtCancel := env.srv.Stats(tinyID).Steps
	cancel()
	resp.Body.Close()
	start := time.Now()
	waitFor(t, func() bool { return env.srv.Stats(tinyID).Active == 0 })
	t.Logf("generation stopped %v after disconnect, %d steps later", time.Since(start), env.srv.Stats(tinyID).Steps-stepsAtCancel)
	if n := env.srv.Stats(tinyID).Steps - stepsAtCancel; n > 1000 {
		t.Fatalf("%d steps ran after the disconnect", n)
	}
	waitFor(t, func() bool { rc, ok := env.rec.last(); return ok && rc.Exception == "client disconnected" })
}

func TestDeterminismAndGreedy(t *testing.T) {
	env := newTestEnv(t, Options{})
	ctx := context.Background()
	get := func(seed int64, temp float64) []int {
		resp, err := env.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: tinyID, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Determinism please")},
			MaxTokens: openai.Int(24), Seed: openai.Int(seed), Temperature: openai.Float(temp), Logprobs: openai.Bool(true),
		}, option.WithJSONSet("return_tokens_as_token_ids", true), option.WithJSONSet("ignore_eos", true))
		if err != nil {
			t.Fatal(err)
		}
		return tokenIDs(t, resp.Choices[0].Logprobs.Content)
	}
	a, b, c := get(42, 1), get(42, 1), get(43, 1)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("same seed, different tokens:\n%v\n%v", a, b)
	}
	if fmt.Sprint(a) == fmt.Sprint(c) {
		t.Fatalf("different seeds gave the same 24 tokens")
	}
	greedy := get(1, 0)
	m, _ := env.reg.Get(tinyID)
	prompt := tokenizeMessages(t, env, `[{"role":"user","content":"Determinism please"}]`)
	want := engineGreedy(t, m, nil, prompt, 24)
	if fmt.Sprint(greedy) != fmt.Sprint(want) {
		t.Fatalf("temperature 0:\n%v\nengine greedy:\n%v", greedy, want)
	}
}

func tokenIDs(t *testing.T, lps []openai.ChatCompletionTokenLogprob) []int {
	var ids []int
	for _, e := range lps {
		id, err := strconv.Atoi(strings.TrimPrefix(e.Token, "token_id:"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// engineGreedy decodes n tokens by argmax with a plain KV-cached loop.
func engineGreedy(t *testing.T, m *engine.Model, a *engine.Adapter, prompt []int, n int) []int {
	s := m.NewSeq(a)
	defer s.Release()
	toks := prompt
	var out []int
	for len(out) < n {
		lg, err := m.Forward([]*engine.Seq{s}, [][]int{toks})
		if err != nil {
			t.Fatal(err)
		}
		best := 0
		for i, v := range lg[0] {
			if v > lg[0][best] {
				best = i
			}
		}
		out = append(out, best)
		toks = []int{best}
	}
	return out
}

func TestConcurrentEqualsAlone(t *testing.T) {
	env := newTestEnv(t, Options{})
	ctx := context.Background()
	const N = 16
	run := func(i int) string {
		resp, err := env.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: tinyID, Messages: userMsgs(fmt.Sprintf("Request number %d: %s", i, strings.Repeat("more ", i))),
			MaxTokens: openai.Int(int64(10 + i)), Temperature: openai.Float(0), Logprobs: openai.Bool(true),
		}, option.WithJSONSet("return_tokens_as_token_ids", true), option.WithJSONSet("ignore_eos", true))
		if err != nil {
			t.Error(err)
			return ""
		}
		return fmt.Sprint(tokenIDs(t, resp.Choices[0].Logprobs.Content))
	}
	alone := make([]string, N)
	for i := range alone {
		alone[i] = run(i)
	}
	// Whether the 16 requests overlap is up to the machine's scheduling
	// (on a loaded 2-core machine one round in ten or so runs them nearly
	// one after another), so rounds repeat until one was batched: every
	// round must equal the requests alone, and one of them must have run
	// at least 4 sequences in a step.
	for round := 1; ; round++ {
		stepsBefore := env.srv.Stats(tinyID).Steps
		together := make([]string, N)
		var wg sync.WaitGroup
		for i := range together {
			wg.Add(1)
			go func() { defer wg.Done(); together[i] = run(i) }()
		}
		wg.Wait()
		for i := range alone {
			if alone[i] != together[i] {
				t.Fatalf("round %d, request %d: concurrent %s, alone %s", round, i, together[i], alone[i])
			}
		}
		st := env.srv.Stats(tinyID)
		if st.MaxBatch >= 4 {
			t.Logf("16 concurrent requests: %d steps (max batch %d, round %d)", st.Steps-stepsBefore, st.MaxBatch, round)
			break
		}
		if round == 8 {
			t.Fatalf("requests were not batched in %d rounds: max batch %d", round, st.MaxBatch)
		}
	}
}

func TestAdaptersShareBatch(t *testing.T) {
	env := newTestEnv(t, Options{})
	m, err := env.reg.Get(tinyID)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	lc := engine.LoRAConfig{Rank: 4, Alpha: 8, TargetModules: engine.AllModules}
	zero, _ := engine.NewAdapter(m.Config, lc, 1)
	trained := zero.Clone()
	for _, mods := range trained.Layers {
		for _, p := range mods {
			for i := range p.B {
				p.B[i] = float32((i%7)-3) * 0.05
			}
		}
	}
	step0, step1 := filepath.Join(dir, "step0"), filepath.Join(dir, "step1")
	if err := zero.Save(step0, tinyID); err != nil {
		t.Fatal(err)
	}
	if err := trained.Save(step1, tinyID); err != nil {
		t.Fatal(err)
	}
	env.res.add("alice/proj/m:step0", Target{Name: "alice/proj/m", BaseModel: tinyID, AdapterDir: step0, Step: 0, Entity: "alice", Project: "proj", ModelName: "m"})
	env.res.add("alice/proj/m:step1", Target{Name: "alice/proj/m", BaseModel: tinyID, AdapterDir: step1, Step: 1, Entity: "alice", Project: "proj", ModelName: "m"})
	env.res.add("alice/proj/m", Target{Name: "alice/proj/m", BaseModel: tinyID, AdapterDir: step1, Step: 1, Entity: "alice", Project: "proj", ModelName: "m"})
	models := []string{tinyID, "alice/proj/m:step0", "alice/proj/m:step1", "art:///alice/proj/m"}
	out := make([]string, len(models))
	var wg sync.WaitGroup
	for i, model := range models {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := env.client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
				Model: model, Messages: userMsgs("adapters"), MaxTokens: openai.Int(20), Temperature: openai.Float(0), Logprobs: openai.Bool(true),
			}, option.WithJSONSet("return_tokens_as_token_ids", true), option.WithJSONSet("ignore_eos", true))
			if err != nil {
				t.Error(err)
				return
			}
			out[i] = fmt.Sprint(tokenIDs(t, resp.Choices[0].Logprobs.Content))
		}()
	}
	wg.Wait()
	if out[0] != out[1] {
		t.Fatalf("step-0 adapter differs from the base:\n%s\n%s", out[0], out[1])
	}
	if out[2] == out[0] {
		t.Fatalf("trained adapter gives the base output")
	}
	if out[3] != out[2] {
		t.Fatalf("latest step via artifact URI differs from step1")
	}
	prompt := tokenizeMessages(t, env, `[{"role":"system","content":"You are terse."},{"role":"user","content":"adapters"}]`)
	if want := fmt.Sprint(engineGreedy(t, m, trained, prompt, 20)); out[2] != want {
		t.Fatalf("adapter output %s, engine %s", out[2], want)
	}
	projects := map[string]int{}
	env.rec.mu.Lock()
	for _, c := range env.rec.calls {
		projects[c.Project]++
	}
	env.rec.mu.Unlock()
	if projects["alice/proj"] != 3 || projects["alice/inference"] != 1 {
		t.Fatalf("calls recorded in %v, want 3 in alice/proj and 1 in alice/inference", projects)
	}
	if env.srv.adapters.Loads() != 2 {
		t.Fatalf("%d adapter loads, want 2 (cached)", env.srv.adapters.Loads())
	}
}

func TestModelsList(t *testing.T) {
	env := newTestEnv(t, Options{})
	env.res.add("alice/proj/m", Target{Name: "alice/proj/m", BaseModel: tinyID, Step: 1, Entity: "alice", Project: "proj", ModelName: "m"})
	page, err := env.client.Models.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, m := range page.Data {
		ids[m.ID] = true
	}
	if !ids[tinyID] || !ids["alice/proj/m"] {
		t.Fatalf("models: %v", ids)
	}
}

// GET /v1/models/{id}: base and trained models (latest, a step, behind an
// artifact URI, with the slashes escaped as the SDKs send them); an unknown
// or invisible model is 404 model_not_found.
func TestModelsRetrieve(t *testing.T) {
	env := newTestEnv(t, Options{})
	env.res.add("alice/proj/m", Target{Name: "alice/proj/m", BaseModel: tinyID, Step: 1, Entity: "alice", Project: "proj", ModelName: "m"})
	env.res.add("alice/proj/m:step1", Target{Name: "alice/proj/m", BaseModel: tinyID, Step: 1, Entity: "alice", Project: "proj", ModelName: "m"})
	ctx := context.Background()
	m, err := env.client.Models.Get(ctx, tinyID)
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != tinyID || m.Object != "model" || m.OwnedBy != "flywheel" {
		t.Fatalf("base model card: %+v", m)
	}
	for _, id := range []string{"alice/proj/m", "alice/proj/m:step1", "wandb-artifact:///alice/proj/m:step1"} {
		paths := []string{url.PathEscape(id)}
		if !strings.Contains(id, "//") { // the mux cleans an unescaped "//"
			paths = append(paths, id)
		}
		for _, path := range paths {
			r := getRaw(t, env, "/v1/models/"+path)
			var card ModelCard
			if err := json.Unmarshal([]byte(r.body), &card); err != nil || r.status != 200 || card.ID != id || card.OwnedBy != "alice" || card.Root != tinyID {
				t.Fatalf("GET /v1/models/%s: %d %s", path, r.status, r.body)
			}
		}
	}
	for _, id := range []string{"nope", "bob/proj/m", "alice/proj/m:step7", "alice/proj/other"} {
		_, err := env.client.Models.Get(ctx, id)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" {
			t.Fatalf("GET /v1/models/%s: %v", id, err)
		}
	}
}

// system_fingerprint is on every completion and chunk; it names the
// configuration (one value per model and step).
func TestSystemFingerprint(t *testing.T) {
	env := newTestEnv(t, Options{})
	env.res.add("alice/proj/m", Target{Name: "alice/proj/m", BaseModel: tinyID, Step: 1, Entity: "alice", Project: "proj", ModelName: "m"})
	ctx := context.Background()
	// Read from the raw JSON: the Go SDK marks the field deprecated.
	fingerprint := func(raw string) string {
		var v struct {
			SystemFingerprint string `json:"system_fingerprint"`
		}
		json.Unmarshal([]byte(raw), &v)
		return v.SystemFingerprint
	}
	fp := func(model string) string {
		c, err := env.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model, Messages: userMsgs("x"), MaxTokens: openai.Int(2)})
		if err != nil {
			t.Fatal(err)
		}
		return fingerprint(c.RawJSON())
	}
	base, trained := fp(tinyID), fp("alice/proj/m")
	if !strings.HasPrefix(base, "fp_") || base != fp(tinyID) || trained == base || !strings.HasPrefix(trained, "fp_") {
		t.Fatalf("fingerprints: base %q (again %q), trained %q", base, fp(tinyID), trained)
	}
	stream := env.client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: tinyID, Messages: userMsgs("x"), MaxTokens: openai.Int(2)})
	n := 0
	for stream.Next() {
		if got := fingerprint(stream.Current().RawJSON()); got != base {
			t.Fatalf("chunk fingerprint %q, want %q", got, base)
		}
		n++
	}
	if err := stream.Err(); err != nil || n == 0 {
		t.Fatalf("stream: %v (%d chunks)", err, n)
	}
}

func getRaw(t *testing.T, env *testEnv, path string) rawResp {
	t.Helper()
	req, _ := http.NewRequest("GET", env.http.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return rawResp{status: resp.StatusCode, body: string(b), header: resp.Header}
}

func TestTokenizeEndpoints(t *testing.T) {
	env := newTestEnv(t, Options{})
	r := postJSON(t, env, "/tokenize", `{"model":"flywheel/tiny","prompt":"Hello world, hello tokens!"}`)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var tr TokenizeResponse
	json.Unmarshal([]byte(r.body), &tr)
	if tr.Count != len(tr.Tokens) || tr.Count == 0 || tr.MaxModelLen != 2048 {
		t.Fatalf("%s", r.body)
	}
	toks, _ := json.Marshal(tr.Tokens)
	d := postJSON(t, env, "/detokenize", `{"model":"flywheel/tiny","tokens":`+string(toks)+`}`)
	var dr DetokenizeResponse
	json.Unmarshal([]byte(d.body), &dr)
	if d.status != 200 || dr.Prompt != "Hello world, hello tokens!" {
		t.Fatalf("detokenize: %d %s", d.status, d.body)
	}
	msgs := tokenizeMessages(t, env, `[{"role":"user","content":"hi"}]`)
	m, _ := env.reg.Get(tinyID)
	if text := m.Tokenizer.Decode(msgs, false); !strings.HasSuffix(text, "<|im_start|>assistant\n") || !strings.Contains(text, "<|im_start|>user\nhi<|im_end|>") {
		t.Fatalf("chat tokenize rendered %q", text)
	}
	for _, c := range []struct {
		path, body string
		status     int
	}{
		{"/tokenize", `{"model":"flywheel/tiny"}`, 400},
		{"/tokenize", `{"model":"nope","prompt":"x"}`, 404},
		{"/detokenize", `{"model":"flywheel/tiny","tokens":[999999]}`, 400},
		{"/tokenize", `{"model":"bob/p/m","prompt":"x"}`, 404},
	} {
		if r := postJSON(t, env, c.path, c.body); r.status != c.status || !strings.Contains(r.body, `"error"`) {
			t.Fatalf("%s %s: %d %s", c.path, c.body, r.status, r.body)
		}
	}
}

type rawResp struct {
	status  int
	body    string
	header  http.Header
	trailer http.Header
}

func postJSON(t *testing.T, env *testEnv, path, body string) rawResp {
	t.Helper()
	req, _ := http.NewRequest("POST", env.http.URL+path, bytes.NewReader([]byte(body)))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return rawResp{resp.StatusCode, string(b), resp.Header, resp.Trailer}
}

// A key past MaxInflightPerKey requests in flight gets 429 with retry-after
// (on chat, completions and responses), and is served again once one ends.
func TestPerKeyInflight429(t *testing.T) {
	env := newTestEnv(t, Options{MaxInflightPerKey: 2})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	long := `{"model":"flywheel/tiny","max_tokens":1500,"ignore_eos":true,"stream":true,"messages":[{"role":"user","content":"go"}]}`
	startStream(t, ctx, env, long)
	startStream(t, ctx, env, long)
	waitFor(t, func() bool { return env.srv.Stats(tinyID).Active == 2 })
	for path, body := range map[string]string{
		"/v1/chat/completions": `{"model":"flywheel/tiny","max_tokens":2,"messages":[{"role":"user","content":"x"}]}`,
		"/v1/completions":      `{"model":"flywheel/tiny","max_tokens":2,"prompt":"x"}`,
		"/v1/responses":        `{"model":"flywheel/tiny","max_output_tokens":2,"input":"x"}`,
	} {
		r := postJSON(t, env, path, body)
		if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "1" || !strings.Contains(r.body, `"code":"rate_limit_exceeded"`) || !strings.Contains(r.body, "2 inference requests in flight") {
			t.Fatalf("%s: got %d retry-after %q %s", path, r.status, r.header.Get("Retry-After"), r.body)
		}
	}
	cancel()
	waitFor(t, func() bool { s := env.srv.Stats(tinyID); return s.Active == 0 && s.Queued == 0 })
	// The streams' slots are released when their handlers return.
	waitFor(t, func() bool {
		return postJSON(t, env, "/v1/chat/completions", `{"model":"flywheel/tiny","max_tokens":2,"messages":[{"role":"user","content":"x"}]}`).status == http.StatusOK
	})
}
