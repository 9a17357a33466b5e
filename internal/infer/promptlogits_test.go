package infer

import (
	"context"
	"math"
	"slices"
	"testing"

	"flywheel/internal/engine"
)

// TestPromptLogits: a request with PromptLogits gets the model's logits at
// every prompt position (those of one full pass, to float rounding), even
// when the prefix cache holds the prompt, and still generates exactly what
// a request without them does (n=2: the clones sample from the prefilled
// logits); the blocks it prefilled go to the cache for later requests.
func TestPromptLogits(t *testing.T) {
	m := tinyLM(t)
	s := startScheduler(t, m, Options{PrefixCache: NewPrefixCache(64 << 20), PrefillChunk: 100})
	prompt := make([]int, 3*PromptLogitsChunk+5+2*PrefixBlockTokens)
	for i := range prompt {
		prompt[i] = (i*7 + 3) % m.Config.VocabSize
	}
	V := m.Config.VocabSize
	ref, err := m.Logits(nil, prompt)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := s.Submit(context.Background(), Request{Prompt: prompt, Sampling: greedy(1), MaxTokens: 5, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, plain)
	for round := 0; round < 2; round++ {
		got := map[int]bool{}
		next := 0
		g, err := s.Submit(context.Background(), Request{Prompt: prompt, Sampling: greedy(2), MaxTokens: 5, IgnoreEOS: true,
			PromptLogits: func(pos int, row []float32) {
				if pos != next {
					t.Errorf("position %d, want %d", pos, next)
				}
				next++
				got[pos] = true
				for j := range row {
					if d := math.Abs(float64(row[j] - ref[pos*V+j])); d > 1e-4 {
						t.Fatalf("round %d position %d token %d: %v, full pass %v", round, pos, j, row[j], ref[pos*V+j])
					}
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		wait(t, g)
		if len(got) != len(prompt)-1 {
			t.Fatalf("round %d: logits of %d positions, want %d", round, len(got), len(prompt)-1)
		}
		for c := 0; c < 2; c++ {
			if a, b := ids(g.Result(c).Tokens), ids(plain.Result(0).Tokens); !slices.Equal(a, b) {
				t.Fatalf("round %d choice %d: %v, without prompt logits %v", round, c, a, b)
			}
		}
	}
	before := s.Stats().PrefixHitTokens
	g, _ := s.Submit(context.Background(), Request{Prompt: prompt, Sampling: []engine.SamplingParams{{}}, MaxTokens: 1})
	wait(t, g)
	if s.Stats().PrefixHitTokens-before < int64(2*PrefixBlockTokens) {
		t.Fatalf("a later request took %d tokens from the cache", s.Stats().PrefixHitTokens-before)
	}
}
