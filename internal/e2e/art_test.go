package e2e

// A replay of the requests OpenPipe ART's ServerlessBackend sends (its
// src/art/serverless/backend.py and client.py, the releases whose training
// call carries 11 experimental keys: /log as the earlier of them posts it
// from ServerlessBackend._log, the ":step{N}" inference names and
// _delete_checkpoint_files of the later), over HTTP against the service as
// `flywheel serve` builds it: the same paths, query strings and bodies,
// serialised as ART's pydantic models are (model_dump(mode="json"): every
// declared field present, null where unset), and the same control flow
// (auto-paging on has_more, the events polling loop). Only the polling
// interval is shorter than ART's one second.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// artClient is ART's serverless Client (an openai AsyncAPIClient with
// base_url .../v1) and the ServerlessBackend methods over it.
type artClient struct {
	t    *testing.T
	base string // the service's URL; ART's base_url is base + "/v1"
	key  string
	poll time.Duration
}

// artModel is art.serverless.client.Model.
type artModel struct {
	ID        string  `json:"id"`
	Entity    string  `json:"entity"`
	Project   string  `json:"project"`
	Name      string  `json:"name"`
	BaseModel string  `json:"base_model"`
	RunID     *string `json:"run_id"`
}

type artEvent struct {
	ID   string         `json:"id"`
	Type string         `json:"type"`
	Data map[string]any `json:"data"`
}

type artCheckpoint struct {
	ID      string             `json:"id"`
	Step    int                `json:"step"`
	Metrics map[string]float64 `json:"metrics"`
}

// do sends one request as the SDK does (JSON body, Bearer key) and returns
// the status and body.
func (c *artClient) do(method, path string, body any) (int, []byte) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+"/v1"+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// must sends a request that has to succeed (any 2xx, as the SDK) and
// decodes its body into out.
func (c *artClient) must(method, path string, body, out any) {
	c.t.Helper()
	status, raw := c.do(method, path, body)
	if status/100 != 2 {
		c.t.Fatalf("%s %s: %d %s", method, path, status, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			c.t.Fatalf("%s %s: %v in %s", method, path, err, raw)
		}
	}
}

// list walks a cursor list as openai's AsyncCursorPage does: while
// has_more, the next page is requested with after = the last item's id.
// visit returns false to stop (ART's `return` inside `async for`).
func list[T any](c *artClient, path string, query url.Values, id func(T) string, visit func(T) bool) {
	c.t.Helper()
	for {
		p := path
		if len(query) > 0 {
			p += "?" + query.Encode()
		}
		var page struct {
			Data    []T  `json:"data"`
			HasMore bool `json:"has_more"`
		}
		c.must("GET", p, nil, &page)
		for _, it := range page.Data {
			if !visit(it) {
				return
			}
		}
		if !page.HasMore || len(page.Data) == 0 {
			return
		}
		q := url.Values{}
		for k, v := range query {
			q[k] = v
		}
		q.Set("after", id(page.Data[len(page.Data)-1]))
		query = q
	}
}

// register is ServerlessBackend.register: models.create with
// return_existing=True (entity None: the caller's personal entity).
func (c *artClient) register(project, name, baseModel string) artModel {
	var m artModel
	c.must("POST", "/preview/models", map[string]any{
		"entity": nil, "project": project, "name": name, "base_model": baseModel, "return_existing": true,
	}, &m)
	return m
}

// getStep is ServerlessBackend._get_step: the first checkpoint of
// limit=1&order=desc.
func (c *artClient) getStep(m artModel) int {
	step := -1
	list(c, "/preview/models/"+m.ID+"/checkpoints", url.Values{"limit": {"1"}, "order": {"desc"}},
		func(ck artCheckpoint) string { return ck.ID }, func(ck artCheckpoint) bool { step = ck.Step; return false })
	if step < 0 {
		c.t.Fatalf("model %s has no checkpoint", m.ID)
	}
	return step
}

