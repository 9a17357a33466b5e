package e2e

// A replay of the requests the newest OpenPipe ART serverless client sends
// to the training-run API (src/art/serverless/client.py TrainingRuns and
// native_training.py RemoteTrainingClient, driven as backend.py's
// _train_model does: forward_backward with the cispo loss, optim_step with
// AdamConfig's defaults, save_weights_for_sampler to the model's name, each
// polled until terminal), over HTTP against the service built by app.New.
// Bodies are serialised as the client does (model_dump(mode="json",
// exclude={"run_id"}) with the loss values flattened into "loss").

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"flywheel/internal/app"
	"flywheel/internal/engine"
	"flywheel/internal/jobs"
)

// runOp is the public operation the client parses (_PublicTrainingOperation).
type runOp struct {
	OperationID     string          `json:"operation_id"`
	RunID           string          `json:"run_id"`
	RequestID       string          `json:"request_id"`
	SequenceID      int             `json:"sequence_id"`
	Kind            string          `json:"kind"`
	Status          string          `json:"status"`
	ParentVersion   int             `json:"learner_parent_version"`
	ReservedVersion *int            `json:"reserved_output_learner_version"`
	AdmittedAt      time.Time       `json:"admitted_at"`
	StartedAt       *time.Time      `json:"started_at"`
	EndedAt         *time.Time      `json:"ended_at"`
	CancelRequested bool            `json:"cancel_requested"`
	EventCursor     int             `json:"latest_event_cursor"`
	ResultSummary   json.RawMessage `json:"result_summary"`
	ResultRef       json.RawMessage `json:"result_ref"`
	Error           map[string]any  `json:"error"`
}

type runView struct {
	RunID     string         `json:"run_id"`
	RunName   *string        `json:"run_name"`
	Spec      map[string]any `json:"spec"`
	Status    string         `json:"status"`
	Next      int            `json:"next_sequence_id"`
	Projected int            `json:"projected_learner_version"`
	Committed int            `json:"committed_learner_version"`
}

// resolveRun is TrainingRuns.resolve as backend.training_client calls it
// (no run name, no initial state).
func (c *artClient) resolveRun(requestID string, spec map[string]any) runView {
	var r runView
	c.must("POST", "/training/runs:resolve", map[string]any{"request_id": requestID, "spec": spec, "initial_state": nil}, &r)
	return r
}

// submit is TrainingRuns.submit.
func (c *artClient) submit(runID, kind string, body map[string]any) runOp {
	var op runOp
	c.must("POST", "/training/runs/"+runID+"/"+kind, body, &op)
	return op
}

// wait is RemoteTrainingOperation._wait_terminal (polling the operation).
func (c *artClient) wait(op runOp) runOp {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var got runOp
		c.must("GET", "/training/runs/"+op.RunID+"/operations/"+op.OperationID, nil, &got)
		if got.OperationID != op.OperationID || got.SequenceID != op.SequenceID || got.Kind != op.Kind ||
			got.ParentVersion != op.ParentVersion {
			c.t.Fatalf("remote operation identity changed: %+v then %+v", op, got)
		}
		switch got.Status {
		case "succeeded", "failed", "cancelled":
			if got.StartedAt != nil && got.StartedAt.Before(got.AdmittedAt) || got.EndedAt == nil {
				c.t.Fatalf("operation timeline: %+v", got)
			}
			return got
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("operation %s still %s", op.OperationID, got.Status)
		}
		time.Sleep(c.poll)
	}
}

func denseRow(name, dtype string, shape []int, data []float64) map[string]any {
	return map[string]any{"name": name, "dtype": dtype, "shape": shape, "values": map[string]any{"encoding": "dense", "data": data}}
}

// coefficientRow is ART's _coefficient_row: a float32 [T,1] row as spans
// over its nonzero runs (default [0.0]), or dense when that is shorter.
func coefficientRow(name string, values []float64) map[string]any {
	var spans []any
	for start := 0; start < len(values); {
		end := start + 1
		for end < len(values) && values[end] == values[start] {
			end++
		}
		if values[start] != 0 {
			spans = append(spans, map[string]any{"start": start, "end": end, "value": []float64{values[start]}})
		}
		start = end
	}
	if len(spans)*3+1 < len(values) {
		if spans == nil {
			spans = []any{}
		}
		return map[string]any{"name": name, "dtype": "float32", "shape": []int{len(values), 1},
			"values": map[string]any{"encoding": "spans", "default": []float64{0}, "spans": spans}}
	}
	return denseRow(name, "float32", []int{len(values), 1}, values)
}

