package serve

import (
	"context"
	"testing"

	"github.com/openai/openai-go/v3"

	"flywheel/internal/store"
)

// The store satisfies the resolver's interface. (*trace.Service satisfies
// CallRecorder; not asserted here so this package's tests do not depend on
// the call store's.)
var _ ModelStore = store.Store(nil)

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
