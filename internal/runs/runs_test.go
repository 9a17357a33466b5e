package runs

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"flywheel/internal/auth"
	"flywheel/internal/checkpoints"
	"flywheel/internal/engine"
	"flywheel/internal/engine/tiny"
	"flywheel/internal/pgtest"
	"flywheel/internal/safetensors"
	"flywheel/internal/store"
)

// harness is the service over a real SQLite store and flywheel/tiny.
type harness struct {
	t      testing.TB
	db     store.Database
	layout store.Layout
	reg    *engine.Registry
	models string
	p      *auth.Principal
}

func newHarness(t testing.TB) *harness { return newHarnessOn(t, "") }

// newHarnessOn is newHarness over database dbURL ("" for SQLite in the
// data dir); with PostgreSQL the data dir is shared by every service the
// harness makes, as by the nodes of a deployment.
func newHarnessOn(t testing.TB, dbURL string) *harness {
	t.Helper()
	dir := t.TempDir()
	models := filepath.Join(dir, "models")
	if err := tiny.Ensure(models); err != nil {
		t.Fatal(err)
	}
	db, layout, err := store.OpenDataDir(t.Context(), filepath.Join(dir, "data"), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	u, err := db.EnsureUser(t.Context(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, db: db, layout: layout, reg: engine.NewRegistry(models), models: models,
		p: &auth.Principal{UserID: u.ID, UserName: "alice", PersonalEntity: "alice", Entities: []string{"alice"}}}
}

// service returns a service of node over the harness's store (not started).
func (h *harness) service(node string) *Service {
	return New(Config{Store: h.db.(Store), Models: h.reg, ModelsDir: h.models, Layout: h.layout,
		Checkpoints: checkpoints.New(h.db, h.layout, slog.New(slog.DiscardHandler), false),
		NodeID:      node, Logger: slog.New(slog.DiscardHandler)})
}

func (h *harness) resolve(s *Service, id string) store.TrainingRun {
	h.t.Helper()
	mods := append([]string(nil), engine.AllModules...)
	sort.Strings(mods)
	body, _ := json.Marshal(map[string]any{"request_id": id, "spec": map[string]any{"base_model": tiny.ID, "dtype": "bfloat16",
		"lora_rank": 4, "lora_target_modules": mods, "seed": 7}, "initial_state": nil})
	run, err := s.Resolve(h.t.Context(), h.p, body)
	if err != nil {
		h.t.Fatal(err)
	}
	return run
}

func (h *harness) submit(s *Service, run store.TrainingRun, kind string, body map[string]any) store.TrainingOperation {
	h.t.Helper()
	raw, _ := json.Marshal(body)
	op, err := s.Submit(h.t.Context(), h.p, run.ID, kind, raw)
	if err != nil {
		h.t.Fatalf("%s: %v", kind, err)
	}
	return op
}

// wait polls until the operation is terminal and returns it.
func (h *harness) wait(op store.TrainingOperation) store.TrainingOperation {
	h.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, err := h.db.(Store).TrainingOperationByID(h.t.Context(), op.RunID, op.ID)
		if err != nil {
			h.t.Fatal(err)
		}
		switch got.Status {
		case store.OpSucceeded, store.OpFailed, store.OpCancelled:
			return got
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("operation %s still %s", op.ID, got.Status)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// weights reads the adapter of learner version v of a run.
func (h *harness) weights(runID string, v int) map[string][]float32 {
	h.t.Helper()
	f, err := safetensors.Open(filepath.Join(h.layout.RunVersionDir(runID, v), checkpoints.AdapterFile))
	if err != nil {
		h.t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]float32{}
	for _, n := range f.Names() {
		x, err := f.Tensor(n).Float32()
		if err != nil {
			h.t.Fatal(err)
		}
		out[n] = append([]float32(nil), x...)
	}
	return out
}

func row(name, dtype string, shape []int, data []float64) map[string]any {
	return map[string]any{"name": name, "dtype": dtype, "shape": shape, "values": map[string]any{"encoding": "dense", "data": data}}
}

// matrix is a random TokenMatrix with every row a loss may read.
func matrix(rng *rand.Rand, id string, T, K int, rows []string) map[string]any {
	vals := func(n int, f func() float64) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = f()
		}
		return out
	}
	all := map[string]map[string]any{
		"token_ids":         row("token_ids", "int64", []int{T}, vals(T, func() float64 { return float64(3 + rng.IntN(200)) })),
		"target_token_ids":  row("target_token_ids", "int64", []int{T, K}, vals(T*K, func() float64 { return float64(3 + rng.IntN(200)) })),
		"loss_weights":      row("loss_weights", "float32", []int{T, K}, vals(T*K, func() float64 { return float64(rng.IntN(3)) / 2 })),
		"advantages":        row("advantages", "float32", []int{T, K}, vals(T*K, func() float64 { return rng.NormFloat64() })),
		"behavior_logprobs": row("behavior_logprobs", "float32", []int{T, K}, vals(T*K, func() float64 { return -6 - rng.Float64() })),
	}
	var rs []any
	for _, n := range append([]string{"token_ids", "target_token_ids"}, rows...) {
		rs = append(rs, all[n])
	}
	return map[string]any{"kind": "matrix", "matrix_id": id, "rows": rs}
}

func fb(id string, seq int, matrices []any, loss map[string]any) map[string]any {
	return map[string]any{"request_id": id, "sequence_id": seq, "batch": map[string]any{"kind": "token_matrix", "matrices": matrices},
		"loss": loss, "return_token_logprobs": true}
}

func optim(id string, seq int) map[string]any {
	return map[string]any{"request_id": id, "sequence_id": seq, "optimizer": map[string]any{"learning_rate": 0.01,
		"beta1": 0.9, "beta2": 0.99, "eps": 1e-8, "weight_decay": 0.1, "grad_clip_norm": 0}}
}

// referenceLoss is the client's execute_token_matrix_loss, written out
// again in float64 from its torch code: weights masked by the rows
// present, the ratio, the clamp, dpo's per-matrix log-ratio sums and
// −logsigmoid. detached holds the values torch detaches (cispo's clipped
// ratio), so finite differences of it give the surrogate's gradient.
func referenceLoss(ls lossSpec, tb *tokenBatch, lp, detached []float64) float64 {
	var L float64
	switch ls.Name {
	case "cross_entropy":
		for i := range lp {
			L += -(lp[i] * tb.w[i])
		}
	case "importance_sampling":
		for i := range lp {
			L += -(math.Exp(lp[i]-tb.bl[i]) * tb.a[i] * tb.w[i])
		}
	case "cispo":
		for i := range lp {
			r := math.Exp(detached[i] - tb.bl[i])
			c := math.Max(ls.ClipLow, math.Min(ls.ClipHigh, r))
			L += -(c * lp[i] * tb.a[i] * tb.w[i])
		}
	case "dpo":
		sums := map[string]float64{}
		for i := range lp {
			sums[tb.ids[tb.matrix[i]]] += (lp[i] - tb.bl[i]) * tb.w[i]
		}
		for _, p := range ls.Pairs {
			x := ls.Beta * (sums[p.ChosenMatrixID] - sums[p.RejectedMatrixID])
			L += math.Log1p(math.Exp(-x)) // −log σ(x)
		}
	}
	return L
}

// TestLossesMatchTheClientFormula checks each loss's value against the
// client's formula in float64 and its gradient against central finite
// differences of that formula, on random batches with the learner's
// logprobs of flywheel/tiny, relative error ≤ 1e-6.
func TestLossesMatchTheClientFormula(t *testing.T) {
	h := newHarness(t)
	base, err := h.reg.Get(tiny.ID)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	cases := []struct {
		loss map[string]any
		rows []string
		K    int
	}{
		{map[string]any{"name": "cross_entropy"}, []string{"loss_weights"}, 3},
		{map[string]any{"name": "importance_sampling", "normalize_advantages": false}, []string{"behavior_logprobs", "advantages", "loss_weights"}, 1},
		{map[string]any{"name": "cispo", "normalize_advantages": false, "clip_low_threshold": 0.5, "clip_high_threshold": 1.5}, []string{"behavior_logprobs", "advantages"}, 1},
		{map[string]any{"name": "dpo", "beta": 0.3, "matrix_pairs": []any{
			map[string]any{"component_id": "c0", "chosen_matrix_id": "m0", "rejected_matrix_id": "m1"},
			map[string]any{"component_id": "c1", "chosen_matrix_id": "m3", "rejected_matrix_id": "m2"}}},
			[]string{"loss_weights", "behavior_logprobs"}, 1},
	}
	for _, c := range cases {
		t.Run(c.loss["name"].(string), func(t *testing.T) {
			var ms []any
			for i := 0; i < 4; i++ {
				ms = append(ms, matrix(rng, fmt.Sprintf("m%d", i), 5+i, c.K, c.rows))
			}
			raw, _ := json.Marshal(fb("x", 0, ms, c.loss))
			var req ForwardRequest
			if err := json.Unmarshal(raw, &req); err != nil {
				t.Fatal(err)
			}
			ls, err := req.Loss.check()
			if err != nil {
				t.Fatal(err)
			}
			tb, err := buildBatch(req.Batch, &ls, base.Config)
			if err != nil {
				t.Fatal(err)
			}
			ad, _ := engine.NewAdapter(base.Config, engine.LoRAConfig{Rank: 2, Alpha: 4, TargetModules: engine.AllModules}, 1)
			lp, err := base.Net().ForwardBatch(tb.b, engine.NewLoRA[float32](ad, false), engine.DefaultBudgets)
			if err != nil {
				t.Fatal(err)
			}
			L, g := lossAndGrad(ls, tb, lp.LogProb)
			ref := referenceLoss(ls, tb, lp.LogProb, lp.LogProb)
			if rel := math.Abs(L-ref) / math.Max(math.Abs(ref), 1e-12); rel > 1e-6 || ref == 0 {
				t.Fatalf("loss %.12g, formula %.12g (rel %.2g)", L, ref, rel)
			}
			x := append([]float64(nil), lp.LogProb...)
			var gmax float64
			for _, v := range g {
				gmax = math.Max(gmax, math.Abs(v))
			}
			for i := range x {
				const eps = 1e-5
				x0 := x[i]
				x[i] = x0 + eps
				up := referenceLoss(ls, tb, x, lp.LogProb)
				x[i] = x0 - eps
				down := referenceLoss(ls, tb, x, lp.LogProb)
				x[i] = x0
				num := (up - down) / (2 * eps)
				if d := math.Abs(g[i] - num); d > 1e-6*math.Max(math.Abs(num), gmax) {
					t.Fatalf("row %d: gradient %.12g, finite difference %.12g", i, g[i], num)
				}
			}
			if gmax == 0 {
				t.Fatal("all gradients are zero: the test checks nothing")
			}
		})
	}
}

// Two forward_backward calls then optim_step give the weights of one
// forward_backward on the concatenated batch then optim_step: gradients
// accumulate as the sum.
func TestAccumulationEqualsConcatenatedBatch(t *testing.T) {
	h := newHarness(t)
	s := h.service("n1")
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(5, 6))
	rows := []string{"behavior_logprobs", "advantages"}
	a := []any{matrix(rng, "a0", 7, 1, rows), matrix(rng, "a1", 9, 1, rows)}
	b := []any{matrix(rng, "b0", 6, 1, rows)}
	loss := map[string]any{"name": "importance_sampling", "normalize_advantages": false}

	split := h.resolve(s, "split")
	h.submit(s, split, KindForwardBackward, fb("f1", 0, a, loss))
	h.submit(s, split, KindForwardBackward, fb("f2", 1, b, loss))
	o1 := h.wait(h.submit(s, split, KindOptimStep, optim("o", 2)))

	whole := h.resolve(s, "whole")
	h.submit(s, whole, KindForwardBackward, fb("f", 0, append(append([]any(nil), a...), b...), loss))
	o2 := h.wait(h.submit(s, whole, KindOptimStep, optim("o", 1)))
	if o1.Status != store.OpSucceeded || o2.Status != store.OpSucceeded {
		t.Fatalf("optim_step: %s %s / %s %s", o1.Status, o1.ErrorMessage, o2.Status, o2.ErrorMessage)
	}
	w0, w1, w2 := h.weights(split.ID, 0), h.weights(split.ID, 1), h.weights(whole.ID, 1)
	moved := false
	for n, x := range w1 {
		for i := range x {
			d := math.Abs(float64(x[i]) - float64(w2[n][i]))
			step := math.Abs(float64(w2[n][i]) - float64(w0[n][i]))
			if d > 1e-6*math.Max(step, 1e-3) {
				t.Fatalf("%s[%d]: %g after two calls, %g after one (step %g)", n, i, x[i], w2[n][i], step)
			}
			moved = moved || step > 1e-4
		}
	}
	if !moved {
		t.Fatal("the step moved no weight")
	}
}

// A node that dies mid-run (its lease left behind, an operation marked
// running, a learner-version folder written but never committed) loses
// nothing: after a restart the operations complete once, and the weights
// are those of a run that was never interrupted.
func TestRestartResumesWithoutLossOrDoubling(t *testing.T) {
	h := newHarness(t)
	rng := rand.New(rand.NewPCG(9, 9))
	rows := []string{"behavior_logprobs", "advantages"}
	loss := map[string]any{"name": "cispo", "normalize_advantages": false}
	batches := [][]any{{matrix(rng, "a", 8, 1, rows)}, {matrix(rng, "b", 6, 1, rows)}, {matrix(rng, "c", 7, 1, rows)}}
	admit := func(s *Service, run store.TrainingRun) []store.TrainingOperation {
		var ops []store.TrainingOperation
		ops = append(ops, h.submit(s, run, KindForwardBackward, fb("f1", 0, batches[0], loss)))
		ops = append(ops, h.submit(s, run, KindForwardBackward, fb("f2", 1, batches[1], loss)))
		ops = append(ops, h.submit(s, run, KindOptimStep, optim("o1", 2)))
		ops = append(ops, h.submit(s, run, KindForwardBackward, fb("f3", 3, batches[2], loss)))
		ops = append(ops, h.submit(s, run, KindOptimStep, optim("o2", 4)))
		return ops
	}

	// the reference: one node, never interrupted
	ref := h.service("ref")
	if err := ref.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	refRun := h.resolve(ref, "ref")
	for _, op := range admit(ref, refRun) {
		if got := h.wait(op); got.Status != store.OpSucceeded {
			t.Fatalf("reference %s: %s %s", op.Kind, got.Status, got.ErrorMessage)
		}
	}
	ref.Close()

	// the crashed node: it ran f1 and f2, then died during o1, leaving o1
	// running under its lease and a torn folder for version 1.
	st := h.db.(Store)
	dead := h.service("dead")
	run := h.resolve(dead, "crashed")
	ops := admit(dead, run)
	ctx := context.Background()
	if ok, err := st.AcquireRunLease(ctx, run.ID, "dead", time.Hour); !ok || err != nil {
		t.Fatal(ok, err)
	}
	for _, op := range ops[:2] {
		runNow, _ := st.TrainingRunByID(ctx, run.ID)
		if err := dead.execute(ctx, runNow, op); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.StartOperation(ctx, "dead", run.ID, ops[2].ID); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(h.layout.RunVersionDir(run.ID, 1), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.layout.RunVersionDir(run.ID, 1), checkpoints.AdapterFile), []byte("torn"), 0o600); err != nil {
		t.Fatal(err)
	}

	leftover := h.layout.RunWorkDir(run.ID, 2, "dead")
	if err := os.MkdirAll(leftover, 0o700); err != nil {
		t.Fatal(err)
	}

	// restart: a new process on the same store (one node: stale leases go)
	s := h.service("restarted")
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, op := range ops {
		if got := h.wait(op); got.Status != store.OpSucceeded {
			t.Fatalf("%s after restart: %s %s", op.Kind, got.Status, got.ErrorMessage)
		}
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Fatalf("the dead node's work folder was not swept: %v", err)
	}
	final, _ := st.TrainingRunByID(ctx, run.ID)
	if final.CommittedVersion != 2 || final.ProjectedVersion != 2 {
		t.Fatalf("versions after restart: committed %d projected %d", final.CommittedVersion, final.ProjectedVersion)
	}
	var res struct {
		Contributing []string `json:"contributing_operation_ids"`
	}
	o1, _ := st.TrainingOperationByID(ctx, run.ID, ops[2].ID)
	if err := json.Unmarshal(o1.Result, &res); err != nil || len(res.Contributing) != 2 || res.Contributing[0] != ops[0].ID || res.Contributing[1] != ops[1].ID {
		t.Fatalf("optim_step 1 contributions: %s", o1.Result)
	}
	want, got := h.weights(refRun.ID, 2), h.weights(run.ID, 2)
	for n, x := range want {
		for i := range x {
			if x[i] != got[n][i] {
				t.Fatalf("%s[%d]: %g after the restart, %g uninterrupted", n, i, got[n][i], x[i])
			}
		}
	}
	// what is kept is bounded: version 1 (superseded, never saved) and the
	// bodies before the last committed step are gone
	// (the folder goes just after the commit the test saw: wait for it)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, err := os.Stat(h.layout.RunVersionDir(run.ID, 1)); os.IsNotExist(err) {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("superseded version 1 kept: %v", err)
		}
	}
	all, _ := st.TrainingOperations(ctx, run.ID, 0, 10)
	for _, o := range all {
		if (o.Sequence < 4) != (len(o.Body) == 0) {
			t.Fatalf("operation %d (%s) keeps %d body bytes", o.Sequence, o.Kind, len(o.Body))
		}
	}
}

