package runs

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"flywheel/internal/engine"
	"flywheel/internal/engine/tiny"
	"flywheel/internal/store"
	"flywheel/internal/train"
)

// BenchmarkOperationOverhead measures what the training-run API adds to a
// forward_backward on flywheel/tiny: each iteration times the learner's
// own ForwardBackward on the batch (the compute) and the same batch as an
// operation (check, admission in SQLite, the executor's pick-up, the
// result's recording), from Submit until the store shows it succeeded.
// overhead-ms/op is the difference.
func BenchmarkOperationOverhead(b *testing.B) {
	h := newHarness(b)
	s := h.service("bench")
	if err := s.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	batch := []any{matrix(rng, "a", 64, 1, []string{"behavior_logprobs", "advantages"}), matrix(rng, "b", 48, 1, []string{"behavior_logprobs", "advantages"})}
	loss := map[string]any{"name": "cispo", "normalize_advantages": false}
	run := h.resolve(s, "bench")
	// the compute alone, on a learner of the same shape
	raw, _ := json.Marshal(fb("x", 0, batch, loss))
	var req ForwardRequest
	json.Unmarshal(raw, &req)
	sp := &Spec{BaseModel: tiny.ID, LoRARank: 4, LoRATargetModules: engine.AllModules}
	tb, ls, err := s.checkForward(&req, sp)
	if err != nil {
		b.Fatal(err)
	}
	base, _ := h.reg.Get(tiny.ID)
	ad, _ := engine.NewAdapter(base.Config, sp.loraConfig(), 7)
	l, err := train.NewLearner(h.reg, tiny.ID, ad, nil)
	if err != nil {
		b.Fatal(err)
	}
	st := h.db.(Store)
	var compute, total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, _, err := l.ForwardBackward(tb.b, func(lp []float64) (float64, []float64) { return lossAndGrad(ls, tb, lp) }); err != nil {
			b.Fatal(err)
		}
		compute += time.Since(t0)
		body, _ := json.Marshal(fb(fmt.Sprint("r", i), i, batch, loss))
		t1 := time.Now()
		op, err := s.Submit(b.Context(), h.p, run.ID, KindForwardBackward, body)
		if err != nil {
			b.Fatal(err)
		}
		for {
			got, err := st.TrainingOperationByID(b.Context(), run.ID, op.ID)
			if err != nil {
				b.Fatal(err)
			}
			if got.Status == store.OpSucceeded {
				break
			}
			if got.Status != store.OpAdmitted && got.Status != store.OpRunning {
				b.Fatalf("operation %s: %s", got.Status, got.ErrorMessage)
			}
			time.Sleep(50 * time.Microsecond)
		}
		total += time.Since(t1)
	}
	b.ReportMetric(float64(compute.Microseconds())/1000/float64(b.N), "compute-ms/op")
	b.ReportMetric(float64((total-compute).Microseconds())/1000/float64(b.N), "overhead-ms/op")
}