// inferenceName is ServerlessBackend._model_inference_name.
func inferenceName(m artModel, step int) string {
	return fmt.Sprintf("wandb-artifact:///%s/%s/%s:step%d", m.Entity, m.Project, m.Name, step)
}

// artExperimental is the experimental_config ServerlessBackend.train sends:
// ExperimentalTrainingConfig with its 11 keys, None where not set. These
// are train()'s defaults; tau sets kimi_k2_tau.
func artExperimental(tau *float64) map[string]any {
	var k2 any
	if tau != nil {
		k2 = *tau
	}
	return map[string]any{
		"advantage_balance": 0.0, "epsilon": nil, "epsilon_high": nil, "importance_sampling_level": "token",
		"kimi_k2_tau": k2, "learning_rate": 5e-6, "mask_prob_ratio": false,
		"max_negative_advantage_importance_sampling_weight": nil, "ppo": false, "precalculate_logprobs": false,
		"scale_rewards": true,
	}
}

// train is ServerlessBackend._train_model: create the job, then poll its
// events (after=..., no limit, auto-paged) every poll interval until
// training_ended, yielding gradient_step data; training_failed is ART's
// RuntimeError. As in ART, the cursor is not advanced past training_started.
func (c *artClient) train(m artModel, groups []any, cfg map[string]any) (string, []map[string]any, error) {
	var job struct {
		ID string `json:"id"`
	}
	c.must("POST", "/preview/training-jobs", map[string]any{
		"model_id": m.ID, "trajectory_groups": groups, "experimental_config": cfg,
	}, &job)
	after := ""
	numSequences := -1
	var steps []map[string]any
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		time.Sleep(c.poll)
		q := url.Values{}
		if after != "" {
			q.Set("after", after)
		}
		var done bool
		var failure error
		list(c, "/preview/training-jobs/"+job.ID+"/events", q, func(e artEvent) string { return e.ID }, func(e artEvent) bool {
			switch e.Type {
			case "gradient_step":
				if numSequences < 0 {
					c.t.Fatalf("gradient_step before training_started")
				}
				steps = append(steps, e.Data)
			case "training_started":
				numSequences = int(e.Data["num_sequences"].(float64))
				return true // `continue`: after stays where it was
			case "training_ended":
				done = true
				return false
			case "training_failed":
				msg, ok := e.Data["error_message"].(string)
				if !ok {
					msg = "Training failed with an unknown error"
				}
				failure = fmt.Errorf("Training job failed: %s", msg)
				return false
			}
			after = e.ID
			return true
		})
		if failure != nil {
			return job.ID, steps, failure
		}
		if done {
			if len(steps) != numSequences {
				c.t.Fatalf("%d gradient steps, training_started announced %d", len(steps), numSequences)
			}
			return job.ID, steps, nil
		}
	}
	c.t.Fatalf("job %s did not end", job.ID)
	return "", nil, nil
}

// log is Model.log through models.log: {model_id, trajectory_groups, split}.
func (c *artClient) log(m artModel, groups []any, split string) {
	c.must("POST", "/preview/models/"+m.ID+"/log", map[string]any{"model_id": m.ID, "trajectory_groups": groups, "split": split}, nil)
}

// deleteCheckpointFiles is ServerlessBackend._delete_checkpoint_files: list
// every checkpoint (auto-paged), delete the steps not kept.
func (c *artClient) deleteCheckpointFiles(m artModel, keep []int) (deleted int, notFound []int) {
	var del []int
	list(c, "/preview/models/"+m.ID+"/checkpoints", nil, func(ck artCheckpoint) string { return ck.ID }, func(ck artCheckpoint) bool {
		for _, k := range keep {
			if k == ck.Step {
				return true
			}
		}
		del = append(del, ck.Step)
		return true
	})
	var out struct {
		DeletedCount  int   `json:"deleted_count"`
		NotFoundSteps []int `json:"not_found_steps"`
	}
	c.must("DELETE", "/preview/models/"+m.ID+"/checkpoints", map[string]any{"steps": del}, &out)
	return out.DeletedCount, out.NotFoundSteps
}

