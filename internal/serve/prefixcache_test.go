package serve

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestPrefixCacheSecondTurn: the second turn of a chat re-sends the first
// turn; with the prefix cache (on by default) it prefills only the new
// tokens and a partial block, its output is the one without the cache
// (same tokens, logprobs to float rounding), and /metrics counts the
// tokens taken from the cache.
func TestPrefixCacheSecondTurn(t *testing.T) {
	on := newTestEnv(t, Options{})
	off := newTestEnv(t, Options{PrefixCacheMB: -1})
	ctx := context.Background()
	history := []openai.ChatCompletionMessageParamUnion{
		openai.SystemMessage("You are terse."),
		openai.UserMessage(strings.Repeat("Tell me about the history of this conversation. ", 8)),
	}
	ask := func(env *testEnv, msgs []openai.ChatCompletionMessageParamUnion) *openai.ChatCompletion {
		t.Helper()
		resp, err := env.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: tinyID, Messages: msgs, MaxTokens: openai.Int(12), Temperature: openai.Float(0), Logprobs: openai.Bool(true),
		}, option.WithJSONSet("return_tokens_as_token_ids", true), option.WithJSONSet("ignore_eos", true))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	first := ask(on, history)
	history = append(history, openai.AssistantMessage(first.Choices[0].Message.Content), openai.UserMessage("And then what happened?"))
	before := on.srv.Stats(tinyID)
	got := ask(on, history)
	prefilled := on.srv.Stats(tinyID).PromptTokens - before.PromptTokens
	want := ask(off, history)
	P := got.Usage.PromptTokens
	// At most the tokens after the first turn's prompt's full blocks.
	if P1 := first.Usage.PromptTokens; prefilled > P-P1/16*16 {
		t.Fatalf("second turn prefilled %d of its %d prompt tokens (first turn: %d)", prefilled, P, P1)
	}
	t.Logf("second turn prefilled %d of its %d prompt tokens", prefilled, P)
	g, w := got.Choices[0].Logprobs.Content, want.Choices[0].Logprobs.Content
	if len(g) != len(w) {
		t.Fatalf("%d vs %d tokens", len(g), len(w))
	}
	for i := range g {
		if g[i].Token != w[i].Token || math.Abs(g[i].Logprob-w[i].Logprob) > 1e-4 {
			t.Fatalf("token %d: %s (%v) with the cache, %s (%v) without", i, g[i].Token, g[i].Logprob, w[i].Token, w[i].Logprob)
		}
	}

	mo := gatherMetrics(t, on.srv)
	if mo["flywheel_prefix_cache_hit_tokens_total"] != float64(P-prefilled) || mo["flywheel_prefix_cache_lookups_total"] != 2 ||
		mo["flywheel_prefix_cache_hits_total"] != 1 || mo["flywheel_prefix_cache_bytes"] <= 0 || mo["flywheel_prefix_cache_budget_bytes"] != DefaultPrefixCacheMB<<20 {
		t.Fatalf("metrics %v (second turn: %d prompt tokens, %d prefilled)", mo, P, prefilled)
	}
	if _, ok := gatherMetrics(t, off.srv)["flywheel_prefix_cache_hit_tokens_total"]; ok {
		t.Fatal("prefix cache metrics with the cache off")
	}
}