// rlMatrix is one trajectory lowered to a TokenMatrix as ART's
// token_matrix_batch_from_art_rollouts does: targets shifted by one (0
// after the last token), the completion's positions carrying the
// normalized weight, the advantage and the sampled logprobs (coefficient
// rows), and the policy version (spans over a default of -1).
func rlMatrix(id string, tokens []int, prompt int, adv float64, blp []float64) map[string]any {
	T := len(tokens)
	tok := make([]float64, T)
	tgt := make([]float64, T)
	for i, x := range tokens {
		tok[i] = float64(x)
		if i+1 < T {
			tgt[i] = float64(tokens[i+1])
		}
	}
	w, a, b := make([]float64, T), make([]float64, T), make([]float64, T)
	for t := prompt - 1; t < T-1; t++ {
		w[t], a[t], b[t] = 1, adv, blp[t-prompt+1]
	}
	return map[string]any{"kind": "matrix", "matrix_id": id, "packing_affinity_id": "prompt-0", "rows": []any{
		denseRow("token_ids", "int64", []int{T}, tok),
		denseRow("target_token_ids", "int64", []int{T, 1}, tgt),
		coefficientRow("loss_weights", w),
		coefficientRow("advantages", a),
		coefficientRow("behavior_logprobs", b),
		map[string]any{"name": "policy_version", "dtype": "int64", "shape": []int{T}, "values": map[string]any{
			"encoding": "spans", "default": -1, "spans": []any{map[string]any{"start": prompt - 1, "end": T - 1, "value": 0}}}},
	}}
}

func cispoLoss() map[string]any {
	return map[string]any{"name": "cispo", "normalize_advantages": false, "clip_low_threshold": 0.0, "clip_high_threshold": 5.0}
}

func fbBody(reqID string, seq int, matrices []any, loss map[string]any) map[string]any {
	return map[string]any{"request_id": reqID, "sequence_id": seq,
		"batch":                  map[string]any{"kind": "token_matrix", "matrices": matrices, "routes": []any{}},
		"loss":                   loss,
		"collect_packing_shapes": false, "retain_packed_input": false, "return_token_logprobs": false}
}

func optimBody(reqID string, seq int, lr float64) map[string]any {
	return map[string]any{"request_id": reqID, "sequence_id": seq, "optimizer": map[string]any{
		"learning_rate": lr, "beta1": 0.9, "beta2": 0.99, "eps": 1e-13, "weight_decay": 0.1, "grad_clip_norm": 0.1}}
}

func publishBody(reqID string, seq int, name string, alias string) map[string]any {
	return map[string]any{"request_id": reqID, "sequence_id": seq, "checkpoint_name": name, "ttl_seconds": nil,
		"publication": map[string]any{"target": "saved_generation", "model_alias": alias}}
}

func tinySpec() map[string]any {
	mods := append([]string(nil), engine.AllModules...)
	sort.Strings(mods)
	return map[string]any{"base_model": "flywheel/tiny", "dtype": "bfloat16", "lora_rank": 8, "lora_target_modules": mods, "seed": nil}
}

// firstLogprob samples one token from model (seeded) and returns its logprob.
func firstLogprob(c *artClient, model string) float64 {
	c.t.Helper()
	ch := c.complete(map[string]any{"model": model, "max_tokens": 1, "logprobs": true, "seed": 3,
		"return_tokens_as_token_ids": true, "messages": []any{userMsg("hi")}})
	if len(ch) != 1 {
		c.t.Fatalf("completion on %s: %v", model, ch)
	}
	content := ch[0]["logprobs"].(map[string]any)["content"].([]any)
	return content[0].(map[string]any)["logprob"].(float64)
}