// complete is a rollout's chat completion through the OpenAI SDK, which
// returns the choices as openai's Choice models.
func (c *artClient) complete(body map[string]any) []map[string]any {
	c.t.Helper()
	var resp struct {
		Choices []map[string]any `json:"choices"`
	}
	c.must("POST", "/chat/completions", body, &resp)
	return resp.Choices
}

// artChoice is a Choice as Trajectory.model_dump(mode="json") writes it:
// the fields the server returned plus every field openai's Choice,
// ChatCompletionMessage, ChoiceLogprobs and ChatCompletionTokenLogprob
// declare, null where absent.
func artChoice(ch map[string]any) map[string]any {
	fill := func(m map[string]any, keys ...string) {
		for _, k := range keys {
			if _, ok := m[k]; !ok {
				m[k] = nil
			}
		}
	}
	fill(ch, "finish_reason", "index", "logprobs", "message")
	if msg, ok := ch["message"].(map[string]any); ok {
		fill(msg, "content", "refusal", "role", "annotations", "audio", "function_call", "tool_calls")
	}
	if lp, ok := ch["logprobs"].(map[string]any); ok {
		fill(lp, "content", "refusal")
		if content, ok := lp["content"].([]any); ok {
			for _, tl := range content {
				fill(tl.(map[string]any), "token", "bytes", "logprob", "top_logprobs")
			}
		}
	}
	return ch
}

// artTrajectory is a Trajectory as model_dump(mode="json") writes it.
func artTrajectory(reward float64, metrics map[string]any, messagesAndChoices ...any) map[string]any {
	if metrics == nil {
		metrics = map[string]any{}
	}
	return map[string]any{
		"messages_and_choices": messagesAndChoices, "tools": nil, "additional_histories": []any{},
		"reward": reward, "initial_policy_version": nil, "final_policy_version": nil,
		"metrics": metrics, "metadata": map[string]any{"scenario": "e2e"}, "logs": []any{},
	}
}

// artGroup is a TrajectoryGroup as model_dump(mode="json") writes it.
func artGroup(metrics map[string]any, exceptions []any, trajectories ...any) map[string]any {
	if metrics == nil {
		metrics = map[string]any{}
	}
	if exceptions == nil {
		exceptions = []any{}
	}
	return map[string]any{"trajectories": trajectories, "exceptions": exceptions, "metadata": map[string]any{},
		"metrics": metrics, "logs": []any{}}
}

func userMsg(s string) map[string]any { return map[string]any{"role": "user", "content": s} }

