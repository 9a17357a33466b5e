package infer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"flywheel/internal/engine"
)

// stepSampler records the scheduler step at which its choice sampled its
// first token.
type stepSampler struct {
	Sampler
	s     *Scheduler
	first atomic.Int64 // 0 until the first token
}

func (p *stepSampler) Sample(logits []float32) (int, float32, []engine.TokenLogprob) {
	p.first.CompareAndSwap(0, p.s.steps.Load())
	return p.Sampler.Sample(logits)
}

// ttftSteps submits a one-choice request of tenant and returns the
// scheduler steps run from its submission to its first token, and the time.
func ttftSteps(t *testing.T, s *Scheduler, tenant string, prompt []int) (int64, time.Duration) {
	t.Helper()
	var rec *stepSampler
	req := Request{Prompt: prompt, Sampling: greedy(1), MaxTokens: 2, Tenant: tenant,
		NewSampler: func(p engine.SamplingParams) Sampler {
			rec = &stepSampler{Sampler: engine.NewSampler(p), s: s}
			return rec
		}}
	start, before := time.Now(), s.steps.Load()
	g, err := s.Submit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	for g.TokenCount() == 0 && !g.Done() {
		<-g.Changed()
	}
	took := time.Since(start)
	wait(t, g)
	if rec == nil || rec.first.Load() == 0 {
		t.Fatal("no token sampled")
	}
	return rec.first.Load() - before, took
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
		deadline := time.Now().Add(30 * time.Second)
		for st := s.Stats(); st.Active < active || st.Queued == 0; st = s.Stats() {
			if time.Now().After(deadline) {
				t.Fatalf("the flood did not fill its share: %d running, %d queued, want %d running", st.Active, st.Queued, active)
			}
			time.Sleep(time.Millisecond)
		}
		return cancel
	}
	opts := Options{MaxBatch: 8}

	s := startScheduler(t, lm, opts)
	alone, aloneT := ttftSteps(t, s, "b", prompt)
	cancel := flood(s, "a", 6)
	if got := s.Stats().MaxBatch; got != 6 {
		t.Errorf("the flooding tenant ran %d choices at once, want its share 6 of 8", got)
	}
	shared, sharedT := ttftSteps(t, s, "b", prompt)
	cancel()
	t.Logf("time to first token: alone %d steps (%v), beside the flood %d steps (%v)", alone, aloneT, shared, sharedT)
	if alone < 1 || shared > 2*alone {
		t.Fatalf("beside the flood the first token took %d steps, alone %d: want at most twice", shared, alone)
	}

	// The control: one FIFO queue makes the request wait for the flood's
	// 24 completions of 200 tokens (at least two rounds of the batch).
	fifo := startScheduler(t, lm, opts)
	cancel = flood(fifo, "", 8)
	defer cancel()
	if waited, _ := ttftSteps(t, fifo, "", prompt); waited < 200 {
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
