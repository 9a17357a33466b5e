package api_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"flywheel/internal/store"
)

func TestCreateModel(t *testing.T) {
	e := newEnv(t, envOpts{})
	r := e.must(e.do("POST", "/v1/preview/models", e.alice, map[string]any{
		"entity": nil, "project": "proj", "name": "m", "base_model": "test/base", "model_id": "ignored extra",
	}), 200)
	for _, k := range []string{"id", "entity", "project", "name", "base_model", "run_id", "created_at", "latest_step"} {
		if _, ok := r.body[k]; !ok {
			t.Errorf("response lacks %q: %s", k, r.raw)
		}
	}
	if r.body["entity"] != "alice" || r.body["latest_step"] != 0.0 || r.body["run_id"] != nil {
		t.Errorf("unexpected model: %s", r.raw)
	}
	id := r.body["id"].(string)

	// Step 0 exists on disk in PEFT layout.
	ck, err := e.st.CheckpointByStep(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"adapter_config.json", "adapter_model.safetensors"} {
		if _, err := os.Stat(filepath.Join(ck.Dir, f)); err != nil {
			t.Errorf("step 0 lacks %s: %v", f, err)
		}
	}

	// Duplicate name: 409, unless return_existing.
	dup := e.do("POST", "/v1/preview/models", e.alice, map[string]any{"project": "proj", "name": "m", "base_model": "test/base"})
	if dup.status != 409 || dup.errField("type") != "conflict_error" {
		t.Errorf("duplicate: %d %s", dup.status, dup.raw)
	}
	again := e.must(e.do("POST", "/v1/preview/models", e.alice, map[string]any{"project": "proj", "name": "m", "base_model": "test/base", "return_existing": true}), 200)
	if again.body["id"] != id {
		t.Errorf("return_existing gave %v, want %s", again.body["id"], id)
	}

	// A team entity alice belongs to works; one she does not is 404.
	e.must(e.do("POST", "/v1/preview/models", e.alice, map[string]any{"entity": "team", "project": "proj", "name": "m", "base_model": "test/base"}), 200)
	r = e.do("POST", "/v1/preview/models", e.alice, map[string]any{"entity": "bob", "project": "proj", "name": "m", "base_model": "test/base"})
	if r.status != 404 || r.errParam() != "entity" {
		t.Errorf("foreign entity: %d %s", r.status, r.raw)
	}
}

func TestCreateModelValidation(t *testing.T) {
	e := newEnv(t, envOpts{})
	cases := []struct {
		name   string
		body   any
		status int
		param  any
		code   any
	}{
		{"missing project", map[string]any{"name": "m", "base_model": "test/base"}, 400, "project", "missing_field"},
		{"missing name", map[string]any{"project": "p", "base_model": "test/base"}, 400, "name", "missing_field"},
		{"missing base", map[string]any{"project": "p", "name": "m"}, 400, "base_model", "missing_field"},
		{"unknown base", map[string]any{"project": "p", "name": "m", "base_model": "Qwen/Nope"}, 400, "base_model", "unknown_base_model"},
		{"unsupported base", map[string]any{"project": "p", "name": "m", "base_model": "test/broken"}, 400, "base_model", "unsupported_base_model"},
		{"escaping base", map[string]any{"project": "p", "name": "m", "base_model": "../test/base"}, 400, "base_model", "unknown_base_model"},
		{"name with slash", map[string]any{"project": "p", "name": "a/b", "base_model": "test/base"}, 400, "name", "invalid_value"},
		{"wrong type", map[string]any{"project": 3, "name": "m", "base_model": "test/base"}, 400, "project", "invalid_type"},
		{"wrong lora type", map[string]any{"project": "p", "name": "m", "base_model": "test/base", "lora": map[string]any{"rank": "8"}}, 400, "lora.rank", "invalid_type"},
		{"bad lora", map[string]any{"project": "p", "name": "m", "base_model": "test/base", "lora": map[string]any{"rank": 0}}, 400, "lora", "invalid_value"},
		{"negative lora seed", map[string]any{"project": "p", "name": "m", "base_model": "test/base", "lora": map[string]any{"seed": -1}}, 400, "lora.seed", "invalid_value"},
		{"fractional lora seed", map[string]any{"project": "p", "name": "m", "base_model": "test/base", "lora": map[string]any{"seed": 1.5}}, 400, "lora.seed", "invalid_type"},
		{"malformed", "{", 400, nil, "invalid_json"},
		{"not object", "[1]", 400, nil, "invalid_type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.do("POST", "/v1/preview/models", e.alice, c.body)
			if r.status != c.status || r.errParam() != c.param || r.errCode() != c.code {
				t.Errorf("got %d param=%v code=%v (%s), want %d param=%v code=%v", r.status, r.errParam(), r.errCode(), r.raw, c.status, c.param, c.code)
			}
			if msg, _ := r.errField("message").(string); msg == "" || strings.Contains(msg, "/work/") || strings.Contains(msg, os.TempDir()) || r.errField("type") != "invalid_request_error" {
				t.Errorf("envelope: %s", r.raw)
			}
		})
	}
}

