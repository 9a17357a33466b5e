package api_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"flywheel/internal/api"
	"flywheel/internal/httpx"
)

// callStoreStub mounts routes the way the call-store package does.
var callStoreStub = api.RegistrarFunc(func(rt *httpx.Routes) {
	rt.Prefix(httpx.CallStore, "/call/")
	mux, openai := rt.In(httpx.CallStore), rt.In(httpx.OpenAIAPI)
	mux.Route("POST /call/read", func(w http.ResponseWriter, r *http.Request) error {
		p, err := httpx.Principal(r)
		if err != nil {
			return err
		}
		httpx.WriteJSON(w, 200, map[string]any{"user": p.UserName, "entities": p.Entities})
		return nil
	})
	openai.HandleFunc("GET /v1/boom", func(w http.ResponseWriter, r *http.Request) {
		panic("secret internal detail")
	})
	mux.HandleFunc("POST /call/boom", func(w http.ResponseWriter, r *http.Request) {
		panic("secret internal detail")
	})
	openai.HandleFunc("POST /tokenize", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteJSON(w, 200, map[string]any{"ok": true})
	})
})

func TestAuthEnvelopes(t *testing.T) {
	e := newEnv(t, envOpts{extra: []api.Registrar{callStoreStub}, noAuthTT: true})
	// /v1 without a key: 401 in the OpenAI envelope.
	r := e.do("GET", "/v1/preview/models", "", nil)
	if r.status != 401 || r.errField("type") != "authentication_error" || r.header.Get("X-Request-Id") == "" {
		t.Errorf("no key: %d %s", r.status, r.raw)
	}
	r = e.do("GET", "/v1/preview/models", "fw_notakey_000000000000000", nil)
	if r.status != 401 || r.errField("message") != "invalid API key" {
		t.Errorf("bad key: %d %s", r.status, r.raw)
	}
	r = e.do("POST", "/tokenize", "", map[string]any{})
	if r.status != 401 || r.errField("type") != "authentication_error" {
		t.Errorf("tokenize without key: %d %s", r.status, r.raw)
	}
	e.must(e.do("POST", "/tokenize", e.alice, map[string]any{}), 200)

	// Call-store routes: {"reason"}, Basic (any user) or Bearer.
	r = e.do("POST", "/call/read", "", map[string]any{})
	if r.status != 401 || r.body["reason"] == nil || r.body["error"] != nil {
		t.Errorf("call store without key: %d %s", r.status, r.raw)
	}
	req, _ := http.NewRequest("POST", e.url+"/call/read", strings.NewReader("{}"))
	req.SetBasicAuth("api", e.alice)
	r = e.must(e.send(req), 200)
	if r.body["user"] != "alice" {
		t.Errorf("basic auth principal: %s", r.raw)
	}
	e.must(e.do("POST", "/call/read", e.bob, map[string]any{}), 200)
	req, _ = http.NewRequest("POST", e.url+"/call/read", strings.NewReader("{}"))
	req.SetBasicAuth("api", "wrong-key-wrong-key")
	if r := e.send(req); r.status != 401 || r.body["reason"] == nil {
		t.Errorf("basic bad key: %d %s", r.status, r.raw)
	}
	// Basic is not accepted under /v1.
	req, _ = http.NewRequest("GET", e.url+"/v1/preview/models", nil)
	req.SetBasicAuth("api", e.alice)
	if r := e.send(req); r.status != 401 {
		t.Errorf("basic under /v1: %d", r.status)
	}

	// Revoked keys stop working.
	keys, _ := e.st.ListKeys(context.Background(), "bob")
	if err := e.st.RevokeKey(context.Background(), keys[0].ID); err != nil {
		t.Fatal(err)
	}
	if r := e.do("GET", "/v1/preview/models", e.bob, nil); r.status != 401 {
		t.Errorf("revoked key: %d", r.status)
	}
}

