package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestRLJobLifecycle(t *testing.T) {
	e := newEnv(t, envOpts{})
	id := e.createModel("m")
	body := rlBody(id, 2)
	body["experimental_config"] = map[string]any{"ppo": true, "learning_rate": nil, "custom_extra": 7}
	r := e.must(e.do("POST", "/v1/preview/training-jobs", e.alice, body), 200)
	jobID := r.body["id"].(string)
	job := e.waitJob(e.alice, jobID)
	if job["status"] != "COMPLETED" || job["from_step"] != 0.0 || job["to_step"] != 1.0 || job["kind"] != "rl" || job["model_id"] != id {
		t.Fatalf("job: %v", job)
	}
	for _, k := range []string{"created_at", "training_start", "training_end"} {
		if s, _ := job[k].(string); len(s) != len("2026-01-02T03:04:05.123456Z") || !strings.HasSuffix(s, "Z") {
			t.Errorf("%s = %v, want RFC 3339 UTC with microseconds", k, job[k])
		}
	}
	if job["error_message"] != nil {
		t.Errorf("error_message = %v", job["error_message"])
	}
	cfg := job["experimental_config"].(map[string]any)
	// ppo=true: epsilon defaults to 0.2 and epsilon_high to epsilon.
	if cfg["epsilon"] != 0.2 || cfg["epsilon_high"] != 0.2 || cfg["learning_rate"] != 5e-6 || cfg["importance_sampling_level"] != "token" || cfg["custom_extra"] != 7.0 {
		t.Errorf("experimental_config defaults: %v", cfg)
	}
	if m := job["metrics"].(map[string]any); m["reward"] != 0.75 || m["note"] != "text" {
		t.Errorf("job metrics: %v", m)
	}

	evs := e.events(e.alice, jobID)
	var types []string
	for _, ev := range evs {
		types = append(types, ev["type"].(string))
		if ev["id"] == "" || ev["created_at"] == "" {
			t.Errorf("event lacks id/created_at: %v", ev)
		}
	}
	if got := strings.Join(types, ","); got != "training_started,gradient_step,gradient_step,training_ended" {
		t.Errorf("events: %s", got)
	}
	if evs[0]["data"].(map[string]any)["num_sequences"] != 2.0 {
		t.Errorf("training_started data: %v", evs[0]["data"])
	}
	ended := evs[3]["data"].(map[string]any)
	ck := e.must(e.do("GET", "/v1/preview/models/"+id+"/checkpoints?limit=1&order=desc", e.alice, nil), 200)
	latest := ck.body["data"].([]any)[0].(map[string]any)
	if ended["step"] != 1.0 || ended["checkpoint_id"] != latest["id"] || latest["step"] != 1.0 {
		t.Errorf("training_ended %v vs latest checkpoint %v", ended, latest)
	}
	if latest["metrics"].(map[string]any)["reward"] != 0.75 {
		t.Errorf("checkpoint metrics: %v", latest["metrics"])
	}
	// The trainer saw the stored request exactly as sent, and the folders.
	tj := e.trainer.jobs[0]
	sent, _ := json.Marshal(body)
	if !bytes.Equal(tj.Request, sent) || tj.FromStep != 0 || tj.BaseModel != "test/base" || tj.Entity != "alice" || tj.ModelName != "m" {
		t.Errorf("trainer job: %+v", tj)
	}
	if _, err := os.Stat(tj.OutDir); !os.IsNotExist(err) {
		t.Errorf("work dir %s left behind", tj.OutDir)
	}
	// The events after the last one: empty.
	r = e.must(e.do("GET", "/v1/preview/training-jobs/"+jobID+"/events?after="+evs[3]["id"].(string), e.alice, nil), 200)
	if len(r.body["data"].([]any)) != 0 || r.body["has_more"] != false {
		t.Errorf("after last event: %s", r.raw)
	}

	// A second job trains from step 1.
	r = e.must(e.do("POST", "/v1/preview/training-jobs", e.alice, rlBody(id, 1)), 200)
	job = e.waitJob(e.alice, r.body["id"].(string))
	if job["from_step"] != 1.0 || job["to_step"] != 2.0 {
		t.Errorf("second job: %v", job)
	}
	m := e.must(e.do("GET", "/v1/preview/models/"+id, e.alice, nil), 200)
	if m.body["latest_step"] != 2.0 {
		t.Errorf("latest_step %v", m.body["latest_step"])
	}

	// Tenancy: bob cannot see alice's job.
	for _, p := range []string{"", "/events"} {
		r := e.do("GET", "/v1/preview/training-jobs/"+jobID+p, e.bob, nil)
		if r.status != 404 {
			t.Errorf("bob GET job%s: %d", p, r.status)
		}
	}
	r = e.do("POST", "/v1/preview/training-jobs/"+jobID+"/cancel", e.bob, nil)
	if r.status != 404 {
		t.Errorf("bob cancel: %d", r.status)
	}
	r = e.do("POST", "/v1/preview/training-jobs", e.bob, rlBody(id, 1))
	if r.status != 404 || r.errParam() != "model_id" {
		t.Errorf("bob trains alice's model: %d %s", r.status, r.raw)
	}
	e.must(e.do("GET", "/v1/preview/training-jobs/nope", e.alice, nil), 404)
}

