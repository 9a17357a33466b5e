package serve

import (
	"context"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestCompletionsGreedyAndBatched: a text prompt and batched token-id
// prompts, greedy, give exactly the engine's greedy continuation of each
// prompt; choice i*n+j is prompt i's j-th; usage counts every prompt.
func TestCompletionsGreedyAndBatched(t *testing.T) {
	env := newTestEnv(t, Options{})
	m, err := env.reg.Get(tinyID)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	text := "The flywheel spins"
	ids := m.Tokenizer.Encode(text, true)
	resp, err := env.client.Completions.New(ctx, openai.CompletionNewParams{
		Model: openai.CompletionNewParamsModel(tinyID), Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(text)},
		MaxTokens: openai.Int(8), Temperature: openai.Float(0), N: openai.Int(2),
	}, option.WithJSONSet("ignore_eos", true))
	if err != nil {
		t.Fatal(err)
	}
	want := m.Tokenizer.Decode(engineGreedy(t, m, nil, ids, 8), true)
	if resp.Object != "text_completion" || len(resp.Choices) != 2 || resp.Choices[0].Text != want || resp.Choices[1].Text != want {
		t.Fatalf("got %s, want text %q", resp.RawJSON(), want)
	}
	if resp.Usage.PromptTokens != int64(len(ids)) || resp.Usage.CompletionTokens != 16 || resp.Choices[0].FinishReason != "length" {
		t.Fatalf("usage/finish: %s", resp.RawJSON())
	}

	p0, p1 := []int64{5, 6, 7, 8}, []int64{40, 41}
	resp, err = env.client.Completions.New(ctx, openai.CompletionNewParams{
		Model: openai.CompletionNewParamsModel(tinyID), Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokenArrays: [][]int64{p0, p1}},
		MaxTokens: openai.Int(5), Temperature: openai.Float(0), N: openai.Int(2),
	}, option.WithJSONSet("ignore_eos", true))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 4 || resp.Usage.PromptTokens != 6 {
		t.Fatalf("batched: %s", resp.RawJSON())
	}
	for k, p := range [][]int64{p0, p1} {
		ids := make([]int, len(p))
		for i, v := range p {
			ids[i] = int(v)
		}
		want := m.Tokenizer.Decode(engineGreedy(t, m, nil, ids, 5), true)
		for j := 0; j < 2; j++ {
			ch := resp.Choices[k*2+j]
			if ch.Index != int64(k*2+j) || ch.Text != want {
				t.Fatalf("prompt %d choice %d: index %d text %q, want %q", k, j, ch.Index, ch.Text, want)
			}
		}
	}
}