func TestRequestIDRecoveryAndNotFound(t *testing.T) {
	e := newEnv(t, envOpts{extra: []api.Registrar{callStoreStub}})
	req, _ := http.NewRequest("GET", e.url+"/v1/health", nil)
	req.Header.Set("X-Request-Id", "client-chosen-id")
	r := e.must(e.send(req), 200)
	if r.header.Get("X-Request-Id") != "client-chosen-id" || r.body["status"] != "ok" {
		t.Errorf("health: %v %s", r.header, r.raw)
	}
	r = e.do("GET", "/v1/boom", e.alice, nil)
	if r.status != 500 || r.errField("type") != "server_error" || strings.Contains(string(r.raw), "secret") || r.header.Get("X-Request-Id") == "" {
		t.Errorf("panic under /v1: %d %s", r.status, r.raw)
	}
	r = e.do("POST", "/call/boom", e.alice, map[string]any{})
	if r.status != 500 || r.body["reason"] == nil || strings.Contains(string(r.raw), "secret") {
		t.Errorf("panic under /call: %d %s", r.status, r.raw)
	}
	r = e.do("GET", "/v1/nothing/here", e.alice, nil)
	if r.status != 404 || r.errField("type") != "not_found_error" {
		t.Errorf("unknown route: %d %s", r.status, r.raw)
	}
	r = e.do("PUT", "/v1/preview/models", e.alice, map[string]any{})
	if r.status != 405 || r.errCode() != "method_not_allowed" || r.header.Get("Allow") != "GET, POST" {
		t.Errorf("wrong method: %d %v %s", r.status, r.header.Get("Allow"), r.raw)
	}
	// The server still serves after a panic.
	e.must(e.do("GET", "/v1/preview/models", e.alice, nil), 200)
}

// The server has one body limit (Config.MaxBodyBytes), the same for every
// route group: over it a job request is 413 in the OpenAI envelope and a
// call-store request 413 in {"reason"}, with or without Content-Length.
func TestBodyLimit(t *testing.T) {
	e := newEnv(t, envOpts{maxBody: 1024, wandb: true})
	id := e.createModel("m")
	big := rlBody(id, 40)
	r := e.do("POST", "/v1/preview/training-jobs", e.alice, big)
	if r.status != 413 || r.errField("type") != "request_too_large" {
		t.Errorf("over the limit: %d %s", r.status, r.raw)
	}
	// Without Content-Length (chunked): still 413.
	req, _ := http.NewRequest("POST", e.url+"/v1/preview/training-jobs", io.MultiReader(bytes.NewReader([]byte(mustJSON(big)))))
	req.ContentLength = -1
	req.Header.Set("Authorization", "Bearer "+e.alice)
	if r := e.send(req); r.status != 413 {
		t.Errorf("chunked over the limit: %d %s", r.status, r.raw)
	}
	start := map[string]any{"start": map[string]any{"project_id": "alice/p", "op_name": "op", "started_at": "2025-01-01T00:00:00Z",
		"attributes": map[string]any{}, "inputs": map[string]any{"blob": strings.Repeat("x", 4096)}}}
	r = e.do("POST", "/call/start", e.alice, start)
	if reason, _ := r.body["reason"].(string); r.status != 413 || !strings.Contains(reason, "limit of 1024 bytes") {
		t.Errorf("call store over the limit: %d %s", r.status, r.raw)
	}
	req, _ = http.NewRequest("POST", e.url+"/call/start", io.MultiReader(strings.NewReader(mustJSON(start))))
	req.ContentLength = -1
	req.Header.Set("Authorization", "Bearer "+e.alice)
	if r := e.send(req); r.status != 413 || r.body["reason"] == nil {
		t.Errorf("call store, chunked over the limit: %d %s", r.status, r.raw)
	}
	// Under the limit the call store takes it.
	start["start"].(map[string]any)["inputs"] = map[string]any{}
	e.must(e.do("POST", "/call/start", e.alice, start), 200)
}

func TestSystemCheckAndMetrics(t *testing.T) {
	e := newEnv(t, envOpts{})
	r := e.must(e.do("GET", "/v1/system-check", "", nil), 200)
	for _, k := range []string{"database", "queue", "engine", "storage"} {
		m, ok := r.body[k].(map[string]any)
		if !ok || m["ok"] != true {
			t.Errorf("%s: %v", k, r.body[k])
		}
	}
	if r.body["api"] != true {
		t.Errorf("api: %s", r.raw)
	}
	if db := r.body["database"].(map[string]any); db["latency_ms"] == nil {
		t.Errorf("database latency missing: %v", db)
	}
	e.createModel("m")
	res, err := http.Get(e.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{
		`flywheel_http_requests_total{code="200",method="POST",route="POST /v1/preview/models"} 1`,
		`flywheel_http_request_duration_seconds_count{method="POST",route="POST /v1/preview/models"} 1`,
		`flywheel_queue_depth 0`,
		`flywheel_jobs{status="QUEUED"} 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}

	// A failing dependency answers 503.
	e.st.Close()
	r = e.do("GET", "/v1/system-check", "", nil)
	if r.status != 503 || r.body["database"].(map[string]any)["ok"] != false {
		t.Errorf("closed database: %d %s", r.status, r.raw)
	}
}
