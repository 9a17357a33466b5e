package serve

import (
	"context"
	"testing"

	"github.com/openai/openai-go/v3"
)

// TestChatNSharesPrefill checks that the n choices of a request prefill the
// prompt once (P prompt tokens, not n·P) and that every choice is the same
// as a request of its own: choice i of n=4 with seed s equals the single
// choice of n=1 with seed s+i, prefilled separately.
func TestChatNSharesPrefill(t *testing.T) {
	env := newTestEnv(t, Options{})
	ctx := context.Background()
	lp := openai.Bool(true)
	before := env.srv.Stats(tinyID).PromptTokens
	resp, err := env.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: tinyID, Messages: userMsgs("Tell me a story"), MaxTokens: openai.Int(10), N: openai.Int(4), Seed: openai.Int(3),
		Logprobs: lp, TopLogprobs: openai.Int(2),
	})
	if err != nil {
		t.Fatal(err)
	}
	P := resp.Usage.PromptTokens
	if got := env.srv.Stats(tinyID).PromptTokens - before; got != P {
		t.Fatalf("n=4 request with a %d-token prompt prefilled %d prompt tokens, want %d", P, got, P)
	}
	for i, c := range resp.Choices {
		one, err := env.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: tinyID, Messages: userMsgs("Tell me a story"), MaxTokens: openai.Int(10), Seed: openai.Int(int64(3 + i)),
			Logprobs: lp, TopLogprobs: openai.Int(2),
		})
		if err != nil {
			t.Fatal(err)
		}
		o := one.Choices[0]
		if o.Message.Content != c.Message.Content || o.FinishReason != c.FinishReason || len(o.Logprobs.Content) != len(c.Logprobs.Content) {
			t.Fatalf("choice %d: %q (%s) vs alone %q (%s)", i, c.Message.Content, c.FinishReason, o.Message.Content, o.FinishReason)
		}
		for k, e := range c.Logprobs.Content {
			a := o.Logprobs.Content[k]
			if e.Token != a.Token || e.Logprob != a.Logprob || len(e.TopLogprobs) != len(a.TopLogprobs) {
				t.Fatalf("choice %d token %d: %+v vs alone %+v", i, k, e, a)
			}
		}
	}
}

// TestChatNCancelDuringPrefill cancels an n=4 request while its prompt is
// prefilling one token per step: every choice ends and the batch empties.
func TestChatNCancelDuringPrefill(t *testing.T) {
	env := newTestEnv(t, Options{PrefillChunk: 1})
	ctx, cancel := context.WithCancel(context.Background())
	body := `{"model":"flywheel/tiny","n":4,"max_tokens":1500,"ignore_eos":true,"stream":true,"messages":[{"role":"user","content":"` +
		"a long prompt to prefill one token at a time, again and again and again and again and again and again" + `"}]}`
	startStream(t, ctx, env, body)
	waitFor(t, func() bool { return env.srv.Stats(tinyID).Active == 4 })
	cancel()
	waitFor(t, func() bool { s := env.srv.Stats(tinyID); return s.Active == 0 && s.Queued == 0 })
}
