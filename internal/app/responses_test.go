package app_test

import (
	"net/http"
	"testing"

	"flywheel/internal/app"
	"flywheel/internal/jobs"
	"flywheel/internal/pgtest"
)

// continueResponse creates a stored response on urlA and continues it with
// previous_response_id on urlB (the same node restarted, or another node),
// then reads it back there with GET /v1/responses/{id}.
func continueResponse(t *testing.T, urlA, keyA, urlB, keyB string) {
	t.Helper()
	first := mustDo(t, urlA, keyA, "POST", "/v1/responses", `{"model":"flywheel/tiny","input":"Hello","max_output_tokens":4}`)
	id := first["id"].(string)
	next := mustDo(t, urlB, keyB, "POST", "/v1/responses", `{"model":"flywheel/tiny","input":"And then?","previous_response_id":"`+id+`","max_output_tokens":4}`)
	if next["previous_response_id"] != id {
		t.Fatalf("continued: %v", next)
	}
	in1 := first["usage"].(map[string]any)["input_tokens"].(float64)
	in2 := next["usage"].(map[string]any)["input_tokens"].(float64)
	if in2 <= in1 {
		t.Fatalf("the continuation has %v input tokens, the first %v: the history was not carried", in2, in1)
	}
	got := mustDo(t, urlB, keyB, "GET", "/v1/responses/"+id, "")
	if got["id"] != id || got["object"] != "response" {
		t.Fatalf("GET /v1/responses/%s: %v", id, got)
	}
}

// TestResponsesSurviveRestart: a second app on the same data dir (SQLite)
// continues a response stored by the first.
func TestResponsesSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	a := newApp(t, app.Config{DataDir: dir})
	urlA, keyA := serveApp(t, a)
	first := mustDo(t, urlA, keyA, "POST", "/v1/responses", `{"model":"flywheel/tiny","input":"Hello","max_output_tokens":4}`)
	a.Close()

	b := newApp(t, app.Config{DataDir: dir})
	defer b.Close()
	urlB, keyB := serveApp(t, b)
	id := first["id"].(string)
	next := mustDo(t, urlB, keyB, "POST", "/v1/responses", `{"model":"flywheel/tiny","input":"And then?","previous_response_id":"`+id+`","max_output_tokens":4}`)
	if next["previous_response_id"] != id {
		t.Fatalf("continued after a restart: %v", next)
	}
	continueResponse(t, urlB, keyB, urlB, keyB)
	del := mustDo(t, urlB, keyB, "DELETE", "/v1/responses/"+id, "")
	if del["id"] != id || del["deleted"] != true {
		t.Fatalf("DELETE: %v", del)
	}
	req, _ := http.NewRequest("GET", urlB+"/v1/responses/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+keyB)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Fatalf("GET after DELETE: %d", res.StatusCode)
	}
}

// TestResponsesSharedBetweenNodes: on PostgreSQL, a response stored by node
// A is continued on node B.
func TestResponsesSharedBetweenNodes(t *testing.T) {
	dsn := pgtest.DSN(t)
	dir := t.TempDir()
	a := newApp(t, app.Config{DataDir: dir, Database: dsn, NodeID: "a", Workers: jobs.DefaultWorkers})
	defer a.Close()
	b := newApp(t, app.Config{DataDir: dir, Database: dsn, NodeID: "b", Workers: 0})
	defer b.Close()
	urlA, keyA := serveApp(t, a)
	urlB, keyB := serveApp(t, b)
	continueResponse(t, urlA, keyA, urlB, keyB)
}
