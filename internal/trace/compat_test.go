package trace

import (
	"strings"
	"testing"
)

// The W&B GraphQL questions Weave's Python SDK asks before weave.init logs.
func TestGraphQL(t *testing.T) {
	e := newEnvDB(t, openTestDB(t), Options{})
	project := `query Project($name: String!, $entityName: String!) { project(name: $name, entityName: $entityName) { name } }`
	_, out := e.post("alice", "/graphql", map[string]any{"query": project, "variables": map[string]any{"name": "p1", "entityName": "team"}})
	if string(out) != `{"data":{"project":{"name":"p1"}}}`+"\n" {
		t.Fatalf("project: %s", out)
	}
	// another entity's project: a GraphQL permission error (HTTP 200)
	st, out := e.post("bob", "/graphql", map[string]any{"query": project, "variables": map[string]any{"name": "p1", "entityName": "team"}})
	if st != 200 || !strings.Contains(string(out), `"code":"PERMISSION_ERROR"`) || !strings.Contains(string(out), `"data":null`) {
		t.Fatalf("bob: %d %s", st, out)
	}
	upsert := `mutation UpsertModel($name: String!, $entity: String!) { upsertModel(input: {name: $name, entityName: $entity}) { model { name description } } }`
	m := e.ok("alice", "/graphql", map[string]any{"query": upsert, "variables": map[string]any{"name": "new", "entity": "alice"}})
	if m["data"].(map[string]any)["upsertModel"].(map[string]any)["model"].(map[string]any)["name"] != "new" {
		t.Fatalf("upsert: %v", m)
	}
	_, out = e.post("alice", "/graphql", map[string]any{"query": `query DefaultEntity { viewer { username defaultEntity { name } } }`})
	// (the fields the wandb SDK's Viewer queries ask too: entity, id, flags, teams)
	if string(out) != `{"data":{"viewer":{"defaultEntity":{"name":"alice"},"entity":"alice","flags":"{}","id":"user-alice","teams":{"edges":[]},"username":"alice"}}}`+"\n" {
		t.Fatalf("viewer: %s", out)
	}
	_, out = e.post("alice", "/graphql", map[string]any{"query": `query Runs { runs { name } }`})
	if !strings.Contains(string(out), `"code":"NOT_SERVED"`) {
		t.Fatalf("unknown: %s", out)
	}
	e.fail("alice", "/graphql", map[string]any{"query": "nope"}, 400)
	e.fail("", "/graphql", map[string]any{"query": project}, 401)
}

// /v2/{entity}/{project}/calls/complete: Weave's Python SDK's write path.
func TestCallsComplete(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		id, trace := "0190f0a1-0000-7000-8000-000000000001", "0190f0a1-0000-7000-8000-0000000000aa"
		item := map[string]any{"project_id": proj, "id": id, "trace_id": trace, "op_name": "add", "started_at": "2026-01-01T00:00:00Z",
			"ended_at": "2026-01-01T00:00:01.5Z", "attributes": map[string]any{}, "inputs": map[string]any{"a": 5, "b": 10},
			"output": 15, "summary": map[string]any{"usage": map[string]any{}}, "wb_user_id": "forged"}
		if m := e.ok("alice", "/v2/alice/p1/calls/complete", map[string]any{"batch": []any{item}}); len(m) != 0 {
			t.Fatalf("complete: %v", m)
		}
		c := e.read("alice", proj, id, nil)
		if c == nil || c["output"] != 15.0 || c["trace_id"] != trace || c["platform_user_id"] != "user-alice" ||
			platform(c)["status"] != "success" || platform(c)["latency_ms"] != 1500.0 {
			t.Fatalf("read: %v", c)
		}
		item["project_id"] = "alice/other"
		if r := e.fail("alice", "/v2/alice/p1/calls/complete", map[string]any{"batch": []any{item}}, 400); !strings.Contains(r, "batch[0].project_id") {
			t.Fatalf("reason %q", r)
		}
		delete(item, "ended_at")
		item["project_id"] = proj
		if r := e.fail("alice", "/v2/alice/p1/calls/complete", map[string]any{"batch": []any{item}}, 400); !strings.Contains(r, "batch[0].ended_at") {
			t.Fatalf("reason %q", r)
		}
		if m := e.ok("bob", "/v2/alice/p1/calls/complete", map[string]any{"batch": []any{}}); len(m) != 0 { // nothing to write
			t.Fatalf("empty batch: %v", m)
		}
		item["ended_at"] = "2026-01-01T00:00:01Z"
		e.fail("bob", "/v2/alice/p1/calls/complete", map[string]any{"batch": []any{item}}, 403)
		// the single-call v2 routes are the v1 ones
		e.ok("alice", "/v2/alice/p1/call/start", map[string]any{"start": map[string]any{"project_id": proj, "id": "0190f0a1-0000-7000-8000-000000000002",
			"op_name": "x", "started_at": "2026-01-01T00:00:00Z", "attributes": map[string]any{}, "inputs": map[string]any{}}})
		if c := e.read("alice", proj, "0190f0a1-0000-7000-8000-000000000002", nil); c == nil || platform(c)["status"] != "running" {
			t.Fatalf("v2 start: %v", c)
		}
	})
}
