package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"flywheel/internal/app"
	"flywheel/internal/jobs"
	"flywheel/internal/ui"
)

// do sends a request and returns the status and the decoded body.
func do(t *testing.T, url, key, method, path, body string) (int, map[string]any, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return res.StatusCode, out, res.Header
}

// TestDashboardProvenance: a checkpoint leads to the job that made it, the
// trajectories it trained on, and for each choice the call that sampled it
// (x-call-id, choice index); the jobs list and the per-gradient-step history
// show the job; another tenant sees none of it.
func TestDashboardProvenance(t *testing.T) {
	a := newApp(t, app.Config{DataDir: t.TempDir(), Workers: jobs.DefaultWorkers})
	defer a.Close()
	url, key := serveApp(t, a)
	if _, err := a.Store.EnsureUser(t.Context(), "bob"); err != nil {
		t.Fatal(err)
	}
	_, bob, err := a.Store.CreateKey(t.Context(), "bob", "test", "")
	if err != nil {
		t.Fatal(err)
	}
	m := mustDo(t, url, key, "POST", "/v1/preview/models", `{"project": "prov", "name": "m", "base_model": "flywheel/tiny"}`)
	modelID := m["id"].(string)

	st, comp, hdr := do(t, url, key, "POST", "/v1/chat/completions", `{"model": "admin/prov/m", "messages": [{"role": "user", "content": "hi"}],
		"n": 2, "max_tokens": 6, "temperature": 1, "seed": 3, "logprobs": true, "return_tokens_as_token_ids": true}`)
	callID := hdr.Get("x-call-id")
	if st != 200 || callID == "" {
		t.Fatalf("completion: %d %v call %q", st, comp, callID)
	}
	choices := comp["choices"].([]any)
	var trajs []string
	for i, ch := range choices {
		b, _ := json.Marshal(ch)
		trajs = append(trajs, fmt.Sprintf(`{"reward": %d, "messages_and_choices": [{"role": "user", "content": "hi"}, %s]}`, i, b))
	}
	job := mustDo(t, url, key, "POST", "/v1/preview/training-jobs",
		`{"model_id": "`+modelID+`", "trajectory_groups": [{"trajectories": [`+strings.Join(trajs, ",")+`]}]}`)
	jobID := job["id"].(string)
	deadline := time.Now().Add(60 * time.Second)
	for {
		j := mustDo(t, url, key, "GET", "/v1/preview/training-jobs/"+jobID, "")
		if j["status"] == "COMPLETED" {
			break
		}
		if j["status"] == "FAILED" || time.Now().After(deadline) {
			t.Fatalf("job: %v", j)
		}
		time.Sleep(20 * time.Millisecond)
	}

	tr := mustDo(t, url, key, "GET", "/v1/preview/models/"+modelID+"/checkpoints/1/trajectories", "")
	if tr["job_id"] != jobID || tr["total"] != 2.0 || tr["has_more"] != false {
		t.Fatalf("trajectories: %v", tr)
	}
	calls := tr["calls"].(map[string]any)
	for i, raw := range tr["data"].([]any) {
		tt := raw.(map[string]any)
		if tt["reward"] != float64(i) || tt["num_choices"] != 1.0 {
			t.Errorf("trajectory %d: %v", i, tt)
		}
		ch := tt["messages_and_choices"].([]any)[1].(map[string]any)["choice"].(map[string]any)
		want := choices[i].(map[string]any)["message"].(map[string]any)["content"]
		if ch["content"] != want {
			t.Errorf("choice %d content %v, sampled %v", i, ch["content"], want)
		}
		link, _ := calls[ch["fingerprint"].(string)].(map[string]any)
		if link["call_id"] != callID || link["choice_index"] != float64(i) || link["project_id"] != "admin/prov" {
			t.Errorf("choice %d: link %v, want call %s choice %d", i, link, callID, i)
		}
	}
	// the linked call is readable by its owner
	read := mustDo(t, url, key, "POST", "/call/read", `{"project_id": "admin/prov", "id": "`+callID+`"}`)
	if read["call"] == nil {
		t.Fatal("linked call not readable")
	}
	// page bounds
	if st, _, _ := do(t, url, key, "GET", "/v1/preview/models/"+modelID+"/checkpoints/1/trajectories?limit=0", ""); st != 400 {
		t.Errorf("limit=0: %d", st)
	}
	if st, body, _ := do(t, url, key, "GET", "/v1/preview/models/"+modelID+"/checkpoints/0/trajectories", ""); st != 404 {
		t.Errorf("step 0: %d %v", st, body)
	}
	page := mustDo(t, url, key, "GET", "/v1/preview/models/"+modelID+"/checkpoints/1/trajectories?offset=1&limit=1", "")
	if len(page["data"].([]any)) != 1 || page["has_more"] != false {
		t.Errorf("offset 1: %v", page)
	}
	// an offset past the end (even near the largest int) is an empty page, not an overflow
	for _, off := range []string{"2", "9223372036854775800"} {
		page := mustDo(t, url, key, "GET", "/v1/preview/models/"+modelID+"/checkpoints/1/trajectories?offset="+off+"&limit=20", "")
		if len(page["data"].([]any)) != 0 || page["has_more"] != false || page["total"] != 2.0 {
			t.Errorf("offset %s: %v", off, page)
		}
	}

	jobs := mustDo(t, url, key, "GET", "/v1/preview/training-jobs?model_id="+modelID, "")
	if d := jobs["data"].([]any); len(d) != 1 || d[0].(map[string]any)["id"] != jobID {
		t.Errorf("jobs: %v", jobs)
	}
	ev := mustDo(t, url, key, "GET", "/v1/preview/models/"+modelID+"/events?type=gradient_step", "")
	d := ev["data"].([]any)
	if len(d) == 0 || d[0].(map[string]any)["job_id"] != jobID || d[0].(map[string]any)["data"].(map[string]any)["loss"] == nil {
		t.Errorf("gradient steps: %v", ev)
	}
	if st, _, _ := do(t, url, key, "GET", "/v1/preview/models/"+modelID+"/events?type=nope", ""); st != 400 {
		t.Errorf("bad type: %d", st)
	}
	cks := mustDo(t, url, key, "GET", "/v1/preview/models/"+modelID+"/checkpoints?order=desc&limit=1", "")
	if c := cks["data"].([]any)[0].(map[string]any); c["size_bytes"].(float64) <= 0 {
		t.Errorf("checkpoint size: %v", c)
	}

	// Another tenant: nothing.
	for _, p := range []string{"/checkpoints/1/trajectories", "/events"} {
		if st, _, _ := do(t, url, bob, "GET", "/v1/preview/models/"+modelID+p, ""); st != 404 {
			t.Errorf("bob %s: %d", p, st)
		}
	}
	if st, _, _ := do(t, url, bob, "GET", "/v1/preview/training-jobs?model_id="+modelID, ""); st != 404 {
		t.Errorf("bob jobs of admin's model: %d", st)
	}
	if bj := mustDo(t, url, bob, "GET", "/v1/preview/training-jobs", ""); len(bj["data"].([]any)) != 0 {
		t.Errorf("bob sees jobs: %v", bj)
	}
	fp := tr["data"].([]any)[0].(map[string]any)["messages_and_choices"].([]any)[1].(map[string]any)["choice"].(map[string]any)["fingerprint"].(string)
	bp, _ := a.Store.Authenticate(t.Context(), bob)
	if links, err := a.Calls.ChoiceLinks(t.Context(), bp, []string{fp}); err != nil || len(links) != 0 {
		t.Errorf("bob's choice links: %v %v", links, err)
	}
	if pr := mustDo(t, url, bob, "GET", "/calls/projects", ""); len(pr["projects"].([]any)) != 0 {
		t.Errorf("bob's projects: %v", pr)
	}
	if pr := mustDo(t, url, key, "GET", "/calls/projects", ""); fmt.Sprint(pr["projects"]) != "[admin/prov]" {
		t.Errorf("admin's projects: %v", pr)
	}
}

// TestUIServed: the service serves the dashboard at /ui/ without a key,
// through its middleware, with the dashboard's headers (internal/ui tests
// the assets and headers themselves).
func TestUIServed(t *testing.T) {
	a := newApp(t, app.Config{DataDir: t.TempDir(), Workers: jobs.DefaultWorkers})
	defer a.Close()
	url, _ := serveApp(t, a)
	for path, ctype := range map[string]string{"/ui/": "text/html", "/ui/app.js": "javascript", "/ui/chart.js": "javascript", "/ui/style.css": "text/css"} {
		res, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(res.Header.Get("Content-Type"), ctype) {
			t.Errorf("%s: %d %s", path, res.StatusCode, res.Header.Get("Content-Type"))
		}
		if res.Header.Get("Content-Security-Policy") != ui.CSP || res.Header.Get("x-request-id") == "" {
			t.Errorf("%s: headers %v", path, res.Header)
		}
	}
}