// TestCompletionsEchoLogprobs: echo puts the prompt before the completion;
// legacy logprobs cover the prompt tokens (the first null, the others the
// model's logprob given the tokens before) and the sampled ones, all
// recomputed here from the engine's logits in float64; prompt_logprobs
// gives the same numbers with ranks.
func TestCompletionsEchoLogprobs(t *testing.T) {
	env := newTestEnv(t, Options{})
	m, err := env.reg.Get(tinyID)
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int{3, 17, 29, 8, 60, 12}
	body := `{"model":"flywheel/tiny","prompt":[3,17,29,8,60,12],"max_tokens":6,"temperature":1,"seed":9,"echo":true,"logprobs":3,"prompt_logprobs":2,"ignore_eos":true,"return_tokens_as_token_ids":true}`
	r := postJSON(t, env, "/v1/completions", body)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var resp Completion
	if err := json.Unmarshal([]byte(r.body), &resp); err != nil {
		t.Fatal(err)
	}
	ch := resp.Choices[0]
	lp := ch.Logprobs
	if len(lp.Tokens) != len(prompt)+6 || lp.TokenLogprobs[0] != nil || lp.TopLogprobs[0] != nil {
		t.Fatalf("logprobs shape: %s", r.body)
	}
	if !strings.HasPrefix(ch.Text, m.Tokenizer.Decode(prompt, true)) {
		t.Fatalf("echo: text %q", ch.Text)
	}
	seq := append([]int(nil), prompt...)
	for _, tok := range lp.Tokens[len(prompt):] {
		id, err := strconv.Atoi(strings.TrimPrefix(tok, "token_id:"))
		if err != nil {
			t.Fatal(err)
		}
		seq = append(seq, id)
	}
	logits, err := m.Logits(nil, seq[:len(seq)-1])
	if err != nil {
		t.Fatal(err)
	}
	V := m.Config.VocabSize
	for pos := 1; pos < len(seq); pos++ {
		row := logits[(pos-1)*V : pos*V]
		want := logSoftmaxAt(row, seq[pos], 1)
		if got := *lp.TokenLogprobs[pos]; math.Abs(got-want) > 1e-4 {
			t.Fatalf("position %d: logprob %v, engine %v", pos, got, want)
		}
		if pos < len(prompt) {
			e := ch.PromptLogprobs[pos][strconv.Itoa(seq[pos])]
			rank := 1
			for j, v := range row {
				if v > row[seq[pos]] || v == row[seq[pos]] && j < seq[pos] {
					rank++
				}
			}
			if math.Abs(e.Logprob-want) > 1e-4 || e.Rank != rank {
				t.Fatalf("prompt_logprobs at %d: %+v, want logprob %v rank %d", pos, e, want, rank)
			}
			if n := len(ch.PromptLogprobs[pos]); n < 2 || n > 3 {
				t.Fatalf("prompt_logprobs at %d has %d entries", pos, n)
			}
		}
	}
	if ch.PromptLogprobs[0] != nil || len(ch.PromptLogprobs) != len(prompt) {
		t.Fatalf("prompt_logprobs: %v", ch.PromptLogprobs)
	}
	// offsets run through the text
	for i := 1; i < len(lp.TextOffset); i++ {
		if lp.TextOffset[i] < lp.TextOffset[i-1] {
			t.Fatalf("text_offset decreases: %v", lp.TextOffset)
		}
	}
}