// TestARTServerlessReplay runs ART's sequence: register (return_existing),
// sample by artifact URI, current step, train (with logprobs, then without
// them as ART's own integration test samples, then a job with no choice at
// all, which fails clearly), /log with ART's statistics, delete
// checkpoints, delete the model.
func TestARTServerlessReplay(t *testing.T) {
	base, key := server(t)
	c := &artClient{t: t, base: base, key: key, poll: 50 * time.Millisecond}

	m := c.register("art-e2e", "agent-001", "flywheel/tiny")
	if again := c.register("art-e2e", "agent-001", "flywheel/tiny"); again.ID != m.ID {
		t.Fatalf("return_existing gave another model: %s vs %s", again.ID, m.ID)
	}
	if m.Entity != "admin" || m.Project != "art-e2e" || m.Name != "agent-001" || m.BaseModel != "flywheel/tiny" {
		t.Fatalf("model: %+v", m)
	}
	if step := c.getStep(m); step != 0 {
		t.Fatalf("step %d, want 0", step)
	}

	// Rollouts: groups of 4 sampled by the artifact URI, scored.
	rollouts := func(step int, logprobs bool) []any {
		var groups []any
		for g, prompt := range []string{"Say hi", "Name a colour"} {
			body := map[string]any{"model": inferenceName(m, step), "messages": []any{userMsg(prompt)},
				"max_tokens": 6, "temperature": 1, "n": 4, "seed": 10*step + g}
			if logprobs {
				body["logprobs"] = true
			}
			var trajs []any
			for i, ch := range c.complete(body) {
				if logprobs == (ch["logprobs"] == nil) {
					t.Fatalf("choice logprobs %v, asked %v", ch["logprobs"], logprobs)
				}
				trajs = append(trajs, artTrajectory(float64(i%3), map[string]any{"len": i}, userMsg(prompt), artChoice(ch)))
			}
			groups = append(groups, artGroup(nil, nil, trajs...))
		}
		return groups
	}

	// 1. With logprobs (token strings, as the SDK returns them by default).
	if _, steps, err := c.train(m, rollouts(0, true), artExperimental(nil)); err != nil || len(steps) == 0 {
		t.Fatalf("train with logprobs: %v (%d steps)", err, len(steps))
	}
	if step := c.getStep(m); step != 1 {
		t.Fatalf("step %d after training, want 1", step)
	}

	// 2. Without logprobs: trained on-policy, the step advances.
	jobID, steps, err := c.train(m, rollouts(1, false), artExperimental(nil))
	if err != nil || len(steps) == 0 {
		t.Fatalf("train without logprobs: %v (%d steps)", err, len(steps))
	}
	if step := c.getStep(m); step != 2 {
		t.Fatalf("step %d after training without logprobs, want 2", step)
	}
	var job struct {
		Status  string         `json:"status"`
		Metrics map[string]any `json:"metrics"`
	}
	c.must("GET", "/preview/training-jobs/"+jobID, nil, &job)
	if job.Status != "COMPLETED" || job.Metrics["num_trajectories_without_logprobs"] != 8.0 || job.Metrics["num_trajectories"] != 8.0 {
		t.Fatalf("job without logprobs: %+v", job)
	}

	// 3. No assistant choice at all: the job fails with a clear message and
	// the model stays where it was.
	noChoice := []any{artGroup(nil, nil,
		artTrajectory(1, nil, userMsg("hi"), map[string]any{"role": "assistant", "content": "hello"}),
		artTrajectory(0, nil, userMsg("hi"), map[string]any{"role": "assistant", "content": "bye"}))}
	if _, _, err := c.train(m, noChoice, artExperimental(nil)); err == nil || !strings.Contains(err.Error(), "no trajectory has an assistant choice") {
		t.Fatalf("a job without choices: %v", err)
	}
	if step := c.getStep(m); step != 2 {
		t.Fatalf("step %d after a failed job, want 2", step)
	}

	// The new checkpoint serves under its artifact URI, and so does the
	// latest one under the name without a step (_model_inference_name(model)).
	for _, name := range []string{inferenceName(m, 2), strings.TrimSuffix(inferenceName(m, 2), ":step2")} {
		if chs := c.complete(map[string]any{"model": name, "messages": []any{userMsg("hi")}, "max_tokens": 2}); len(chs) != 1 {
			t.Fatalf("choices of %s: %v", name, chs)
		}
	}

	// 4. /log: ART's statistics.
	exc := map[string]any{"type": "<class 'ValueError'>", "message": "bad", "traceback": "..."}
	logGroups := []any{
		artGroup(map[string]any{"judge": 0.9}, nil,
			artTrajectory(1, map[string]any{"acc": 1, "ok": true}, userMsg("a")),
			artTrajectory(0, map[string]any{"acc": 0, "ok": false}, userMsg("a")),
			artTrajectory(0.5, map[string]any{"acc": 1}, userMsg("a"))),
		artGroup(map[string]any{"judge": 0.3, "label": "x"}, []any{exc},
			artTrajectory(0.2, nil, userMsg("b"))), // one trajectory: no reward_std_dev of its own
		artGroup(nil, nil,
			artTrajectory(0.4, nil, userMsg("c")),
			artTrajectory(0.8, nil, userMsg("c"))),
	}
	c.log(m, logGroups, "val")
	want := artLogStats(logGroups, "val")
	var ck artCheckpoint
	list(c, "/preview/models/"+m.ID+"/checkpoints", url.Values{"limit": {"1"}, "order": {"desc"}},
		func(ck artCheckpoint) string { return ck.ID }, func(x artCheckpoint) bool { ck = x; return false })
	if ck.Step != 2 {
		t.Fatalf("log went to step %d", ck.Step)
	}
	for k, v := range want {
		if got, ok := ck.Metrics[k]; !ok || math.Abs(got-v) > 1e-12 {
			t.Errorf("%s = %v, ART computes %v (all: %v)", k, ck.Metrics[k], v, ck.Metrics)
		}
	}
	if math.Abs(want["val/reward_std_dev"]-(math.Sqrt(1.0/6)+0.2)/2) > 1e-12 {
		t.Fatalf("the reference itself is off: %v", want)
	}

	// 5. Delete every checkpoint but the latest, then the model.
	deleted, notFound := c.deleteCheckpointFiles(m, []int{2})
	if deleted != 2 || len(notFound) != 0 {
		t.Fatalf("delete checkpoints: %d deleted, not found %v", deleted, notFound)
	}
	var steps2 []int
	list(c, "/preview/models/"+m.ID+"/checkpoints", nil, func(ck artCheckpoint) string { return ck.ID },
		func(ck artCheckpoint) bool { steps2 = append(steps2, ck.Step); return true })
	if len(steps2) != 1 || steps2[0] != 2 {
		t.Fatalf("checkpoints left: %v", steps2)
	}
	c.must("DELETE", "/preview/models/"+m.ID, nil, nil)
	if status, _ := c.do("GET", "/preview/models/"+m.ID, nil); status != 404 {
		t.Fatalf("deleted model: %d", status)
	}
	status, raw := c.do("POST", "/chat/completions", map[string]any{"model": inferenceName(m, 2), "messages": []any{userMsg("hi")}})
	if status != 404 || !strings.Contains(string(raw), "model_not_found") {
		t.Fatalf("sampling a deleted model: %d %s", status, raw)
	}
}