// logprobs decodes a forward's token_logprobs.
func logprobs(t *testing.T, op store.TrainingOperation) []float32 {
	t.Helper()
	if op.Status != store.OpSucceeded {
		t.Fatalf("%s: %s %s", op.Kind, op.Status, op.ErrorMessage)
	}
	var res struct {
		TokenLogprobs []struct {
			MatrixID string `json:"matrix_id"`
			Shape    []int  `json:"shape"`
			Data     []byte `json:"data"`
		} `json:"token_logprobs"`
	}
	if err := json.Unmarshal(op.Result, &res); err != nil {
		t.Fatal(err)
	}
	var out []float32
	for _, m := range res.TokenLogprobs {
		if len(m.Data) != 4*m.Shape[0]*m.Shape[1] {
			t.Fatalf("token_logprobs of %s: %d bytes for shape %v", m.MatrixID, len(m.Data), m.Shape)
		}
		for i := 0; i < len(m.Data); i += 4 {
			out = append(out, math.Float32frombits(uint32(m.Data[i])|uint32(m.Data[i+1])<<8|uint32(m.Data[i+2])<<16|uint32(m.Data[i+3])<<24))
		}
	}
	return out
}

func sameFloats(a, b []float32) bool {
	if len(a) != len(b) || len(a) == 0 {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// save_state names a learner version; load_state and a run's initial_state
// restore it: forwards at the same version give the same logprobs.
func TestSaveAndLoadState(t *testing.T) {
	h := newHarness(t)
	s := h.service("n1")
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	batch := []any{matrix(rng, "a", 9, 1, []string{"loss_weights"})}
	ce := map[string]any{"name": "cross_entropy"}
	run := h.resolve(s, "r1")
	f0 := h.wait(h.submit(s, run, KindForward, fb("f0", 0, batch, ce)))
	h.submit(s, run, KindForwardBackward, fb("fb", 1, batch, ce))
	h.submit(s, run, KindOptimStep, optim("o", 2))
	saved := h.wait(h.submit(s, run, KindSaveState, map[string]any{"request_id": "s", "sequence_id": 3, "checkpoint_name": "after-1", "ttl_seconds": nil, "overwrite": false}))
	var sres struct {
		Checkpoint struct {
			ID string `json:"checkpoint_id"`
			V  int    `json:"learner_version"`
		} `json:"checkpoint"`
		Archive map[string]any `json:"archive"`
	}
	if err := json.Unmarshal(saved.Result, &sres); err != nil || saved.Status != store.OpSucceeded || sres.Checkpoint.V != 1 || sres.Archive["checkpoint_id"] != sres.Checkpoint.ID {
		t.Fatalf("save_state: %s %s %v", saved.Status, saved.Result, err)
	}
	f1 := h.wait(h.submit(s, run, KindForward, fb("f1", 4, batch, ce)))
	if sameFloats(logprobs(t, f0), logprobs(t, f1)) {
		t.Fatal("the optimizer step changed no logprob")
	}
	load := h.wait(h.submit(s, run, KindLoadState, map[string]any{"request_id": "l", "sequence_id": 5,
		"source": map[string]any{"kind": "service_checkpoint", "checkpoint_id": run.ID + "/v0"}, "restore_optimizer": false}))
	if load.Status != store.OpSucceeded || load.ReservedVersion == nil || *load.ReservedVersion != 2 {
		t.Fatalf("load_state: %+v", load)
	}
	f2 := h.wait(h.submit(s, run, KindForward, fb("f2", 6, batch, ce)))
	if !sameFloats(logprobs(t, f0), logprobs(t, f2)) {
		t.Fatal("load_state of version 0 does not give version 0's logprobs")
	}

	// a second run starting from the saved state
	body, _ := json.Marshal(map[string]any{"request_id": "r2", "spec": map[string]any{"base_model": tiny.ID, "dtype": "bfloat16",
		"lora_rank": 4, "lora_target_modules": sortedModules(), "seed": 7},
		"initial_state": map[string]any{"source": map[string]any{"kind": "service_checkpoint", "checkpoint_id": sres.Checkpoint.ID}, "restore_optimizer": true}})
	run2, err := s.Resolve(t.Context(), h.p, body)
	if err != nil {
		t.Fatal(err)
	}
	g := h.wait(h.submit(s, run2, KindForward, fb("f", 0, batch, ce)))
	if !sameFloats(logprobs(t, f1), logprobs(t, g)) {
		t.Fatal("a run from the saved state does not start at its weights")
	}

	// results can be released
	if _, err := h.db.(Store).ReleaseResult(t.Context(), run.ID, f2.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := h.db.(Store).TrainingOperationByID(t.Context(), run.ID, f2.ID); got.Result != nil || !got.ResultReleased {
		t.Fatalf("released result: %+v", got)
	}
}

func sortedModules() []string {
	mods := append([]string(nil), engine.AllModules...)
	sort.Strings(mods)
	return mods
}

// An admitted operation can be cancelled before it runs; a learner
// transition cannot (later operations build on its version). An
// optim_step with nothing accumulated fails the run, and the operations
// admitted after it fail with it.
func TestCancelAndFailedTransition(t *testing.T) {
	h := newHarness(t)
	s := h.service("n1")
	run := h.resolve(s, "r")
	rng := rand.New(rand.NewPCG(1, 3))
	batch := []any{matrix(rng, "a", 5, 1, []string{"loss_weights"})}
	ce := map[string]any{"name": "cross_entropy"}
	f := h.submit(s, run, KindForwardBackward, fb("f", 0, batch, ce))
	o := h.submit(s, run, KindOptimStep, optim("o", 1))
	after := h.submit(s, run, KindForward, fb("g", 2, batch, ce))
	st := h.db.(Store)
	c, err := st.CancelOperation(t.Context(), run.ID, f.ID)
	if err != nil || c.Status != store.OpCancelled || !c.CancelRequested {
		t.Fatalf("cancel: %+v %v", c, err)
	}
	if _, err := st.CancelOperation(t.Context(), run.ID, o.ID); err == nil {
		t.Fatal("a learner transition was cancelled")
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := h.wait(o); got.Status != store.OpFailed || got.ErrorCode != "no_gradients" {
		t.Fatalf("optim_step with nothing accumulated: %+v", got)
	}
	if got := h.wait(after); got.Status != store.OpFailed || got.ErrorCode != "run_failed" {
		t.Fatalf("operation after the failed transition: %+v", got)
	}
	r, _ := st.TrainingRunByID(t.Context(), run.ID)
	if r.Status != store.RunFailed || r.CommittedVersion != 0 {
		t.Fatalf("run after a failed transition: %+v", r)
	}
	if _, err := os.Stat(h.layout.RunVersionDir(run.ID, 1)); !os.IsNotExist(err) {
		t.Fatalf("a failed step left version 1 behind: %v", err)
	}
}

// With PostgreSQL several nodes share the runs: any node admits and
// answers for any run, the node holding a run's lease executes it, and
// when that node stops another one takes the run over with no operation
// lost or applied twice (the weights equal one node's).
func TestNodesShareRunsPostgres(t *testing.T) {
	h := newHarnessOn(t, pgtest.DSN(t))
	rng := rand.New(rand.NewPCG(9, 9))
	rows := []string{"behavior_logprobs", "advantages"}
	loss := map[string]any{"name": "cispo", "normalize_advantages": false}
	batches := [][]any{{matrix(rng, "a", 8, 1, rows)}, {matrix(rng, "b", 6, 1, rows)}, {matrix(rng, "c", 7, 1, rows)}}

	ref := h.service("ref")
	if err := ref.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	refRun := h.resolve(ref, "ref")
	var last store.TrainingOperation
	for i, b := range batches {
		h.submit(ref, refRun, KindForwardBackward, fb(fmt.Sprint("f", i), 2*i, b, loss))
		last = h.submit(ref, refRun, KindOptimStep, optim(fmt.Sprint("o", i), 2*i+1))
	}
	if got := h.wait(last); got.Status != store.OpSucceeded {
		t.Fatalf("reference: %s %s", got.Status, got.ErrorMessage)
	}
	ref.Close()

	front := h.service("front") // admits only
	n1 := h.service("n1")
	if err := n1.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	run := h.resolve(front, "shared")
	h.submit(front, run, KindForwardBackward, fb("f0", 0, batches[0], loss))
	if got := h.wait(h.submit(front, run, KindOptimStep, optim("o0", 1))); got.Status != store.OpSucceeded {
		t.Fatalf("on node 1: %s %s", got.Status, got.ErrorMessage)
	}
	h.submit(front, run, KindForwardBackward, fb("f1", 2, batches[1], loss))
	if got := h.wait(h.submit(front, run, KindForward, fb("g", 3, batches[1], loss))); got.Status != store.OpSucceeded {
		t.Fatal(got.ErrorMessage)
	}
	n1.Close() // node 1 goes; its learner (with f1's gradients) goes with it
	n2 := h.service("n2")
	if err := n2.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer n2.Close()
	h.submit(front, run, KindOptimStep, optim("o1", 4))
	h.submit(front, run, KindForwardBackward, fb("f2", 5, batches[2], loss))
	if got := h.wait(h.submit(front, run, KindOptimStep, optim("o2", 6))); got.Status != store.OpSucceeded {
		t.Fatalf("on node 2: %s %s", got.Status, got.ErrorMessage)
	}
	want, got := h.weights(refRun.ID, 3), h.weights(run.ID, 3)
	for n, x := range want {
		for i := range x {
			if x[i] != got[n][i] {
				t.Fatalf("%s[%d]: %g across nodes, %g on one", n, i, got[n][i], x[i])
			}
		}
	}
}

// A small body cannot make a huge batch: spans are expanded only within
// the batch's value budget.
func TestBatchValueBound(t *testing.T) {
	h := newHarness(t)
	base, err := h.reg.Get(tiny.ID)
	if err != nil {
		t.Fatal(err)
	}
	big := map[string]any{"name": "loss_weights", "dtype": "float32", "shape": []int{1 << 20, 256},
		"values": map[string]any{"encoding": "spans", "default": 1.0, "spans": []any{}}}
	raw, _ := json.Marshal(fb("x", 0, []any{map[string]any{"matrix_id": "m", "rows": []any{big}}}, map[string]any{"name": "cross_entropy"}))
	var req ForwardRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		t.Fatal(err)
	}
	ls, _ := req.Loss.check()
	_, err = buildBatch(req.Batch, &ls, base.Config)
	if err == nil || !strings.Contains(err.Error(), "batch.matrices[0].rows[0].shape") {
		t.Fatalf("a 256 Mi-value row: %v", err)
	}
}