func TestRLJobValidation(t *testing.T) {
	e := newEnv(t, envOpts{noTrain: true})
	id := e.createModel("m")
	mod := func(f func(b map[string]any)) map[string]any {
		b := rlBody(id, 2)
		f(b)
		return b
	}
	traj := func(b map[string]any, g, i int) map[string]any {
		return b["trajectory_groups"].([]any)[g].(map[string]any)["trajectories"].([]any)[i].(map[string]any)
	}
	cases := []struct {
		name  string
		body  any
		param any
		code  string
	}{
		{"malformed", `{"model_id": "x", "trajectory_groups": [}`, "trajectory_groups[0]", "invalid_json"},
		{"empty body", ``, nil, "invalid_json"},
		{"not an object", `[1, 2]`, nil, "invalid_type"},
		{"trailing data", mustJSON(rlBody(id, 1)) + " x", nil, "invalid_json"},
		{"missing model_id", mod(func(b map[string]any) { delete(b, "model_id") }), "model_id", "missing_field"},
		{"model_id type", mod(func(b map[string]any) { b["model_id"] = 5 }), "model_id", "invalid_type"},
		{"missing groups", mod(func(b map[string]any) { delete(b, "trajectory_groups") }), "trajectory_groups", "missing_field"},
		{"empty groups", mod(func(b map[string]any) { b["trajectory_groups"] = []any{} }), "trajectory_groups", "invalid_value"},
		{"group not object", mod(func(b map[string]any) { b["trajectory_groups"].([]any)[1] = 3 }), "trajectory_groups[1]", "invalid_type"},
		{"empty group", mod(func(b map[string]any) {
			b["trajectory_groups"].([]any)[1] = map[string]any{"trajectories": []any{}}
		}), "trajectory_groups[1].trajectories", "invalid_value"},
		{"group without trajectories", mod(func(b map[string]any) { b["trajectory_groups"].([]any)[1] = map[string]any{} }), "trajectory_groups[1].trajectories", "missing_field"},
		{"null reward", mod(func(b map[string]any) { traj(b, 1, 0)["reward"] = nil }), "trajectory_groups[1].trajectories[0].reward", "invalid_type"},
		{"string reward", mod(func(b map[string]any) { traj(b, 0, 1)["reward"] = "1" }), "trajectory_groups[0].trajectories[1].reward", "invalid_type"},
		{"missing messages", mod(func(b map[string]any) { delete(traj(b, 0, 0), "messages_and_choices") }), "trajectory_groups[0].trajectories[0].messages_and_choices", "missing_field"},
		{"neither message nor choice", mod(func(b map[string]any) {
			traj(b, 1, 0)["messages_and_choices"] = []any{map[string]any{"role": "user", "content": "q"}, map[string]any{"content": "x"}}
		}), "trajectory_groups[1].trajectories[0].messages_and_choices[1]", "invalid_value"},
		{"message role type", mod(func(b map[string]any) {
			traj(b, 0, 0)["messages_and_choices"] = []any{map[string]any{"role": 1, "content": "q"}}
		}), "trajectory_groups[0].trajectories[0].messages_and_choices[0].role", "invalid_type"},
		{"message content type", mod(func(b map[string]any) {
			traj(b, 0, 0)["messages_and_choices"] = []any{map[string]any{"role": "user", "content": 5}}
		}), "trajectory_groups[0].trajectories[0].messages_and_choices[0].content", "invalid_type"},
		{"choice logprob type", mod(func(b map[string]any) {
			mc := traj(b, 0, 1)["messages_and_choices"].([]any)
			mc[2].(map[string]any)["logprobs"] = map[string]any{"content": []any{map[string]any{"token": "a", "logprob": "x"}}}
		}), "trajectory_groups[0].trajectories[1].messages_and_choices[2].logprobs.content[0].logprob", "invalid_type"},
		{"choice message type", mod(func(b map[string]any) {
			traj(b, 0, 1)["messages_and_choices"].([]any)[2].(map[string]any)["message"] = "hi"
		}), "trajectory_groups[0].trajectories[1].messages_and_choices[2].message", "invalid_type"},
		{"tools type", mod(func(b map[string]any) { traj(b, 0, 0)["tools"] = map[string]any{} }), "trajectory_groups[0].trajectories[0].tools", "invalid_type"},
		{"history without messages", mod(func(b map[string]any) {
			traj(b, 0, 0)["additional_histories"] = []any{map[string]any{"tools": nil}}
		}), "trajectory_groups[0].trajectories[0].additional_histories[0].messages_and_choices", "missing_field"},
		{"reward out of range", strings.Replace(mustJSON(rlBody(id, 1)), `"reward":1`, `"reward":1e999`, 1), "trajectory_groups[0].trajectories[1].reward", "invalid_value"},
		{"epsilon negative", mod(func(b map[string]any) { b["experimental_config"] = map[string]any{"epsilon": -0.1} }), "experimental_config.epsilon", "invalid_value"},
		{"balance range", mod(func(b map[string]any) { b["experimental_config"] = map[string]any{"advantage_balance": 1.5} }), "experimental_config.advantage_balance", "invalid_value"},
		{"lr zero", mod(func(b map[string]any) { b["experimental_config"] = map[string]any{"learning_rate": 0} }), "experimental_config.learning_rate", "invalid_value"},
		{"is level", mod(func(b map[string]any) {
			b["experimental_config"] = map[string]any{"importance_sampling_level": "tokens"}
		}), "experimental_config.importance_sampling_level", "invalid_value"},
		{"ppo type", mod(func(b map[string]any) { b["experimental_config"] = map[string]any{"ppo": "yes"} }), "experimental_config.ppo", "invalid_type"},
		{"config type", mod(func(b map[string]any) { b["experimental_config"] = []any{} }), "experimental_config", "invalid_type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.do("POST", "/v1/preview/training-jobs", e.alice, c.body)
			if r.status != 400 || r.errParam() != c.param || r.errCode() != c.code {
				t.Errorf("got %d param=%v code=%v, want 400 param=%v code=%v; body %s", r.status, r.errParam(), r.errCode(), c.param, c.code, r.raw)
			}
			if msg, _ := r.errField("message").(string); msg == "" || strings.Contains(msg, "json:") {
				t.Errorf("message %q", msg)
			}
		})
	}
	r := e.do("POST", "/v1/preview/training-jobs", e.alice, mod(func(b map[string]any) { b["model_id"] = "0000" }))
	if r.status != 404 || r.errParam() != "model_id" {
		t.Errorf("unknown model: %d %s", r.status, r.raw)
	}
	// A trajectory without reward has reward 0: ART 0.5.18+ leave out the
	// fields equal to their defaults (reward 0.0 among them).
	r = e.do("POST", "/v1/preview/training-jobs", e.alice, mod(func(b map[string]any) { delete(traj(b, 1, 1), "reward") }))
	if r.status != 200 {
		t.Errorf("a trajectory without reward: %d %s, want 200", r.status, r.raw)
	}
	// Unknown fields anywhere are ignored; null optional fields are fine.
	ok := mod(func(b map[string]any) {
		b["extra"] = map[string]any{"deep": []any{1, "x"}}
		t0 := traj(b, 0, 0)
		t0["tools"], t0["metadata"], t0["logs"], t0["initial_policy_version"] = nil, map[string]any{"k": "v"}, []any{"l"}, 3
		t0["additional_histories"] = []any{map[string]any{"messages_and_choices": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "hi"}}}}}}
		b["experimental_config"] = map[string]any{"epsilon": nil, "x_k2_tau": 0.1, "importance_sampling_level": "geometric_average"}
	})
	e.must(e.do("POST", "/v1/preview/training-jobs", e.alice, ok), 200)
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestJobWithoutTrainerFailsClearly(t *testing.T) {
	e := newEnv(t, envOpts{noTrain: true})
	id := e.createModel("m")
	r := e.must(e.do("POST", "/v1/preview/training-jobs", e.alice, rlBody(id, 1)), 200)
	job := e.waitJob(e.alice, r.body["id"].(string))
	if job["status"] != "FAILED" || !strings.Contains(job["error_message"].(string), "no trainer") {
		t.Fatalf("job: %v", job)
	}
	evs := e.events(e.alice, job["id"].(string))
	if len(evs) != 1 || evs[0]["type"] != "training_failed" || evs[0]["data"].(map[string]any)["error_message"] != job["error_message"] {
		t.Errorf("events: %v", evs)
	}
	m := e.must(e.do("GET", "/v1/preview/models/"+id, e.alice, nil), 200)
	if m.body["latest_step"] != 0.0 {
		t.Errorf("model changed: %s", m.raw)
	}
}