func TestARTTrainingRunReplay(t *testing.T) {
	url, key := server(t)
	c := &artClient{t: t, base: url, key: key, poll: 20 * time.Millisecond}
	m := c.register("runs-e2e", "agent-001", "flywheel/tiny")

	spec := tinySpec()
	run := c.resolveRun("resolve-0123", spec)
	if run.Status != "open" || run.Next != 0 || run.Projected != 0 || run.Committed != 0 || run.RunName != nil {
		t.Fatalf("resolved run: %+v", run)
	}
	specJSON, _ := json.Marshal(spec)
	gotSpec, _ := json.Marshal(run.Spec)
	if string(specJSON) != string(gotSpec) {
		t.Fatalf("spec echoed as %s, sent %s", gotSpec, specJSON)
	}
	if again := c.resolveRun("resolve-0123", spec); again.RunID != run.RunID {
		t.Fatalf("resolve replay made run %s, first %s", again.RunID, run.RunID)
	}

	prompt := []int{5, 6, 7, 8}
	var lastPub runOp
	for step := 1; step <= 3; step++ {
		seq := (step - 1) * 3
		matrices := []any{
			rlMatrix("traj-0", append(append([]int(nil), prompt...), 20, 21, 22, 23), 4, 1.0, []float64{-5, -5, -5, -5}),
			rlMatrix("traj-1", append(append([]int(nil), prompt...), 30, 31, 32), 4, -1.0, []float64{-5, -5, -5}),
		}
		rid := fmt.Sprintf("%032x", step)
		fb := c.submit(run.RunID, "forward_backward", fbBody("fb-"+rid, seq, matrices, cispoLoss()))
		if fb.Kind != "forward_backward" || fb.SequenceID != seq || fb.ParentVersion != step-1 || fb.ReservedVersion != nil {
			t.Fatalf("admitted forward_backward: %+v", fb)
		}
		// the SDK retries a POST whose answer it lost: same request, same operation
		if re := c.submit(run.RunID, "forward_backward", fbBody("fb-"+rid, seq, matrices, cispoLoss())); re.OperationID != fb.OperationID {
			t.Fatalf("retried forward_backward admitted as %s, first %s", re.OperationID, fb.OperationID)
		}
		fbDone := c.wait(fb)
		if fbDone.Status != "succeeded" {
			t.Fatalf("forward_backward: %+v", fbDone)
		}
		var fbRes struct {
			OperationID string `json:"operation_id"`
			Kind        string `json:"kind"`
			Packing     struct {
				PackedSequences int `json:"packed_sequences"`
				LogicalTokens   int `json:"logical_tokens"`
				PhysicalTokens  int `json:"physical_tokens"`
			} `json:"packing"`
			Training struct {
				Accepted int              `json:"accepted_trainable_tokens"`
				Policy   []map[string]int `json:"policy_token_counts"`
			} `json:"training"`
			Loss struct {
				ContractID string  `json:"contract_id"`
				Value      float64 `json:"value"`
				Reduction  string  `json:"reduction"`
			} `json:"loss"`
			ProducedGradient bool `json:"produced_gradient"`
		}
		if err := json.Unmarshal(fbDone.ResultSummary, &fbRes); err != nil {
			t.Fatal(err)
		}
		if fbRes.OperationID != fb.OperationID || fbRes.Kind != "forward_backward" || fbRes.Packing.PackedSequences != 2 ||
			fbRes.Packing.LogicalTokens != 15 || fbRes.Packing.PhysicalTokens != 11 || fbRes.Training.Accepted != 7 || !fbRes.ProducedGradient ||
			fbRes.Loss.ContractID != "cispo_v1" || fbRes.Loss.Reduction != "mean_active_token" ||
			len(fbRes.Training.Policy) != 1 || fbRes.Training.Policy[0]["accepted_trainable_tokens"] != 7 {
			t.Fatalf("forward_backward result: %s", fbDone.ResultSummary)
		}

		opt := c.submit(run.RunID, "optim_step", optimBody("optim-"+rid, seq+1, 1e-2))
		if opt.ReservedVersion == nil || *opt.ReservedVersion != step || opt.ParentVersion != step-1 {
			t.Fatalf("admitted optim_step: %+v", opt)
		}
		optDone := c.wait(opt)
		var optRes struct {
			Contributing   []string `json:"contributing_operation_ids"`
			LearnerVersion int      `json:"learner_version"`
			Checkpoint     struct {
				ID             string `json:"checkpoint_id"`
				LearnerVersion int    `json:"learner_version"`
			} `json:"checkpoint"`
		}
		if err := json.Unmarshal(optDone.ResultSummary, &optRes); err != nil || optDone.Status != "succeeded" {
			t.Fatalf("optim_step: %+v %v", optDone, err)
		}
		if len(optRes.Contributing) != 1 || optRes.Contributing[0] != fb.OperationID || optRes.LearnerVersion != step || optRes.Checkpoint.LearnerVersion != step {
			t.Fatalf("optim_step result: %s", optDone.ResultSummary)
		}

		pub := c.submit(run.RunID, "save_weights_for_sampler", publishBody("publish-"+rid, seq+2, fmt.Sprintf("step-%d", step), m.Name))
		if pub.ParentVersion != step || pub.ReservedVersion != nil {
			t.Fatalf("admitted save_weights_for_sampler: %+v", pub)
		}
		pubDone := c.wait(pub)
		lastPub = pub
		var pubRes map[string]any
		if err := json.Unmarshal(pubDone.ResultSummary, &pubRes); err != nil || pubDone.Status != "succeeded" {
			t.Fatalf("save_weights_for_sampler: %+v %v", pubDone, err)
		}
		want := fmt.Sprintf("%s/%s/%s:step%d", m.Entity, m.Project, m.Name, step)
		if pubRes["generation_id"] != want || pubRes["target"] != "saved_generation" || pubRes["model_alias"] != m.Name || pubRes["learner_version"] != float64(step) {
			t.Fatalf("save_weights_for_sampler result: %s", pubDone.ResultSummary)
		}
		if got := c.getStep(m); got != step {
			t.Fatalf("model step %d after publishing learner version %d", got, step)
		}
		// the published step serves under the model's inference name, with
		// the new weights: the same sampled token has another logprob
		lp := firstLogprob(c, inferenceName(m, step))
		if prev := firstLogprob(c, inferenceName(m, step-1)); lp == prev {
			t.Fatalf("step %d serves the weights of step %d (logprob %v)", step, step-1, lp)
		}
	}
	// the last operation's result, its release, and a cancel that comes too late
	var res map[string]any
	c.must("GET", "/training/runs/"+run.RunID+"/operations/"+lastPub.OperationID+"/result", nil, &res)
	if res["operation_id"] != lastPub.OperationID || res["kind"] != "save_weights_for_sampler" {
		t.Fatalf("result: %v", res)
	}
	var rel map[string]any
	c.must("POST", "/training/runs/"+run.RunID+"/operations/"+lastPub.OperationID+"/result:release", map[string]any{"request_id": "rel-1"}, &rel)
	if rel["released"] != true || rel["request_id"] != "rel-1" || rel["operation_id"] != lastPub.OperationID {
		t.Fatalf("release: %v", rel)
	}
	if st, raw := c.do("GET", "/training/runs/"+run.RunID+"/operations/"+lastPub.OperationID+"/result", nil); st != http.StatusGone {
		t.Fatalf("released result: %d %s", st, raw)
	}
	var cancelled runOp
	c.must("POST", "/training/runs/"+run.RunID+"/operations/"+lastPub.OperationID+":cancel", nil, &cancelled)
	if cancelled.Status != "succeeded" {
		t.Fatalf("cancel after the end: %+v", cancelled)
	}
	var got runView
	c.must("GET", "/training/runs/"+run.RunID, nil, &got)
	if got.Next != 9 || got.Projected != 3 || got.Committed != 3 || got.Status != "open" {
		t.Fatalf("run after 3 steps: %+v", got)
	}
	var closed runView
	c.must("POST", "/training/runs/"+run.RunID+":close", map[string]any{"request_id": "close-1"}, &closed)
	if closed.Status != "closed" {
		t.Fatalf("closed run: %+v", closed)
	}
	if st, body := c.do("POST", "/training/runs/"+run.RunID+"/optim_step", optimBody("late", 9, 1e-3)); st != http.StatusConflict {
		t.Fatalf("command on a closed run: %d %s", st, body)
	}
}

