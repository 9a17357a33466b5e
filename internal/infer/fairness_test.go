package infer

import (
	"context"
	"testing"
)

// drive runs the body of the scheduler's loop once on the test's
// goroutine (the scheduler is built without its loop): admit, drop the
// cancelled, one step. Step counts are then exact, whatever the machine's
// load.
func drive(s *Scheduler) {
	s.admit()
	s.dropCancelled()
	if len(s.active) > 0 {
		s.safeStep()
	}
}

// drain cancels what cancel covers and drives s until nothing runs or
// waits, so every sequence's cache is released.
func drain(s *Scheduler, cancel context.CancelFunc) {
	cancel()
	for {
		s.mu.Lock()
		waiting := len(s.waiting)
		s.mu.Unlock()
		if len(s.active) == 0 && waiting == 0 {
			return
		}
		drive(s)
	}
}

// ttftSteps submits a one-choice request of tenant and returns the
// scheduler steps run from its submission to its first token.
func ttftSteps(t *testing.T, s *Scheduler, tenant string, prompt []int) int64 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // the next drive drops the request
	g, err := s.Submit(ctx, Request{Prompt: prompt, Sampling: greedy(1), MaxTokens: 2, Tenant: tenant})
	if err != nil {
		t.Fatal(err)
	}
	before := s.steps.Load()
	for g.TokenCount() == 0 {
		if g.Done() || s.steps.Load()-before > 100_000 {
			t.Fatal("no token sampled")
		}
		drive(s)
	}
	return s.steps.Load() - before
}

// One tenant floods the scheduler (a full batch and a long queue of long
// completions); another tenant's request still gets its first token within
// twice the steps it takes on an idle scheduler, because admission is round
// robin by tenant and the flood holds at most TenantShare of the batch.
// Without tenants (one FIFO queue) the same request waits for the flood.
func TestTenantBurstDoesNotDelayAnother(t *testing.T) {
	lm := tinyLM(t)
	prompt := lm.Tokenizer.Encode("the other tenant asks", false)
	// flood queues 24 long completions of tenant and waits until active of
	// them run (the rest queued).
	flood := func(s *Scheduler, tenant string, active int64) context.CancelFunc {
		ctx, cancel := context.WithCancel(context.Background())
		for range 24 {
			if _, err := s.Submit(ctx, Request{Prompt: prompt, Sampling: greedy(1), MaxTokens: 200, IgnoreEOS: true, Tenant: tenant}); err != nil {
				t.Fatal(err)
			}
		}
		drive(s)
		if st := s.Stats(); st.Active < active || st.Queued == 0 {
			t.Fatalf("the flood did not fill its share: %d running, %d queued, want %d running", st.Active, st.Queued, active)
		}
		return cancel
	}
	opts := Options{MaxBatch: 8}

	s := newScheduler(lm, func() Options { o := opts; o.defaults(); return o }())
	alone := ttftSteps(t, s, "b", prompt)
	cancel := flood(s, "a", 6)
	if got := s.Stats().MaxBatch; got != 6 {
		t.Errorf("the flooding tenant ran %d choices at once, want its share 6 of 8", got)
	}
	shared := ttftSteps(t, s, "b", prompt)
	drain(s, cancel)
	t.Logf("time to first token: alone %d steps, beside the flood %d steps", alone, shared)
	if alone < 1 || shared > 2*alone {
		t.Fatalf("beside the flood the first token took %d steps, alone %d: want at most twice", shared, alone)
	}

	// The control: one FIFO queue makes the request wait for the flood's
	// 24 completions of 200 tokens (at least two rounds of the batch).
	fifo := newScheduler(lm, func() Options { o := opts; o.defaults(); return o }())
	cancel = flood(fifo, "", 8)
	defer drain(fifo, cancel)
	if waited := ttftSteps(t, fifo, "", prompt); waited < 200 {
		t.Fatalf("without tenants the request waited %d steps, want the flood's (≥ 200)", waited)
	}
}

// The queue is round robin by tenant: with one batch slot, requests of
// tenants a (three queued first) and b (two) run a, b, a, b, a.
func TestAdmissionRoundRobinByTenant(t *testing.T) {
	lm := tinyLM(t)
	s := newScheduler(lm, func() Options { o := Options{MaxBatch: 1}; o.defaults(); return o }())
	prompt := lm.Tokenizer.Encode("hi", false)
	var gens []*Generation
	for _, tenant := range []string{"a", "a", "a", "b", "b"} {
		g, err := s.Submit(context.Background(), Request{Prompt: prompt, Sampling: greedy(1), MaxTokens: 1, Tenant: tenant})
		if err != nil {
			t.Fatal(err)
		}
		gens = append(gens, g)
	}
	var order []string
	for range gens {
		s.admit()
		if len(s.active) != 1 {
			t.Fatalf("%d running, want 1", len(s.active))
		}
		order = append(order, s.active[0].gen.req.Tenant)
		s.active[0].seq.Release()
		s.active = s.active[:0]
	}
	if got := order[0] + order[1] + order[2] + order[3] + order[4]; got != "ababa" {
		t.Fatalf("admission order %s, want ababa", got)
	}
}