// artLogStats computes what ART's backend logs for trajectory groups
// (LocalBackend._log with calculate_step_std_dev): the mean over
// trajectories of reward and of each metric, reward_std_dev as the mean
// over groups with more than one trajectory of np.std (population) of their
// rewards, and flywheel's group_{name} means over the groups' own metrics.
func artLogStats(groups []any, split string) map[string]float64 {
	sums, counts := map[string]float64{}, map[string]int{}
	gsums, gcounts := map[string]float64{}, map[string]int{}
	var stds []float64
	nTraj, nExc := 0, 0
	for _, g := range groups {
		gm := g.(map[string]any)
		for k, v := range gm["metrics"].(map[string]any) {
			if x, ok := v.(float64); ok {
				gsums[k] += x
				gcounts[k]++
			}
		}
		nExc += len(gm["exceptions"].([]any))
		var rs []float64
		for _, tr := range gm["trajectories"].([]any) {
			tm := tr.(map[string]any)
			r := tm["reward"].(float64)
			rs = append(rs, r)
			sums["reward"] += r
			counts["reward"]++
			for k, v := range tm["metrics"].(map[string]any) {
				x := 0.0
				switch v := v.(type) {
				case bool:
					if v {
						x = 1
					}
				case int:
					x = float64(v)
				case float64:
					x = v
				}
				sums[k] += x
				counts[k]++
			}
		}
		nTraj += len(rs)
		if len(rs) > 1 {
			var mu, v float64
			for _, r := range rs {
				mu += r
			}
			mu /= float64(len(rs))
			for _, r := range rs {
				v += (r - mu) * (r - mu)
			}
			stds = append(stds, math.Sqrt(v/float64(len(rs))))
		}
	}
	out := map[string]float64{}
	for k, s := range sums {
		out[split+"/"+k] = s / float64(counts[k])
	}
	for k, s := range gsums {
		out[split+"/group_"+k] = s / float64(gcounts[k])
	}
	std := 0.0
	for _, s := range stds {
		std += s / float64(len(stds))
	}
	out[split+"/reward_std_dev"] = std
	out[split+"/exception_rate"] = float64(nExc) / float64(nTraj+nExc)
	return out
}