func TestCancelJobs(t *testing.T) {
	tr := &testTrainer{gate: make(chan struct{}), started: make(chan string, 4)}
	e := newEnv(t, envOpts{trainer: tr})
	id := e.createModel("m")
	first := e.must(e.do("POST", "/v1/preview/training-jobs", e.alice, rlBody(id, 1)), 200).body["id"].(string)
	second := e.must(e.do("POST", "/v1/preview/training-jobs", e.alice, rlBody(id, 1)), 200).body["id"].(string)
	<-tr.started
	e.waitStatus(e.alice, first, "RUNNING")
	// The second job waits behind the first (same model).
	if r := e.must(e.do("GET", "/v1/preview/training-jobs/"+second, e.alice, nil), 200); r.body["status"] != "QUEUED" {
		t.Fatalf("second job %v while the first runs", r.body["status"])
	}
	// Cancel the queued one, then the running one.
	r := e.must(e.do("POST", "/v1/preview/training-jobs/"+second+"/cancel", e.alice, nil), 200)
	if r.body["status"] != "CANCELLED" {
		t.Errorf("cancel queued: %s", r.raw)
	}
	r = e.must(e.do("POST", "/v1/preview/training-jobs/"+first+"/cancel", e.alice, nil), 200)
	if r.body["status"] != "CANCELLED" {
		t.Errorf("cancel running: %s", r.raw)
	}
	job := e.waitJob(e.alice, first)
	if job["status"] != "CANCELLED" || job["to_step"] != nil {
		t.Errorf("cancelled job: %v", job)
	}
	evs := e.events(e.alice, first)
	if last := evs[len(evs)-1]; last["type"] != "training_failed" {
		t.Errorf("last event of a cancelled job: %v", last)
	}
	r = e.do("POST", "/v1/preview/training-jobs/"+first+"/cancel", e.alice, nil)
	if r.status != 409 {
		t.Errorf("cancel twice: %d %s", r.status, r.raw)
	}
	ck := e.must(e.do("GET", "/v1/preview/models/"+id+"/checkpoints", e.alice, nil), 200)
	if n := len(ck.body["data"].([]any)); n != 1 {
		t.Errorf("%d checkpoints after cancel, want 1", n)
	}
	// The model is free again: a new job runs.
	third := e.must(e.do("POST", "/v1/preview/training-jobs", e.alice, rlBody(id, 1)), 200).body["id"].(string)
	<-tr.started
	close(tr.gate)
	if job := e.waitJob(e.alice, third); job["status"] != "COMPLETED" || job["to_step"] != 1.0 {
		t.Errorf("third job: %v", job)
	}
}