// Every bad input of the training-run API is a 4xx naming the field, and
// nothing is admitted by it; another entity's run is 404.
func TestTrainingRunBadInput(t *testing.T) {
	l := startLive(t)
	c := &artClient{t: t, base: l.url, key: l.key, poll: 10 * time.Millisecond}
	m := c.register("runs-bad", "agent", "flywheel/tiny")
	run := c.resolveRun("resolve-bad", tinySpec())
	good := []any{rlMatrix("t0", []int{5, 6, 7, 20, 21}, 3, 1, []float64{-5, -5})}
	fbOp := c.submit(run.RunID, "forward_backward", fbBody("fb-0", 0, good, cispoLoss()))

	mutate := func(f func(b map[string]any)) map[string]any {
		b := fbBody("fb-x", 1, []any{rlMatrix("t0", []int{5, 6, 7, 20, 21}, 3, 1, []float64{-5, -5})}, cispoLoss())
		f(b)
		return b
	}
	rows := func(b map[string]any) []any {
		return b["batch"].(map[string]any)["matrices"].([]any)[0].(map[string]any)["rows"].([]any)
	}
	cases := []struct {
		name, path string
		body       any
		status     int
		param      string
	}{
		{"wrong sequence id", "/forward_backward", mutate(func(b map[string]any) { b["sequence_id"] = 5 }), 409, "sequence_id"},
		{"sequence id reused", "/forward_backward", mutate(func(b map[string]any) { b["sequence_id"] = 0 }), 409, "sequence_id"},
		{"request id replayed with other content", "/forward_backward", fbBody("fb-0", 0, good, map[string]any{"name": "cispo", "normalize_advantages": false, "clip_high_threshold": 3.0}), 409, "request_id"},
		{"unknown loss", "/forward_backward", mutate(func(b map[string]any) { b["loss"] = map[string]any{"name": "ppo", "normalize_advantages": false} }), 400, "loss.name"},
		{"normalize_advantages", "/forward_backward", mutate(func(b map[string]any) { b["loss"].(map[string]any)["normalize_advantages"] = true }), 400, "loss.normalize_advantages"},
		{"clip low above high", "/forward_backward", mutate(func(b map[string]any) { b["loss"].(map[string]any)["clip_low_threshold"] = 9.0 }), 400, "loss.clip_low_threshold"},
		{"row shapes disagree", "/forward_backward", mutate(func(b map[string]any) {
			rows(b)[4] = denseRow("behavior_logprobs", "float32", []int{4, 1}, []float64{0, 0, 0, 0})
		}), 400, "batch.matrices[0].rows[4].shape"},
		{"dense data count", "/forward_backward", mutate(func(b map[string]any) {
			rows(b)[0] = denseRow("token_ids", "int64", []int{5}, []float64{1, 2, 3})
		}), 400, "batch.matrices[0].rows[0].values.data"},
		{"token outside the vocabulary", "/forward_backward", mutate(func(b map[string]any) {
			rows(b)[0] = denseRow("token_ids", "int64", []int{5}, []float64{1, 2, 3, 4, 1e9})
		}), 400, "batch.matrices[0].rows[0].values"},
		{"missing advantages", "/forward_backward", mutate(func(b map[string]any) {
			r := rows(b)
			b["batch"].(map[string]any)["matrices"].([]any)[0].(map[string]any)["rows"] = []any{r[0], r[1], r[2], r[4]}
		}), 400, "batch.matrices[0].rows"},
		{"span past the end", "/forward_backward", mutate(func(b map[string]any) {
			rows(b)[2].(map[string]any)["values"].(map[string]any)["spans"] = []any{map[string]any{"start": 2, "end": 9, "value": []float64{1}}}
		}), 400, "batch.matrices[0].rows[2].values.spans[0].end"},
		{"no batch", "/forward_backward", map[string]any{"request_id": "x", "sequence_id": 1, "loss": cispoLoss()}, 400, "batch"},
		{"no sequence id", "/optim_step", map[string]any{"request_id": "x", "optimizer": map[string]any{"learning_rate": 1e-3}}, 400, "sequence_id"},
		{"negative learning rate", "/optim_step", optimBody("o", 1, -1), 400, "optimizer.learning_rate"},
		{"beta1 of 1", "/optim_step", map[string]any{"request_id": "o", "sequence_id": 1, "optimizer": map[string]any{"learning_rate": 1e-3, "beta1": 1.0}}, 400, "optimizer.beta1"},
		{"unknown model alias", "/save_weights_for_sampler", publishBody("p", 1, "s", "nobody"), 400, "publication.model_alias"},
		{"bad publication target", "/save_weights_for_sampler", map[string]any{"request_id": "p", "sequence_id": 1, "checkpoint_name": "s", "publication": map[string]any{"target": "x", "model_alias": m.Name}}, 400, "publication.target"},
		{"bad load source", "/load_state", map[string]any{"request_id": "l", "sequence_id": 1, "source": map[string]any{"kind": "wandb_artifact", "artifact": "nope"}}, 400, "source.artifact"},
		{"unknown command", "/train", map[string]any{}, 404, ""},
	}
	for _, tc := range cases {
		st, raw := c.do("POST", "/training/runs/"+run.RunID+tc.path, tc.body)
		var env struct {
			Error struct {
				Param *string `json:"param"`
			} `json:"error"`
		}
		json.Unmarshal(raw, &env)
		param := ""
		if env.Error.Param != nil {
			param = *env.Error.Param
		}
		if st != tc.status || param != tc.param {
			t.Errorf("%s: %d param %q, want %d %q: %s", tc.name, st, param, tc.status, tc.param, raw)
		}
	}
	var got runView
	c.must("GET", "/training/runs/"+run.RunID, nil, &got)
	if got.Next != 1 || got.Projected != 0 {
		t.Fatalf("bad inputs were admitted: %+v", got)
	}
	if done := c.wait(fbOp); done.Status != "succeeded" {
		t.Fatalf("forward_backward: %+v", done)
	}
	// resolve: the spec is checked, a replayed request id with another spec is refused
	for _, tc := range []struct {
		body  map[string]any
		param string
	}{
		{map[string]any{"request_id": "r", "spec": map[string]any{"base_model": "nope/model", "dtype": "bfloat16", "lora_rank": 4, "lora_target_modules": []string{"q_proj"}, "seed": nil}}, "spec.base_model"},
		{map[string]any{"request_id": "r", "spec": map[string]any{"base_model": "flywheel/tiny", "dtype": "bfloat16", "lora_rank": 0, "lora_target_modules": []string{"q_proj"}, "seed": nil}}, "spec.lora_rank"},
		{map[string]any{"request_id": "r", "spec": map[string]any{"base_model": "flywheel/tiny", "dtype": "bfloat16", "lora_rank": 4, "lora_target_modules": []string{"nope"}, "seed": nil}}, "spec.lora_target_modules"},
		{map[string]any{"request_id": "resolve-bad", "spec": map[string]any{"base_model": "flywheel/tiny", "dtype": "bfloat16", "lora_rank": 2, "lora_target_modules": []string{"q_proj"}, "seed": nil}}, "request_id"},
	} {
		st, raw := c.do("POST", "/training/runs:resolve", tc.body)
		if st/100 != 4 || !strings.Contains(string(raw), `"param":"`+tc.param+`"`) {
			t.Errorf("resolve %v: %d %s", tc.body, st, raw)
		}
	}

	// tenancy: bob sees none of alice's run
	if _, err := l.a.Store.EnsureUser(t.Context(), "bob"); err != nil {
		t.Fatal(err)
	}
	_, bobKey, err := l.a.Store.CreateKey(t.Context(), "bob", "k", "")
	if err != nil {
		t.Fatal(err)
	}
	bob := &artClient{t: t, base: l.url, key: bobKey}
	for _, r := range []struct{ method, path string }{
		{"GET", "/training/runs/" + run.RunID},
		{"POST", "/training/runs/" + run.RunID + ":close"},
		{"POST", "/training/runs/" + run.RunID + "/optim_step"},
		{"GET", "/training/runs/" + run.RunID + "/operations/" + fbOp.OperationID},
		{"GET", "/training/runs/" + run.RunID + "/operations/" + fbOp.OperationID + "/result"},
		{"POST", "/training/runs/" + run.RunID + "/operations/" + fbOp.OperationID + ":cancel"},
	} {
		if st, raw := bob.do(r.method, r.path, optimBody("o", 1, 1e-3)); st != 404 {
			t.Errorf("bob %s %s: %d %s", r.method, r.path, st, raw)
		}
	}
}