// TestCompletionsStream: the streamed chunks assemble to the text of the
// same seeded request without streaming; the usage chunk comes last.
func TestCompletionsStream(t *testing.T) {
	env := newTestEnv(t, Options{})
	ctx := context.Background()
	params := openai.CompletionNewParams{
		Model: openai.CompletionNewParamsModel(tinyID), Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{"Once upon", "A flywheel"}},
		MaxTokens: openai.Int(12), Temperature: openai.Float(0.9), Seed: openai.Int(4), N: openai.Int(2), Logprobs: openai.Int(2),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	stream := env.client.Completions.NewStreaming(ctx, params)
	texts := map[int64]string{}
	finishes := map[int64]string{}
	ntoks := map[int64]int{}
	var usage int64
	for stream.Next() {
		c := stream.Current()
		if len(c.Choices) == 0 {
			usage = c.Usage.CompletionTokens
			continue
		}
		for _, ch := range c.Choices {
			texts[ch.Index] += ch.Text
			ntoks[ch.Index] += len(ch.Logprobs.Tokens)
			if ch.FinishReason != "" {
				finishes[ch.Index] = string(ch.FinishReason)
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{}
	resp, err := env.client.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, ch := range resp.Choices {
		if texts[ch.Index] != ch.Text || finishes[ch.Index] != string(ch.FinishReason) || ntoks[ch.Index] != len(ch.Logprobs.Tokens) {
			t.Fatalf("choice %d: streamed %q (%s, %d tokens), plain %q (%s, %d tokens)", ch.Index, texts[ch.Index], finishes[ch.Index], ntoks[ch.Index], ch.Text, ch.FinishReason, len(ch.Logprobs.Tokens))
		}
		total += len(ch.Logprobs.Tokens)
	}
	if len(resp.Choices) != 4 || usage != int64(total) {
		t.Fatalf("%d choices, usage %d for %d tokens", len(resp.Choices), usage, total)
	}

	// echo and prompt_logprobs: the prompt comes first in the stream
	params.Echo = openai.Bool(true)
	stream = env.client.Completions.NewStreaming(ctx, params, option.WithJSONSet("prompt_logprobs", 1))
	texts = map[int64]string{}
	withPLP := 0
	for stream.Next() {
		c := stream.Current()
		for _, ch := range c.Choices {
			if texts[ch.Index] == "" && strings.Contains(c.RawJSON(), `"prompt_logprobs":[null,{`) {
				withPLP++
			}
			texts[ch.Index] += ch.Text
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	resp, err = env.client.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range resp.Choices {
		if texts[ch.Index] != ch.Text || !strings.HasPrefix(ch.Text, "Once upon") && !strings.HasPrefix(ch.Text, "A flywheel") {
			t.Fatalf("echo choice %d: streamed %q, plain %q", ch.Index, texts[ch.Index], ch.Text)
		}
	}
	if withPLP != 4 {
		t.Fatalf("%d choices began with prompt_logprobs", withPLP)
	}
}

func TestCompletionsErrors(t *testing.T) {
	env := newTestEnv(t, Options{})
	cases := []struct{ body, param string }{
		{`{"model":"flywheel/tiny","prompt":"x","suffix":"y"}`, "suffix"},
		{`{"model":"flywheel/tiny","prompt":"x","best_of":3}`, "best_of"},
		{`{"model":"flywheel/tiny","prompt":[[1,2],[99999999]]}`, "prompt[1][0]"},
		{`{"model":"flywheel/tiny","prompt":[]}`, "prompt"},
		{`{"model":"flywheel/tiny","prompt":{"a":1}}`, "prompt"},
		{`{"model":"flywheel/tiny"}`, "prompt"},
		{`{"model":"flywheel/tiny","prompt":"x","logprobs":99}`, "logprobs"},
		{`{"model":"flywheel/tiny","prompt":"x","max_tokens":99999}`, "max_tokens"},
	}
	for _, c := range cases {
		r := postJSON(t, env, "/v1/completions", c.body)
		var e struct {
			Error struct{ Param string } `json:"error"`
		}
		if err := json.Unmarshal([]byte(r.body), &e); err != nil || r.status != 400 || e.Error.Param != c.param {
			t.Fatalf("%s: %d %s; want 400 naming %s", c.body, r.status, r.body, c.param)
		}
	}
	// recorded as a "completions" call
	r := postJSON(t, env, "/v1/completions", `{"model":"flywheel/tiny","prompt":"x","max_tokens":2}`)
	call, ok := env.rec.last()
	if r.status != 200 || !ok || call.Op != "completions" || !strings.Contains(string(call.Output), `"text_completion"`) {
		t.Fatalf("recorded %+v", call)
	}
}

// TestChatPromptLogprobs: vLLM's prompt_logprobs on chat completions are
// the model's logprobs of the rendered prompt's tokens.
func TestChatPromptLogprobs(t *testing.T) {
	env := newTestEnv(t, Options{})
	m, err := env.reg.Get(tinyID)
	if err != nil {
		t.Fatal(err)
	}
	msgs := `[{"role":"user","content":"Hello there"}]`
	r := postJSON(t, env, "/v1/chat/completions", `{"model":"flywheel/tiny","max_tokens":2,"prompt_logprobs":1,"messages":`+msgs+`}`)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var resp ChatCompletion
	if err := json.Unmarshal([]byte(r.body), &resp); err != nil {
		t.Fatal(err)
	}
	prompt := tokenizeMessages(t, env, msgs)
	if len(resp.PromptLogprobs) != len(prompt) || resp.PromptLogprobs[0] != nil {
		t.Fatalf("%d prompt_logprobs for %d tokens", len(resp.PromptLogprobs), len(prompt))
	}
	logits, err := m.Logits(nil, prompt)
	if err != nil {
		t.Fatal(err)
	}
	V := m.Config.VocabSize
	for pos := 1; pos < len(prompt); pos++ {
		e, ok := resp.PromptLogprobs[pos][strconv.Itoa(prompt[pos])]
		want := logSoftmaxAt(logits[(pos-1)*V:pos*V], prompt[pos], 1)
		if !ok || math.Abs(e.Logprob-want) > 1e-4 {
			t.Fatalf("position %d: %+v, want %v", pos, resp.PromptLogprobs[pos], want)
		}
	}
	r = postJSON(t, env, "/v1/chat/completions", `{"model":"flywheel/tiny","max_tokens":2,"prompt_logprobs":1,"stream":true,"messages":`+msgs+`}`)
	if r.status != 400 || !strings.Contains(r.body, "prompt_logprobs") {
		t.Fatalf("stream: %d %s", r.status, r.body)
	}
}