// lora.seed fixes the untrained adapter (step 0): two models created with the
// same seed have byte-identical adapter files, so a seeded run is
// reproducible from its start; without a seed each model gets its own.
func TestCreateModelLoRASeed(t *testing.T) {
	e := newEnv(t, envOpts{})
	adapter := func(name string, lora map[string]any) []byte {
		t.Helper()
		r := e.must(e.do("POST", "/v1/preview/models", e.alice, map[string]any{
			"project": "proj", "name": name, "base_model": "test/base", "lora": lora}), 200)
		ck, err := e.st.CheckpointByStep(context.Background(), r.body["id"].(string), 0)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(ck.Dir, "adapter_model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a := adapter("a", map[string]any{"rank": 2, "seed": 7})
	b := adapter("b", map[string]any{"rank": 2, "seed": 7})
	c := adapter("c", map[string]any{"rank": 2, "seed": 8})
	d := adapter("d", map[string]any{"rank": 2})
	f := adapter("f", map[string]any{"rank": 2})
	if !bytes.Equal(a, b) {
		t.Error("the same lora.seed gave different step-0 adapters")
	}
	if bytes.Equal(a, c) || bytes.Equal(d, f) || bytes.Equal(a, d) {
		t.Error("different seeds (or none) gave the same step-0 adapter")
	}
}

func TestModelsTenancyAndDelete(t *testing.T) {
	e := newEnv(t, envOpts{})
	id := e.createModel("m")
	e.must(e.do("GET", "/v1/preview/models/"+id, e.alice, nil), 200)
	for _, req := range [][2]string{
		{"GET", "/v1/preview/models/" + id},
		{"GET", "/v1/preview/models/" + id + "/checkpoints"},
		{"DELETE", "/v1/preview/models/" + id},
		{"POST", "/v1/preview/models/" + id + "/log"},
	} {
		r := e.do(req[0], req[1], e.bob, map[string]any{"split": "val", "trajectory_groups": []any{}})
		if r.status != 404 || r.errField("type") != "not_found_error" {
			t.Errorf("bob %s %s: %d %s", req[0], req[1], r.status, r.raw)
		}
	}
	list := e.must(e.do("GET", "/v1/preview/models", e.bob, nil), 200)
	if n := len(list.body["data"].([]any)); n != 0 {
		t.Errorf("bob sees %d models", n)
	}
	list = e.must(e.do("GET", "/v1/preview/models", e.alice, nil), 200)
	if n := len(list.body["data"].([]any)); n != 1 {
		t.Errorf("alice sees %d models", n)
	}

	dir := filepath.Join(e.dataDir, "checkpoints", id)
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
	r := e.must(e.do("DELETE", "/v1/preview/models/"+id, e.alice, nil), 200)
	if r.body["model_id"] != id || r.body["deleted_checkpoints"] != 1.0 || r.body["deleted_run"] != false {
		t.Errorf("delete: %s", r.raw)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("checkpoint files remain: %v", err)
	}
	e.must(e.do("GET", "/v1/preview/models/"+id, e.alice, nil), 404)
	e.must(e.do("DELETE", "/v1/preview/models/"+id, e.alice, nil), 404)
}

// addSteps adds checkpoints 1..n to a model directly in the store.
func addSteps(t *testing.T, e *env, modelID string, n int) {
	t.Helper()
	for step := 1; step <= n; step++ {
		dir := filepath.Join(e.dataDir, "checkpoints", modelID, fmt.Sprintf("step-%d", step))
		os.MkdirAll(dir, 0o755)
		j, err := e.st.CreateJob(context.Background(), store.Job{ModelID: modelID, Kind: "rl", RequestPath: "x"})
		if err != nil {
			t.Fatal(err)
		}
		// Run it through the store's state machine without a worker.
		_ = j
		if _, err := e.st.DB().Exec("UPDATE jobs SET status='RUNNING', attempt=1 WHERE id=?", j.ID); err != nil {
			t.Fatal(err)
		}
		lt, err := e.st.LockLease(context.Background(), store.Lease{JobID: j.ID, Attempt: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lt.Complete(context.Background(), store.Checkpoint{ModelID: modelID, Step: step, Dir: dir}, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCheckpointsPaging(t *testing.T) {
	e := newEnv(t, envOpts{noTrain: true})
	id := e.createModel("m")
	addSteps(t, e, id, 4) // steps 0..4
	base := "/v1/preview/models/" + id + "/checkpoints"

	steps := func(r resp) []int {
		var out []int
		for _, d := range r.body["data"].([]any) {
			out = append(out, int(d.(map[string]any)["step"].(float64)))
		}
		return out
	}
	// Latest step, as clients find it.
	r := e.must(e.do("GET", base+"?limit=1&order=desc", e.alice, nil), 200)
	if s := steps(r); len(s) != 1 || s[0] != 4 || r.body["has_more"] != true {
		t.Errorf("latest: %v %s", s, r.raw)
	}
	// Exactly one page.
	r = e.must(e.do("GET", base+"?limit=5", e.alice, nil), 200)
	if s := steps(r); fmt.Sprint(s) != "[0 1 2 3 4]" || r.body["has_more"] != false || r.body["object"] != "list" {
		t.Errorf("one page: %v %s", s, r.raw)
	}
	// Paging loop, ascending and descending.
	for _, order := range []string{"asc", "desc"} {
		var all []int
		after := ""
		for pages := 0; ; pages++ {
			r := e.must(e.do("GET", base+"?limit=2&order="+order+"&after="+after, e.alice, nil), 200)
			all = append(all, steps(r)...)
			if r.body["first_id"] == nil || r.body["last_id"] == nil {
				t.Fatalf("page lacks first_id/last_id: %s", r.raw)
			}
			if r.body["has_more"] != true {
				break
			}
			after = r.body["last_id"].(string)
		}
		want := "[0 1 2 3 4]"
		if order == "desc" {
			want = "[4 3 2 1 0]"
		}
		if fmt.Sprint(all) != want {
			t.Errorf("%s paging: %v", order, all)
		}
	}
	// After the last id: empty, has_more false, null ids.
	r = e.must(e.do("GET", base+"?limit=100", e.alice, nil), 200)
	last := r.body["last_id"].(string)
	r = e.must(e.do("GET", base+"?after="+last, e.alice, nil), 200)
	if len(r.body["data"].([]any)) != 0 || r.body["has_more"] != false || r.body["first_id"] != nil || r.body["last_id"] != nil {
		t.Errorf("after last: %s", r.raw)
	}
	// Bad query values.
	for _, q := range []string{"?limit=0", "?limit=101", "?limit=x", "?order=up"} {
		r := e.do("GET", base+q, e.alice, nil)
		if r.status != 400 || r.errCode() != "invalid_value" {
			t.Errorf("%s: %d %s", q, r.status, r.raw)
		}
	}

	// Delete steps.
	r = e.must(e.do("DELETE", base, e.alice, map[string]any{"steps": []int{1, 2, 9}}), 200)
	if r.body["deleted_count"] != 2.0 || fmt.Sprint(r.body["not_found_steps"]) != "[9]" {
		t.Errorf("delete steps: %s", r.raw)
	}
	if _, err := os.Stat(filepath.Join(e.dataDir, "checkpoints", id, "step-1")); !os.IsNotExist(err) {
		t.Errorf("step-1 files remain")
	}
	r = e.must(e.do("GET", base+"?limit=100", e.alice, nil), 200)
	if s := steps(r); fmt.Sprint(s) != "[0 3 4]" {
		t.Errorf("after delete: %v", s)
	}
	r = e.do("DELETE", base, e.alice, map[string]any{"steps": []any{"1"}})
	if r.status != 400 || r.errParam() != "steps[0]" {
		t.Errorf("bad steps: %d %s", r.status, r.raw)
	}
	r = e.do("DELETE", base, e.alice, map[string]any{})
	if r.status != 400 || r.errParam() != "steps" {
		t.Errorf("missing steps: %d %s", r.status, r.raw)
	}
}

func TestModelsListPaging(t *testing.T) {
	e := newEnv(t, envOpts{noTrain: true})
	r := e.must(e.do("GET", "/v1/preview/models", e.alice, nil), 200)
	if len(r.body["data"].([]any)) != 0 || r.body["has_more"] != false || r.body["first_id"] != nil {
		t.Errorf("empty list: %s", r.raw)
	}
	ids := []string{e.createModel("a"), e.createModel("b"), e.createModel("c")}
	r = e.must(e.do("GET", "/v1/preview/models?limit=2", e.alice, nil), 200)
	if r.body["has_more"] != true || r.body["first_id"] != ids[0] || r.body["last_id"] != ids[1] {
		t.Errorf("page 1: %s", r.raw)
	}
	r = e.must(e.do("GET", "/v1/preview/models?limit=2&after="+ids[1], e.alice, nil), 200)
	if r.body["has_more"] != false || r.body["first_id"] != ids[2] {
		t.Errorf("page 2: %s", r.raw)
	}
}

func TestLogMetrics(t *testing.T) {
	e := newEnv(t, envOpts{noTrain: true})
	id := e.createModel("m")
	body := map[string]any{
		"split": "val", "model_id": "extra is ignored",
		"trajectory_groups": []any{
			map[string]any{"trajectories": []any{
				map[string]any{"reward": 1.0, "metrics": map[string]any{"acc": 1, "ok": true, "s": "x"}, "messages_and_choices": []any{}},
				map[string]any{"reward": 0.0, "metrics": map[string]any{"acc": 0, "ok": false}, "messages_and_choices": []any{}},
			}, "exceptions": []any{map[string]any{"type": "ValueError"}}, "metrics": map[string]any{"judge": 0.8, "tag": "x"}},
			map[string]any{"trajectories": []any{
				map[string]any{"reward": 0.5, "messages_and_choices": []any{}},
			}, "metrics": map[string]any{"judge": 0.4, "flag": true}},
		},
	}
	r := e.must(e.do("POST", "/v1/preview/models/"+id+"/log", e.alice, body), 200)
	if string(r.raw) != "{}\n" {
		t.Errorf("log response %q", r.raw)
	}
	r = e.must(e.do("GET", "/v1/preview/models/"+id+"/checkpoints?limit=1&order=desc", e.alice, nil), 200)
	m := r.body["data"].([]any)[0].(map[string]any)["metrics"].(map[string]any)
	want := map[string]float64{
		"val/reward":         0.5,  // (1+0+0.5)/3
		"val/acc":            0.5,  // (1+0)/2
		"val/ok":             0.5,  // booleans count as 0/1
		"val/exception_rate": 0.25, // 1 exception / (3 trajectories + 1)
		"val/reward_std_dev": 0.5,  // the one-trajectory group is left out, as ART does
		"val/group_judge":    0.6,  // group metrics: (0.8+0.4)/2
		"val/group_flag":     1,    // over the groups that have it
	}
	for k, v := range want {
		if got, ok := m[k].(float64); !ok || got < v-1e-9 || got > v+1e-9 {
			t.Errorf("%s = %v, want %v (all: %v)", k, m[k], v, m)
		}
	}
	if _, ok := m["val/group_tag"]; ok {
		t.Errorf("non-numeric group metric logged: %v", m)
	}
	if _, ok := m["val/s"]; ok {
		t.Errorf("non-numeric metric logged: %v", m)
	}
	r = e.do("POST", "/v1/preview/models/"+id+"/log", e.alice, map[string]any{"split": "val", "trajectory_groups": []any{
		map[string]any{"trajectories": []any{map[string]any{"reward": "high"}}}}})
	if r.status != 400 || r.errParam() != "trajectory_groups[0].trajectories[0].reward" {
		t.Errorf("bad reward: %d %s", r.status, r.raw)
	}
}

func TestConcurrentCreateSameName(t *testing.T) {
	e := newEnv(t, envOpts{noTrain: true})
	const n = 6
	codes := make(chan int, n)
	ids := make(chan any, n)
	for i := 0; i < n; i++ {
		go func() {
			r := e.do("POST", "/v1/preview/models", e.alice, map[string]any{"project": "p", "name": "same", "base_model": "test/base", "return_existing": true})
			codes <- r.status
			ids <- r.body["id"]
		}()
	}
	var first any
	for i := 0; i < n; i++ {
		if c := <-codes; c != 200 {
			t.Errorf("status %d", c)
		}
		id := <-ids
		if first == nil {
			first = id
		} else if id != first {
			t.Errorf("return_existing gave two models: %v, %v", first, id)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(e.dataDir, "checkpoints"))
	if len(entries) != 1 {
		t.Errorf("%d model folders on disk, want 1", len(entries))
	}
}
