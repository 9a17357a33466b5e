package serve

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"flywheel/internal/engine"
	"flywheel/internal/infer"
	"flywheel/internal/store"
)

// The store satisfies the resolver's interface. (*trace.Service satisfies
// CallRecorder; not asserted here so this package's tests do not depend on
// the call store's.)
var _ ModelStore = store.Store(nil)

type panicSampler struct{}

func (panicSampler) Sample([]float32) (int, float32, []engine.TokenLogprob) { panic("boom") }

func TestSchedulerPanicFailsRequestOnly(t *testing.T) {
	env := newTestEnv(t, Options{})
	env.srv.newSampler = func(engine.SamplingParams) infer.Sampler { return panicSampler{} }
	_, err := env.client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: tinyID, Messages: userMsgs("x"), MaxTokens: openai.Int(2)})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 500 || strings.Contains(apiErr.Message, "boom") {
		t.Fatalf("want an opaque 500, got %v", err)
	}
	env.srv.newSampler = newEngineSampler
	if _, err := env.client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: tinyID, Messages: userMsgs("x"), MaxTokens: openai.Int(2)}); err != nil {
		t.Fatalf("server did not survive: %v", err)
	}
}

func TestMetricsCollector(t *testing.T) {
	env := newTestEnv(t, Options{})
	if _, err := env.client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: tinyID, Messages: userMsgs("x"), MaxTokens: openai.Int(3)}); err != nil {
		t.Fatal(err)
	}
	found := gatherMetrics(t, env.srv)
	if found["flywheel_serve_generated_tokens_total"] < 1 || found["flywheel_serve_steps_total"] < 1 {
		t.Fatalf("metrics %v", found)
	}
}