func upload(t *testing.T, e *env, key, name, content string) resp {
	t.Helper()
	return uploadAs(t, e, key, "fine-tune", name, content)
}

func TestSFTJob(t *testing.T) {
	e := newEnv(t, envOpts{})
	id := e.createModel("m")
	data := `{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
{"messages": [{"role": "user", "content": "2+2"}, {"role": "assistant", "content": "4"}], "tools": []}
`
	f := e.must(upload(t, e, e.alice, "train.jsonl", data), 200)
	fileID := f.body["id"].(string)
	if !strings.HasPrefix(fileID, "file-") || f.body["object"] != "file" || f.body["bytes"] != float64(len(data)) || f.body["filename"] != "train.jsonl" || f.body["purpose"] != "fine-tune" {
		t.Errorf("file: %s", f.raw)
	}
	e.must(e.do("GET", "/v1/files/"+fileID, e.alice, nil), 200)
	e.must(e.do("GET", "/v1/files/"+fileID, e.bob, nil), 404)

	r := e.must(e.do("POST", "/v1/preview/sft-training-jobs", e.alice, map[string]any{
		"model_id": id, "training_data_url": fileID, "config": map[string]any{"batch_size": "auto", "learning_rate": []float64{1e-4, 5e-5}},
	}), 200)
	job := e.waitJob(e.alice, r.body["id"].(string))
	if job["status"] != "COMPLETED" || job["kind"] != "sft" || job["to_step"] != 1.0 {
		t.Fatalf("sft job: %v", job)
	}
	if cfg := job["config"].(map[string]any); cfg["assistant_turns"] != "all" || cfg["batch_size"] != "auto" {
		t.Errorf("sft config: %v", cfg)
	}
	tj := e.trainer.jobs[0]
	if b, err := os.ReadFile(tj.DataFile); err != nil || string(b) != data {
		t.Errorf("trainer data file %q: %v", tj.DataFile, err)
	}

	bad := e.do("POST", "/v1/preview/sft-training-jobs", e.bob, map[string]any{"model_id": id, "training_data_url": fileID})
	if bad.status != 404 {
		t.Errorf("bob: %d", bad.status)
	}
	cases := []struct {
		body  map[string]any
		param string
	}{
		{map[string]any{"model_id": id}, "training_data_url"},
		{map[string]any{"model_id": id, "training_data_url": "file-nope"}, "training_data_url"},
		{map[string]any{"model_id": id, "training_data_url": fileID, "config": map[string]any{"batch_size": 0}}, "config.batch_size"},
		{map[string]any{"model_id": id, "training_data_url": fileID, "config": map[string]any{"learning_rate": []any{1e-4, "x"}}}, "config.learning_rate[1]"},
		{map[string]any{"model_id": id, "training_data_url": fileID, "config": map[string]any{"assistant_turns": "first"}}, "config.assistant_turns"},
		{map[string]any{"model_id": id, "training_data_url": fileID, "experimental_config": 3}, "experimental_config"},
	}
	for _, c := range cases {
		r := e.do("POST", "/v1/preview/sft-training-jobs", e.alice, c.body)
		if r.status != 400 || r.errParam() != c.param {
			t.Errorf("%v: %d %s, want param %s", c.body, r.status, r.raw, c.param)
		}
	}
	// Bob's file is not alice's.
	bf := e.must(upload(t, e, e.bob, "b.jsonl", data), 200).body["id"].(string)
	r = e.do("POST", "/v1/preview/sft-training-jobs", e.alice, map[string]any{"model_id": id, "training_data_url": bf})
	if r.status != 400 || r.errParam() != "training_data_url" {
		t.Errorf("foreign file: %d %s", r.status, r.raw)
	}
	// Invalid JSONL is refused at upload, naming the line.
	r = upload(t, e, e.alice, "bad.jsonl", data+`{"messages": "nope"}`+"\n")
	if r.status != 400 || !strings.Contains(fmt.Sprint(r.errField("message")), "line 3") {
		t.Errorf("bad jsonl: %d %s", r.status, r.raw)
	}
	r = upload(t, e, e.alice, "empty.jsonl", "")
	if r.status != 400 {
		t.Errorf("empty file: %d %s", r.status, r.raw)
	}
}

