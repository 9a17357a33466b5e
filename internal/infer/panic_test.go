package infer

import (
	"context"
	"log/slog"
	"strings"
	"testing"
)

// panicConstraint panics when the scheduler asks it for its mask: an
// engine or constraint bug inside a step.
type panicConstraint struct{}

func (panicConstraint) Mask([]float32) []float32 { panic("boom: secret detail") }
func (panicConstraint) Advance(int) bool         { return false }

// A panic inside a scheduler step fails the choices running in it with an
// error (the server answers it as an opaque 500) instead of taking the
// process down, and the scheduler goes on serving the next request.
func TestStepPanicFailsRunningChoicesOnly(t *testing.T) {
	lm := tinyLM(t)
	s := startScheduler(t, lm, Options{Logger: slog.New(slog.DiscardHandler)})
	prompt := lm.Tokenizer.Encode("hi", false)
	g, err := s.Submit(context.Background(), Request{Prompt: prompt, Sampling: greedy(2), MaxTokens: 3,
		NewConstraint: func() Constraint { return panicConstraint{} }})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, g)
	for i := range g.N() {
		if ev := g.Result(i); ev.Err == nil || !strings.Contains(ev.Err.Error(), "panicked") || len(ev.Tokens) != 0 {
			t.Errorf("choice %d: %+v, want failed by the panic with no token", i, ev)
		}
	}
	g, err = s.Submit(context.Background(), Request{Prompt: prompt, Sampling: greedy(1), MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, g)
	if ev := g.Result(0); ev.Err != nil || len(ev.Tokens) == 0 {
		t.Fatalf("after the panic: %+v, want tokens", ev)
	}
}