// TestARTKimiK2TauReachesTheLoss: ART sends τ as kimi_k2_tau. Three fresh
// models (identical at step 0) train on the same group, sampled from the
// base with exact ids and logprobs, whose recorded logprobs are shifted
// by −0.5 so that every Δ_t = new_t − old_t = 0.5 (ρ = e^0.5, inside the
// clip range). rl.md's CISPO loss then depends on τ exactly as
// L(τ) = L(0) + τ·K with K = e^0.5·0.5·Σ_t new_t·w_t / (Σ_t m_t + 1e-6),
// w normalised over the batch: the first step's loss is checked against
// that for τ = 0.5 and τ = 1.
func TestARTKimiK2TauReachesTheLoss(t *testing.T) {
	base, key := server(t)
	c := &artClient{t: t, base: base, key: key, poll: 50 * time.Millisecond}
	choices := c.complete(map[string]any{"model": "flywheel/tiny", "messages": []any{userMsg("Tell me a story.")},
		"max_tokens": 6, "temperature": 1, "n": 3, "seed": 3, "logprobs": true, "return_tokens_as_token_ids": true})
	const shift = 0.5
	var newLP [][]float64 // per trajectory: the policy's logprobs of its sampled tokens
	var trajs []any
	for i, ch := range choices {
		var lps []float64
		for _, tl := range ch["logprobs"].(map[string]any)["content"].([]any) {
			tm := tl.(map[string]any)
			lp := tm["logprob"].(float64)
			lps = append(lps, lp)
			tm["logprob"] = lp - shift
		}
		newLP = append(newLP, lps)
		trajs = append(trajs, artTrajectory([]float64{0, 1, 3}[i], nil, userMsg("Tell me a story."), artChoice(ch)))
	}
	group := artGroup(nil, nil, trajs...)

	firstLoss := func(name string, tau *float64) float64 {
		m := c.register("art-tau", name, "flywheel/tiny")
		body, _ := json.Marshal([]any{group}) // each job gets its own copy
		var groups []any
		json.Unmarshal(body, &groups)
		_, steps, err := c.train(m, groups, artExperimental(tau))
		if err != nil || len(steps) == 0 {
			t.Fatalf("%s: %v (%d steps)", name, err, len(steps))
		}
		return steps[0]["loss"].(float64)
	}
	half, one := 0.5, 1.0
	l0, lHalf, l1 := firstLoss("tau-0", nil), firstLoss("tau-half", &half), firstLoss("tau-1", &one)

	// K from the sampled logprobs: w_i = 1/(n_i + 1e-6), normalised by its
	// mean over the trainable tokens.
	var n int
	var sumW float64
	for _, lps := range newLP {
		n += len(lps)
		sumW += float64(len(lps)) / (float64(len(lps)) + 1e-6)
	}
	meanW := sumW / float64(n)
	var k float64
	for _, lps := range newLP {
		w := 1 / (float64(len(lps)) + 1e-6) / meanW
		for _, lp := range lps {
			k += math.Exp(shift) * shift * lp * w
		}
	}
	k /= float64(n) + 1e-6
	t.Logf("first-step loss: τ=0 %.9g, τ=0.5 %.9g, τ=1 %.9g; K = %.9g", l0, lHalf, l1, k)
	for _, c := range []struct {
		tau, got float64
	}{{0.5, lHalf}, {1, l1}} {
		want := l0 + c.tau*k
		if math.Abs(c.got-want) > 1e-4*math.Max(1, math.Abs(k)) {
			t.Errorf("τ=%g: first-step loss %.9g, want L(0) + τ·K = %.9g", c.tau, c.got, want)
		}
	}
	if k > -1e-3 {
		t.Fatalf("K = %g: the check cannot tell τ from no τ", k)
	}
}