// TestRLJobLargeBodyErrors covers bodies validated while they arrive: an
// error deep in a multi-megabyte payload still names its JSON path, and a
// body shorter than its Content-Length is refused.
func TestRLJobLargeBodyErrors(t *testing.T) {
	e := newEnv(t, envOpts{noTrain: true, workers: 1})
	id := e.createModel("m")
	body := payload(id, 3<<20)
	post := func(b []byte, length int64) (int, string) {
		req := httptest.NewRequest("POST", "/v1/preview/training-jobs", bytes.NewReader(b))
		req.ContentLength = length
		req.Header.Set("Authorization", "Bearer "+e.alice)
		rec := httptest.NewRecorder()
		e.srv.Handler.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	for _, at := range []int{bytes.Index(body, []byte(`"reward": `)), bytes.LastIndex(body, []byte(`"reward": `))} {
		bad := slices.Concat(body[:at], []byte(`"reward": true, "x": `), body[at+len(`"reward": `):])
		if code, out := post(bad, int64(len(bad))); code != 400 || !strings.Contains(out, `.reward: expected a number, got a boolean`) ||
			!strings.Contains(out, `"trajectory_groups[`) {
			t.Errorf("bad reward at byte %d: %d %s", at, code, out)
		}
	}
	if code, out := post(body[:2<<20], int64(len(body))); code != 400 || !strings.Contains(out, "shorter than its Content-Length") {
		t.Errorf("short body: %d %s", code, out)
	}
	if code, out := post(body, int64(len(body))); code != 200 {
		t.Errorf("good body: %d %s", code, out)
	}
}

// A user with MaxQueuedJobsPerUser jobs QUEUED gets 429 with retry-after for
// the next one (RL and SFT alike); another user is not affected, and the
// first is served again once a job leaves the queue.
func TestQueuedJobsPerUser429(t *testing.T) {
	e := newEnv(t, envOpts{workers: -1, maxQueued: 2}) // no workers: jobs stay QUEUED
	id := e.createModel("m")
	var first string
	for range 2 {
		r := e.must(e.do("POST", "/v1/preview/training-jobs", e.alice, rlBody(id, 1)), 200)
		if first == "" {
			first = r.body["id"].(string)
		}
	}
	for _, path := range []string{"/v1/preview/training-jobs", "/v1/preview/sft-training-jobs"} {
		r := e.do("POST", path, e.alice, rlBody(id, 1))
		if r.status != 429 || r.header.Get("Retry-After") != "30" || r.errCode() != "rate_limit_exceeded" ||
			!strings.Contains(string(r.raw), "2 training jobs queued") {
			t.Fatalf("%s: got %d retry-after %q %s", path, r.status, r.header.Get("Retry-After"), r.raw)
		}
	}
	bobs := e.must(e.do("POST", "/v1/preview/models", e.bob, map[string]any{
		"entity": "bob", "project": "proj", "name": "bobs", "base_model": "test/base",
		"lora": map[string]any{"rank": 2, "alpha": 4, "target_modules": []string{"q_proj", "v_proj"}},
	}), 200).body["id"].(string)
	e.must(e.do("POST", "/v1/preview/training-jobs", e.bob, rlBody(bobs, 1)), 200)
	e.must(e.do("POST", "/v1/preview/training-jobs/"+first+"/cancel", e.alice, nil), 200)
	e.must(e.do("POST", "/v1/preview/training-jobs", e.alice, rlBody(id, 1)), 200)
}

// A job record shows the config its trainer runs, resolved once at
// submission: RL and SFT alike, the default learning rate included (an SFT
// record shows the rate, not null), and the trainer receives exactly the
// record's config.
func TestJobRecordIsWhatTheTrainerRuns(t *testing.T) {
	e := newEnv(t, envOpts{})
	id := e.createModel("m")
	rlReq := rlBody(id, 1)
	rlReq["experimental_config"] = map[string]any{"learning_rate": nil, "ppo": true}
	rlID := e.must(e.do("POST", "/v1/preview/training-jobs", e.alice, rlReq), 200).body["id"].(string)
	rlJob := e.waitJob(e.alice, rlID)
	const data = `{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}` + "\n"
	file := e.must(upload(t, e, e.alice, "t.jsonl", data), 200).body["id"].(string)
	sftID := e.must(e.do("POST", "/v1/preview/sft-training-jobs", e.alice, map[string]any{"model_id": id, "training_data_url": file,
		"config": map[string]any{"learning_rate": nil, "epochs": 2}}), 200).body["id"].(string)
	sftJob := e.waitJob(e.alice, sftID)
	if rlJob["status"] != "COMPLETED" || sftJob["status"] != "COMPLETED" {
		t.Fatalf("jobs: %v %v", rlJob, sftJob)
	}
	if lr := rlJob["experimental_config"].(map[string]any)["learning_rate"]; lr != 5e-6 {
		t.Errorf("RL record's learning_rate %v, want 5e-6", lr)
	}
	if cfg := sftJob["config"].(map[string]any); cfg["learning_rate"] != 5e-6 || cfg["epochs"] != 2.0 || cfg["batch_size"] != "auto" {
		t.Errorf("SFT record's config %v, want learning_rate 5e-6", cfg)
	}
	e.trainer.mu.Lock()
	trained := slices.Clone(e.trainer.jobs)
	e.trainer.mu.Unlock()
	ran := map[string][2]json.RawMessage{}
	for _, j := range trained {
		ran[j.ID] = [2]json.RawMessage{j.Config.ExperimentalConfig, j.Config.Config}
	}
	for _, c := range []struct {
		job  map[string]any
		keys []string
	}{{rlJob, []string{"experimental_config"}}, {sftJob, []string{"experimental_config", "config"}}} {
		for i, k := range c.keys {
			want, _ := json.Marshal(c.job[k])
			var got any
			if err := json.Unmarshal(ran[c.job["id"].(string)][i], &got); err != nil {
				t.Fatalf("%s: the trainer's %s: %v", c.job["kind"], k, err)
			}
			if g, _ := json.Marshal(got); string(g) != string(want) {
				t.Errorf("%s: the trainer ran %s %s, the record shows %s", c.job["kind"], k, g, want)
			}
		}
	}
	if len(trained) != 2 || trained[1].Config.SFT.Epochs != 2 || trained[1].Config.SFT.LearningRates[0] != 5e-6 {
		t.Errorf("the trainer's jobs: %+v", trained)
	}
}

// TestRLJobOfExchanges: the body ART 0.5.23 posts for trajectories of
// exchanges (the calls its tracing helpers capture; rl's
// testdata/art_exchanges.json, written with ART's own classes) is accepted;
// such a trajectory with messages_and_choices as well is a 400 naming it,
// as ART refuses to build one.
func TestRLJobOfExchanges(t *testing.T) {
	e := newEnv(t, envOpts{noTrain: true})
	id := e.createModel("m")
	raw, err := os.ReadFile("../rl/testdata/art_exchanges.json")
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatal(err)
	}
	body["model_id"] = id
	r := e.must(e.do("POST", "/v1/preview/training-jobs", e.alice, body), 200)
	if r.body["status"] != "QUEUED" {
		t.Fatalf("job %v", r.body)
	}
	tr := body["trajectory_groups"].([]any)[0].(map[string]any)["trajectories"].([]any)[1].(map[string]any)
	tr["messages_and_choices"] = []any{map[string]any{"role": "user", "content": "hi"}}
	r = e.do("POST", "/v1/preview/training-jobs", e.alice, body)
	if r.status != 400 || r.errParam() != "trajectory_groups[0].trajectories[1]" || r.errCode() != "invalid_value" {
		t.Fatalf("both forms: %d %s", r.status, r.raw)
	}
}