// A server stopped with operations admitted and not yet run (and one
// perhaps running) resumes them after a restart on the same data dir: the
// client's polling completes, every optim_step commits exactly one version
// from exactly its forward_backward, and the published step serves.
func TestTrainingRunSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	start := func() (*artClient, func()) {
		a, err := app.New(t.Context(), app.Config{DataDir: filepath.Join(dir, "data"), ModelsDir: filepath.Join(dir, "models"), Workers: jobs.DefaultWorkers,
			BootstrapKey: testKey, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(a.Handler())
		return &artClient{t: t, base: srv.URL, key: testKey, poll: 10 * time.Millisecond}, func() { srv.Close(); a.Close() }
	}
	c, stop := start()
	m := c.register("restart", "agent", "flywheel/tiny")
	run := c.resolveRun("resolve-restart", tinySpec())
	toks := make([]int, 600)
	for i := range toks {
		toks[i] = 5 + i%40
	}
	var ops []runOp
	for i := 0; i < 4; i++ {
		ops = append(ops, c.submit(run.RunID, "forward_backward", fbBody(fmt.Sprint("fb", i), 2*i,
			[]any{rlMatrix("t", toks, 10, 1, make([]float64, 590))}, cispoLoss())))
		ops = append(ops, c.submit(run.RunID, "optim_step", optimBody(fmt.Sprint("o", i), 2*i+1, 1e-3)))
	}
	ops = append(ops, c.submit(run.RunID, "save_weights_for_sampler", publishBody("p", 8, "step-4", m.Name)))
	var before runView
	c.must("GET", "/training/runs/"+run.RunID, nil, &before)
	stop()
	t.Logf("committed learner version at the stop: %d of 4", before.Committed)

	c, stop = start()
	defer stop()
	for i, op := range ops {
		op.RunID = run.RunID
		done := c.wait(op)
		if done.Status != "succeeded" {
			t.Fatalf("%s after the restart: %+v", op.Kind, done)
		}
		if op.Kind == "optim_step" {
			var res struct {
				Contributing []string `json:"contributing_operation_ids"`
				V            int      `json:"learner_version"`
			}
			json.Unmarshal(done.ResultSummary, &res)
			if len(res.Contributing) != 1 || res.Contributing[0] != ops[i-1].OperationID || res.V != i/2+1 {
				t.Fatalf("optim_step %d: %s", i/2, done.ResultSummary)
			}
		}
	}
	var got runView
	c.must("GET", "/training/runs/"+run.RunID, nil, &got)
	if got.Committed != 4 || got.Projected != 4 || got.Next != 9 {
		t.Fatalf("run after the restart: %+v", got)
	}
	if step := c.getStep(m); step != 4 {
		t.Fatalf("model step %d", step)
	}
	if ch := c.complete(map[string]any{"model": inferenceName(m, 4), "max_tokens": 2, "messages": []any{userMsg("hi")}}); len(ch) != 1 {
		t.Fatalf("completion: %v", ch)
	}
}

// sftMatrix is one chat lowered as ART's token_matrix_batch_from_sft does:
// targets are the labels shifted by one (0 where -100), loss_weights 1 on
// the assistant's targets.
func sftMatrix(id string, tokens []int, prompt int) map[string]any {
	T := len(tokens)
	tok, tgt, w := make([]float64, T), make([]float64, T), make([]float64, T)
	for i, x := range tokens {
		tok[i] = float64(x)
		if i+1 < T && i+1 >= prompt {
			tgt[i], w[i] = float64(tokens[i+1]), 1
		}
	}
	return map[string]any{"kind": "matrix", "matrix_id": id, "packing_affinity_id": nil, "rows": []any{
		denseRow("token_ids", "int64", []int{T}, tok),
		denseRow("target_token_ids", "int64", []int{T, 1}, tgt),
		coefficientRow("loss_weights", w),
	}}
}

// The client's SFT (_train_sft): per batch of two trajectories a
// cross_entropy forward_backward and an optim_step, then one publication
// of the last learner version. The loss falls on the repeated data, and
// the model's step is the last version.
func TestARTTrainingRunSFTReplay(t *testing.T) {
	url, key := server(t)
	c := &artClient{t: t, base: url, key: key, poll: 10 * time.Millisecond}
	m := c.register("runs-sft", "sft-agent", "flywheel/tiny")
	spec := tinySpec()
	spec["seed"] = 1 // the adapter's initialisation: the losses are the same every run
	run := c.resolveRun("resolve-sft", spec)
	chats := [][]int{{5, 6, 7, 30, 31, 32, 33}, {5, 6, 8, 40, 41, 42}}
	ce := map[string]any{"name": "cross_entropy", "normalize_advantages": false}
	var losses []float64
	seq := 0
	for batch := 0; batch < 4; batch++ {
		var ms []any
		for i, ch := range chats {
			ms = append(ms, sftMatrix(fmt.Sprintf("sft-%d", i), ch, 3))
		}
		fb := c.wait(c.submit(run.RunID, "forward_backward", fbBody(fmt.Sprint("fb-sft-", batch), seq, ms, ce)))
		var res struct {
			Loss struct {
				Value float64 `json:"value"`
			} `json:"loss"`
			Training struct {
				Accepted int `json:"accepted_trainable_tokens"`
			} `json:"training"`
			ProducedGradient bool `json:"produced_gradient"`
		}
		if err := json.Unmarshal(fb.ResultSummary, &res); err != nil || fb.Status != "succeeded" || !res.ProducedGradient || res.Training.Accepted != 7 {
			t.Fatalf("sft forward_backward: %+v %s", fb, fb.ResultSummary)
		}
		losses = append(losses, res.Loss.Value)
		if o := c.wait(c.submit(run.RunID, "optim_step", optimBody(fmt.Sprint("optim-sft-", batch), seq+1, 1e-2))); o.Status != "succeeded" {
			t.Fatalf("sft optim_step: %+v", o)
		}
		seq += 2
	}
	t.Logf("losses: %v", losses)
	if !(losses[3] < losses[0]) {
		t.Fatalf("the cross-entropy did not fall on repeated data: %v", losses)
	}
	pub := c.wait(c.submit(run.RunID, "save_weights_for_sampler", publishBody("publish-sft", seq, "step-4", m.Name)))
	if pub.Status != "succeeded" || c.getStep(m) != 4 {
		t.Fatalf("sft publication: %+v, step %d", pub, c.getStep(m))
	}
}

// A run publishes into the caller's model of that name in any of the
// caller's entities (ART registers under model.entity, a team's or the
// personal one); a name in two of them is ambiguous.
func TestTrainingRunPublishesToATeamModel(t *testing.T) {
	l := startLive(t)
	if err := l.a.Store.AddMembership(t.Context(), "admin", "team"); err != nil {
		t.Fatal(err)
	}
	c := &artClient{t: t, base: l.url, key: l.key, poll: 10 * time.Millisecond}
	var m artModel
	c.must("POST", "/preview/models", map[string]any{"entity": "team", "project": "p", "name": "shared-agent",
		"base_model": "flywheel/tiny", "return_existing": true}, &m)
	run := c.resolveRun("resolve-team", tinySpec())
	c.submit(run.RunID, "forward_backward", fbBody("fb", 0, []any{rlMatrix("t0", []int{5, 6, 7, 20, 21}, 3, 1, []float64{-5, -5})}, cispoLoss()))
	c.submit(run.RunID, "optim_step", optimBody("o", 1, 1e-3))
	if pub := c.wait(c.submit(run.RunID, "save_weights_for_sampler", publishBody("p", 2, "step-1", "shared-agent"))); pub.Status != "succeeded" {
		t.Fatalf("publication to the team's model: %+v", pub)
	}
	if step := c.getStep(m); step != 1 || m.Entity != "team" {
		t.Fatalf("team model %s/%s at step %d", m.Entity, m.Name, step)
	}
	c.register("p", "shared-agent", "flywheel/tiny") // the same name in the personal entity
	st, raw := c.do("POST", "/training/runs/"+run.RunID+"/save_weights_for_sampler", publishBody("p2", 3, "x", "shared-agent"))
	if st != 400 || !strings.Contains(string(raw), `"code":"ambiguous_model"`) {
		t.Fatalf("an ambiguous alias: %d %s", st, raw)
	}
}
