package trace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

const proj = "alice/p1"

var callKeys = []string{"id", "project_id", "op_name", "display_name", "trace_id", "parent_id", "thread_id", "turn_id",
	"started_at", "ended_at", "attributes", "inputs", "output", "exception", "summary", "platform_user_id",
	"platform_run_id", "platform_run_step", "platform_run_step_end", "deleted_at", "storage_size_bytes",
	"total_storage_size_bytes"}

func startReqMap(extra map[string]any) map[string]any {
	m := map[string]any{"project_id": proj, "op_name": "my_op", "started_at": "2025-01-02T03:04:05.000000Z",
		"attributes": map[string]any{}, "inputs": map[string]any{"x": 1}}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func TestStorageSizeExample(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		// inputs sent compact and out of canonical spacing: the stored form is canonical.
		st, out := e.post("alice", "/call/start", `{"start": {"project_id": "alice/p1", "op_name": "add",
			"started_at": "2025-01-02T03:04:05Z", "attributes": {}, "inputs": {"a":5,"b":10}}}`)
		if st != 200 {
			t.Fatalf("start: %d %s", st, out)
		}
		var sr struct{ ID, TraceID string }
		json.Unmarshal(out, &struct {
			ID      *string `json:"id"`
			TraceID *string `json:"trace_id"`
		}{&sr.ID, &sr.TraceID})
		if !validID(sr.ID) || sr.ID[14] != '7' || !validID(sr.TraceID) {
			t.Fatalf("generated ids: %s", out)
		}
		c := e.read("alice", proj, sr.ID, map[string]any{"include_storage_size": true})
		if c["storage_size_bytes"] != 19.0 {
			t.Fatalf("running call storage_size_bytes = %v, want 19", c["storage_size_bytes"])
		}
		e.end("alice", map[string]any{"project_id": proj, "id": sr.ID, "ended_at": "2025-01-02T03:04:06Z", "output": nil, "summary": map[string]any{}})
		c = e.read("alice", proj, sr.ID, map[string]any{"include_storage_size": true})
		if c["storage_size_bytes"] != 25.0 {
			t.Fatalf("ended call storage_size_bytes = %v, want 25", c["storage_size_bytes"])
		}
		// the stored text is what reads return
		_, raw := e.post("alice", "/call/read", map[string]any{"project_id": proj, "id": sr.ID})
		if !bytes.Contains(raw, []byte(`"inputs": {"a": 5, "b": 10}`)) {
			t.Fatalf("inputs not canonical in %s", raw)
		}
		// non-ASCII counts as its \uXXXX escape
		id2, _ := e.start("alice", startReqMap(map[string]any{"inputs": map[string]any{"s": "é"}}))
		c = e.read("alice", proj, id2, map[string]any{"include_storage_size": true})
		if want := float64(len(`{"s": "\u00e9"}`) + 2); c["storage_size_bytes"] != want {
			t.Fatalf("non-ASCII size = %v, want %v", c["storage_size_bytes"], want)
		}
	})
}

func TestReadRecordShape(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		id, traceID := e.start("alice", startReqMap(map[string]any{"platform_user_id": "someone-else", "thread_id": "th1",
			"platform_run_id": "run1", "platform_run_step": 3}))
		for _, flags := range []map[string]any{nil, {"include_costs": nil, "include_storage_size": nil, "include_total_storage_size": nil},
			{"include_costs": false, "include_storage_size": false, "include_total_storage_size": false}, allFlags} {
			c := e.read("alice", proj, id, flags)
			var keys []string
			for k := range c {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			want := append([]string(nil), callKeys...)
			sort.Strings(want)
			if strings.Join(keys, ",") != strings.Join(want, ",") {
				t.Fatalf("keys = %v\nwant %v", keys, want)
			}
			if flags["include_storage_size"] != true && (c["storage_size_bytes"] != nil || c["total_storage_size_bytes"] != nil) {
				t.Fatalf("sizes without the flags: %v %v", c["storage_size_bytes"], c["total_storage_size_bytes"])
			}
		}
		c := e.read("alice", proj, id, nil)
		if c["id"] != id || c["trace_id"] != traceID || c["project_id"] != proj || c["op_name"] != "my_op" ||
			c["started_at"] != "2025-01-02T03:04:05.000000Z" || c["ended_at"] != nil || c["output"] != nil ||
			c["exception"] != nil || c["deleted_at"] != nil || c["parent_id"] != nil || c["thread_id"] != "th1" ||
			c["platform_run_id"] != "run1" || c["platform_run_step"] != 3.0 || c["platform_run_step_end"] != nil {
			t.Fatalf("record: %v", c)
		}
		if c["platform_user_id"] != "user-alice" {
			t.Fatalf("platform_user_id = %v, want the authenticated user", c["platform_user_id"])
		}
		pl := platform(c)
		if pl["status"] != "running" || pl["trace_name"] != "my_op" || pl["latency_ms"] != nil {
			t.Fatalf("platform = %v", pl)
		}

		// missing, deleted, unknown project of own entity: {"call": null}
		if c := e.read("alice", proj, NewUUIDv7(), nil); c != nil {
			t.Fatal("missing call not null")
		}
		if c := e.read("alice", "alice/nope", id, nil); c != nil {
			t.Fatal("unknown project not null")
		}
		e.fail("alice", "/call/read", map[string]any{"project_id": proj, "id": "not-an-id"}, 400)
		e.fail("alice", "/call/read", map[string]any{"project_id": proj}, 400)
		e.ok("alice", "/calls/delete", map[string]any{"project_id": proj, "call_ids": []string{id}})
		if c := e.read("alice", proj, id, nil); c != nil {
			t.Fatal("deleted call not null")
		}
		_, raw := e.post("alice", "/call/read", map[string]any{"project_id": proj, "id": id})
		if strings.TrimSpace(string(raw)) != `{"call": null}` {
			t.Fatalf("null call body: %s", raw)
		}
	})
}

func TestAuthAndTenancy(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		id, _ := e.start("alice", startReqMap(nil))
		// team entity: alice is a member, the project is created on first write
		tid, _ := e.start("alice", startReqMap(map[string]any{"project_id": "team/shared"}))
		if e.read("alice", "team/shared", tid, nil) == nil {
			t.Fatal("team call not readable")
		}
		// bob is not a member of alice: 403 everywhere
		e.fail("bob", "/call/read", map[string]any{"project_id": proj, "id": id}, 403)
		e.fail("bob", "/call/read", map[string]any{"project_id": "alice/does-not-exist", "id": id}, 403)
		e.fail("bob", "/call/start", map[string]any{"start": startReqMap(nil)}, 403)
		e.fail("bob", "/call/end", map[string]any{"end": map[string]any{"project_id": proj, "id": id, "ended_at": "2025-01-02T03:04:06Z", "summary": map[string]any{}}}, 403)
		e.fail("bob", "/call/upsert_batch", map[string]any{"batch": []any{map[string]any{"mode": "start", "req": startReqMap(nil)}}}, 403)
		e.fail("bob", "/call/update", map[string]any{"project_id": proj, "call_id": id, "display_name": "x"}, 403)
		e.fail("bob", "/calls/delete", map[string]any{"project_id": proj, "call_ids": []string{id}}, 403)
		e.fail("bob", "/calls/query", map[string]any{"project_id": proj}, 403)
		e.fail("bob", "/calls/stream_query", map[string]any{"project_id": proj}, 403)
		e.fail("bob", "/cost/create", map[string]any{"project_id": proj, "costs": map[string]any{"m": map[string]any{"prompt_token_cost": 1, "completion_token_cost": 1}}}, 403)
		e.fail("bob", "/cost/query", map[string]any{"project_id": proj}, 403)
		e.fail("bob", "/cost/purge", map[string]any{"project_id": proj, "query": map[string]any{}}, 403)
		// no principal: 401
		for _, path := range []string{"/call/read", "/call/start", "/calls/query", "/cost/create"} {
			e.fail("", path, map[string]any{"project_id": proj}, 401)
		}
		// malformed project ids: 400
		for _, p := range []string{"", "alice", "alice/", "/p", "alice/p/x"} {
			e.fail("alice", "/call/read", map[string]any{"project_id": p, "id": id}, 400)
		}
		// bob's own project works and does not see alice's call
		if e.read("bob", "bob/p1", id, nil) != nil {
			t.Fatal("bob sees alice's call through his own project")
		}
	})
}

func TestTotalStorageSize(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		root, trace := e.start("alice", startReqMap(nil))
		child, _ := e.start("alice", startReqMap(map[string]any{"trace_id": trace, "parent_id": root, "inputs": map[string]any{"y": "abc"}}))
		grand, _ := e.start("alice", startReqMap(map[string]any{"trace_id": trace, "parent_id": child}))
		e.end("alice", map[string]any{"project_id": proj, "id": grand, "ended_at": "2025-01-02T03:04:06Z", "output": 42, "summary": map[string]any{"k": "v"}})
		other, _ := e.start("alice", startReqMap(nil)) // another trace, not counted
		sizes := map[string]float64{}
		for _, id := range []string{root, child, grand, other} {
			c := e.read("alice", proj, id, allFlags)
			sizes[id] = c["storage_size_bytes"].(float64)
		}
		want := sizes[root] + sizes[child] + sizes[grand]
		if got := e.read("alice", proj, root, allFlags)["total_storage_size_bytes"]; got != want {
			t.Fatalf("root total = %v, want %v", got, want)
		}
		if got := e.read("alice", proj, child, allFlags)["total_storage_size_bytes"]; got != nil {
			t.Fatalf("child total = %v, want null", got)
		}
		if got := e.read("alice", proj, root, map[string]any{"include_total_storage_size": true})["storage_size_bytes"]; got != nil {
			t.Fatalf("storage_size_bytes without its flag = %v", got)
		}
		// deleted calls stay counted
		e.ok("alice", "/calls/delete", map[string]any{"project_id": proj, "call_ids": []string{grand}})
		if got := e.read("alice", proj, root, allFlags)["total_storage_size_bytes"]; got != want {
			t.Fatalf("root total after deleting a descendant = %v, want %v", got, want)
		}
		// the same figures through a query
		m := e.ok("alice", "/calls/query", map[string]any{"project_id": proj, "filter": map[string]any{"call_ids": []string{root, child}},
			"include_storage_size": true, "include_total_storage_size": true})
		calls := m["calls"].([]any)
		if len(calls) != 2 || calls[0].(map[string]any)["total_storage_size_bytes"] != want || calls[1].(map[string]any)["total_storage_size_bytes"] != nil {
			t.Fatalf("query totals: %v", calls)
		}
	})
}

var gpt4Usage = map[string]any{"usage": map[string]any{"gpt-4": map[string]any{"requests": 2, "prompt_tokens": 2000000, "completion_tokens": 4000000}}}

func TestCosts(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{DefaultServicePrice: &TokenPrice{Prompt: 1e-06, Completion: 2e-06}})
		ctx := t.Context()
		if err := e.svc.SetDefaultPrice(ctx, "gpt-4", 3e-05, 6e-05, time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)); err != nil {
			t.Fatal(err)
		}
		id, _ := e.start("alice", startReqMap(nil))
		e.end("alice", map[string]any{"project_id": proj, "id": id, "ended_at": "2025-01-02T03:04:06Z", "summary": gpt4Usage})

		// without the flag: no costs key
		if _, has := platform(e.read("alice", proj, id, nil))["costs"]; has {
			t.Fatal("costs without include_costs")
		}
		_, raw := e.post("alice", "/call/read", map[string]any{"project_id": proj, "id": id, "include_costs": true})
		if !bytes.Contains(raw, []byte(`"prompt_tokens_total_cost": 60.0`)) || !bytes.Contains(raw, []byte(`"completion_tokens_total_cost": 240.0`)) {
			t.Fatalf("cost totals not 60.0 / 240.0: %s", raw)
		}
		cost := platform(e.read("alice", proj, id, allFlags))["costs"].(map[string]any)["gpt-4"].(map[string]any)
		for k, v := range map[string]any{"prompt_tokens": 2e6, "completion_tokens": 4e6, "requests": 2.0, "total_tokens": 6e6,
			"prompt_token_cost": 3e-05, "completion_token_cost": 6e-05, "prompt_tokens_total_cost": 60.0,
			"completion_tokens_total_cost": 240.0, "prompt_token_cost_unit": "USD", "completion_token_cost_unit": "USD",
			"effective_date": "2024-01-01T00:00:00.000000Z", "provider_id": "default", "pricing_level": "default",
			"pricing_level_id": "default", "created_by": nil} {
			if cost[k] != v {
				t.Errorf("costs.gpt-4.%s = %v, want %v", k, cost[k], v)
			}
		}
		if len(cost) != 16 {
			t.Errorf("costs has %d keys, want 16: %v", len(cost), cost)
		}

		// a project price overrides the default one
		m := e.ok("alice", "/cost/create", map[string]any{"project_id": proj, "costs": map[string]any{
			"gpt-4": map[string]any{"prompt_token_cost": 1e-05, "completion_token_cost": 2e-05, "effective_date": "2024-06-01T00:00:00Z"}}})
		ids := m["ids"].([]any)
		if len(ids) != 1 || ids[0].([]any)[1] != "gpt-4" {
			t.Fatalf("cost/create ids = %v", ids)
		}
		cost = platform(e.read("alice", proj, id, allFlags))["costs"].(map[string]any)["gpt-4"].(map[string]any)
		if cost["pricing_level"] != "project" || cost["pricing_level_id"] != proj || cost["prompt_tokens_total_cost"] != 20.0 ||
			cost["completion_tokens_total_cost"] != 80.0 || cost["created_by"] != "user-alice" {
			t.Fatalf("project price not chosen: %v", cost)
		}
		// a project price effective after the call's start loses to one already in effect
		e.ok("alice", "/cost/create", map[string]any{"project_id": proj, "costs": map[string]any{
			"gpt-4": map[string]any{"prompt_token_cost": 9.0, "completion_token_cost": 9.0, "effective_date": "2030-01-01T00:00:00Z"}}})
		cost = platform(e.read("alice", proj, id, allFlags))["costs"].(map[string]any)["gpt-4"].(map[string]any)
		if cost["prompt_token_cost"] != 1e-05 {
			t.Fatalf("future price chosen: %v", cost)
		}
		// ... and a default price in effect beats a future project price
		e2 := newEnvDB(t, dt.open(t), Options{})
		e2.svc.SetDefaultPrice(ctx, "gpt-4", 3e-05, 6e-05, time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
		e2.ok("alice", "/cost/create", map[string]any{"project_id": proj, "costs": map[string]any{
			"gpt-4": map[string]any{"prompt_token_cost": 9.0, "completion_token_cost": 9.0, "effective_date": "2030-01-01T00:00:00Z"}}})
		id2, _ := e2.start("alice", startReqMap(nil))
		e2.end("alice", map[string]any{"project_id": proj, "id": id2, "ended_at": "2025-01-02T03:04:06Z", "summary": gpt4Usage})
		cost = platform(e2.read("alice", proj, id2, allFlags))["costs"].(map[string]any)["gpt-4"].(map[string]any)
		if cost["pricing_level"] != "default" || cost["prompt_tokens_total_cost"] != 60.0 {
			t.Fatalf("default price in effect lost to a future project price: %v", cost)
		}
		// among default prices in effect, the latest effective date wins
		e2.svc.SetDefaultPrice(ctx, "gpt-4", 5e-05, 5e-05, time.Date(2024, 9, 1, 0, 0, 0, 0, time.UTC))
		cost = platform(e2.read("alice", proj, id2, allFlags))["costs"].(map[string]any)["gpt-4"].(map[string]any)
		if cost["prompt_token_cost"] != 5e-05 {
			t.Fatalf("latest effective default not chosen: %v", cost)
		}

		// input_tokens/output_tokens are summed in; unpriced models give no entry;
		// the service's own models get the configured default price
		id3, _ := e.start("alice", startReqMap(nil))
		e.end("alice", map[string]any{"project_id": proj, "id": id3, "ended_at": "2025-01-02T03:04:06Z", "summary": map[string]any{"usage": map[string]any{
			"gpt-4":                      map[string]any{"requests": 1, "prompt_tokens": 10, "input_tokens": 5, "completion_tokens": 1, "output_tokens": 2, "total_tokens": 18},
			"unknown-model":              map[string]any{"requests": 1, "prompt_tokens": 10},
			"alice/p1/mymodel:step3":     map[string]any{"requests": 1, "prompt_tokens": 1000, "completion_tokens": 500},
			"Qwen/Qwen2.5-0.5B-Instruct": map[string]any{"requests": 1, "prompt_tokens": 1},
		}}})
		costs := platform(e.read("alice", proj, id3, allFlags))["costs"].(map[string]any)
		if _, has := costs["unknown-model"]; has {
			t.Fatal("unpriced model has costs")
		}
		if _, has := costs["Qwen/Qwen2.5-0.5B-Instruct"]; has {
			t.Fatal("base model not in BaseModels got the service price")
		}
		g := costs["gpt-4"].(map[string]any)
		if g["prompt_tokens"] != 15.0 || g["completion_tokens"] != 3.0 || g["total_tokens"] != 18.0 {
			t.Fatalf("token sums: %v", g)
		}
		own := costs["alice/p1/mymodel:step3"].(map[string]any)
		if own["prompt_token_cost"] != 1e-06 || own["completion_tokens_total_cost"] != 0.001 || own["provider_id"] != "flywheel" {
			t.Fatalf("service default price: %v", own)
		}
		// no usage: no costs key
		id4, _ := e.start("alice", startReqMap(nil))
		e.end("alice", map[string]any{"project_id": proj, "id": id4, "ended_at": "2025-01-02T03:04:06Z", "summary": map[string]any{}})
		if _, has := platform(e.read("alice", proj, id4, allFlags))["costs"]; has {
			t.Fatal("costs without usage")
		}
	})
}

func TestStatusDerivation(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		mk := func(extra map[string]any) string {
			id, _ := e.start("alice", startReqMap(extra))
			return id
		}
		endAt := func(id string, extra map[string]any) {
			m := map[string]any{"project_id": proj, "id": id, "ended_at": "2025-01-02T03:04:06.250000Z", "summary": map[string]any{}}
			for k, v := range extra {
				m[k] = v
			}
			e.end("alice", m)
		}
		running := mk(nil)
		errored := mk(nil)
		endAt(errored, map[string]any{"exception": "ValueError: boom"})
		desc := mk(nil)
		endAt(desc, map[string]any{"summary": map[string]any{"status_counts": map[string]any{"success": 1, "error": 2}}})
		success := mk(map[string]any{"op_name": "weave:///alice/p1/op/generate:abc123"})
		endAt(success, map[string]any{"summary": map[string]any{"status_counts": map[string]any{"success": 1, "error": 0},
			"platform": map[string]any{"extra": "kept", "status": "stale"}}})
		named := mk(map[string]any{"display_name": "Nice name"})
		endAt(named, nil)

		for id, want := range map[string]string{running: "running", errored: "error", desc: "descendant_error", success: "success", named: "success"} {
			if got := platform(e.read("alice", proj, id, nil))["status"]; got != want {
				t.Errorf("status = %v, want %s", got, want)
			}
		}
		pl := platform(e.read("alice", proj, success, nil))
		if pl["latency_ms"] != 1250.0 || pl["trace_name"] != "generate" || pl["extra"] != "kept" {
			t.Fatalf("platform of success: %v", pl)
		}
		pl = platform(e.read("alice", proj, named, nil))
		if pl["display_name"] != "Nice name" {
			t.Fatalf("display_name: %v", pl)
		}
		if _, has := platform(e.read("alice", proj, running, nil))["latency_ms"]; has {
			t.Fatal("latency_ms on a running call")
		}
		// update renames
		e.ok("alice", "/call/update", map[string]any{"project_id": proj, "call_id": success, "display_name": "Renamed"})
		c := e.read("alice", proj, success, nil)
		if c["display_name"] != "Renamed" || platform(c)["display_name"] != "Renamed" {
			t.Fatalf("after update: %v", c)
		}
	})
}

func TestEndBeforeStart(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		id := NewUUIDv7()
		e.end("alice", map[string]any{"project_id": proj, "id": id, "ended_at": "2025-01-02T03:04:07Z", "output": "done",
			"summary": map[string]any{"usage": map[string]any{}}, "platform_run_step_end": 4})
		if e.read("alice", proj, id, nil) != nil {
			t.Fatal("an end without its start is visible")
		}
		if calls := e.ok("alice", "/calls/query", map[string]any{"project_id": proj})["calls"].([]any); len(calls) != 0 {
			t.Fatal("an end without its start is listed")
		}
		gotID, _ := e.start("alice", startReqMap(map[string]any{"id": id}))
		if gotID != id {
			t.Fatalf("start returned id %s, want %s", gotID, id)
		}
		c := e.read("alice", proj, id, map[string]any{"include_storage_size": true})
		if c["ended_at"] != "2025-01-02T03:04:07.000000Z" || c["output"] != "done" || c["platform_run_step_end"] != 4.0 ||
			platform(c)["status"] != "success" || platform(c)["latency_ms"] != 2000.0 {
			t.Fatalf("merged call: %v", c)
		}
		want := float64(len(`{}`) + len(`{"x": 1}`) + len(`"done"`) + len(`{"usage": {}}`))
		if c["storage_size_bytes"] != want {
			t.Fatalf("merged size = %v, want %v", c["storage_size_bytes"], want)
		}
		// an update before the start is kept too; a start without display_name keeps it
		id3 := NewUUIDv7()
		e.ok("alice", "/call/update", map[string]any{"project_id": proj, "call_id": id3, "display_name": "early name"})
		if e.read("alice", proj, id3, nil) != nil {
			t.Fatal("an update without its start is visible")
		}
		e.start("alice", startReqMap(map[string]any{"id": id3}))
		if c := e.read("alice", proj, id3, nil); c["display_name"] != "early name" || platform(c)["status"] != "running" {
			t.Fatalf("update before start: %v", c)
		}
		e.ok("alice", "/call/update", map[string]any{"project_id": proj, "call_id": id3, "display_name": nil})
		if c := e.read("alice", proj, id3, nil); c["display_name"] != "early name" {
			t.Fatalf("a null display_name changed the name: %v", c["display_name"])
		}
		// the same inside one batch, end first
		id2 := NewUUIDv7()
		m := e.ok("alice", "/call/upsert_batch", map[string]any{"batch": []any{
			map[string]any{"mode": "end", "req": map[string]any{"project_id": proj, "id": id2, "ended_at": "2025-01-02T03:04:07Z", "summary": map[string]any{}}},
			map[string]any{"mode": "start", "req": startReqMap(map[string]any{"id": id2})},
		}})
		res := m["res"].([]any)
		if len(res) != 2 || len(res[0].(map[string]any)) != 0 || res[1].(map[string]any)["id"] != id2 {
			t.Fatalf("batch res: %v", res)
		}
		if platform(e.read("alice", proj, id2, nil))["status"] != "success" {
			t.Fatal("batch end-before-start not merged")
		}
	})
}

func TestUpsertBatchAtomicAndOrdered(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		a, b := NewUUIDv7(), NewUUIDv7()
		good := []any{
			map[string]any{"mode": "start", "req": startReqMap(map[string]any{"id": a})},
			map[string]any{"mode": "start", "req": startReqMap(map[string]any{"id": b, "project_id": "alice/p2"})},
			map[string]any{"mode": "end", "req": map[string]any{"project_id": proj, "id": a, "ended_at": "2025-01-02T03:04:07Z", "summary": map[string]any{}}},
			map[string]any{"mode": "start", "req": startReqMap(nil)},
		}
		m := e.ok("alice", "/call/upsert_batch", map[string]any{"batch": good})
		res := m["res"].([]any)
		if len(res) != 4 || res[0].(map[string]any)["id"] != a || res[1].(map[string]any)["id"] != b || len(res[2].(map[string]any)) != 0 || !validID(res[3].(map[string]any)["id"].(string)) {
			t.Fatalf("res = %v", res)
		}
		// a failing item anywhere: 400 naming it, nothing written
		c1, c2 := NewUUIDv7(), NewUUIDv7()
		bad := []any{
			map[string]any{"mode": "start", "req": startReqMap(map[string]any{"id": c1, "project_id": "alice/fresh"})},
			map[string]any{"mode": "start", "req": startReqMap(map[string]any{"id": c2, "started_at": 12})},
		}
		reason := e.fail("alice", "/call/upsert_batch", map[string]any{"batch": bad}, 400)
		if !strings.Contains(reason, "batch[1].req.started_at") {
			t.Fatalf("reason %q does not name the item", reason)
		}
		bad[1] = map[string]any{"mode": "middle", "req": map[string]any{}}
		e.fail("alice", "/call/upsert_batch", map[string]any{"batch": bad}, 400)
		bad[1] = map[string]any{"mode": "start", "req": startReqMap(map[string]any{"project_id": "bob/x"})}
		e.fail("alice", "/call/upsert_batch", map[string]any{"batch": bad}, 403)
		if e.read("alice", "alice/fresh", c1, nil) != nil {
			t.Fatal("a failed batch left a call behind")
		}
		var n int
		e.db.QueryRow(`SELECT COUNT(*) FROM trace_projects WHERE name = 'fresh'`).Scan(&n)
		if n != 0 {
			t.Fatal("a failed batch created its project")
		}
		// a database failure mid-batch rolls back too (a trigger makes the second insert fail)
		trigger := []string{`CREATE TRIGGER boom BEFORE INSERT ON trace_calls WHEN NEW.op_name = 'explode' BEGIN SELECT RAISE(ABORT, 'boom'); END`}
		if dt.name == DialectPostgres {
			trigger = []string{`CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN IF NEW.op_name = 'explode' THEN RAISE EXCEPTION 'boom'; END IF; RETURN NEW; END $$`,
				`CREATE TRIGGER boom BEFORE INSERT ON trace_calls FOR EACH ROW EXECUTE FUNCTION boom()`}
		}
		for _, q := range trigger {
			if _, err := e.db.Exec(q); err != nil {
				t.Fatal(err)
			}
		}
		reason = e.fail("alice", "/call/upsert_batch", map[string]any{"batch": []any{
			map[string]any{"mode": "start", "req": startReqMap(map[string]any{"id": c1})},
			map[string]any{"mode": "start", "req": startReqMap(map[string]any{"op_name": "explode"})},
		}}, 500)
		if strings.Contains(reason, "boom") {
			t.Fatalf("internal error leaked: %q", reason)
		}
		if e.read("alice", proj, c1, nil) != nil {
			t.Fatal("a batch that failed in the database left a call behind")
		}
		if dt.name == DialectPostgres {
			e.db.Exec(`DROP TRIGGER boom ON trace_calls`)
		} else {
			e.db.Exec(`DROP TRIGGER boom`)
		}
		// empty batch
		if res := e.ok("alice", "/call/upsert_batch", map[string]any{"batch": []any{}})["res"].([]any); len(res) != 0 {
			t.Fatal("empty batch")
		}
	})
}

func TestCascadeDelete(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		root, tr := e.start("alice", startReqMap(nil))
		child, _ := e.start("alice", startReqMap(map[string]any{"trace_id": tr, "parent_id": root}))
		grand, _ := e.start("alice", startReqMap(map[string]any{"trace_id": tr, "parent_id": child}))
		sibling, _ := e.start("alice", startReqMap(nil))
		m := e.ok("alice", "/calls/delete", map[string]any{"project_id": proj, "call_ids": []string{root}})
		if m["num_deleted"] != 3.0 {
			t.Fatalf("num_deleted = %v, want 3", m["num_deleted"])
		}
		for _, id := range []string{root, child, grand} {
			if e.read("alice", proj, id, nil) != nil {
				t.Fatalf("call %s not deleted", id)
			}
		}
		if e.read("alice", proj, sibling, nil) == nil {
			t.Fatal("unrelated call deleted")
		}
		var deletedAt int
		e.db.QueryRow(`SELECT COUNT(*) FROM trace_calls WHERE deleted_at IS NOT NULL`).Scan(&deletedAt)
		if deletedAt != 3 {
			t.Fatalf("soft-deleted rows = %d, want 3 (kept, marked)", deletedAt)
		}
		// deleting again deletes nothing new
		if m := e.ok("alice", "/calls/delete", map[string]any{"project_id": proj, "call_ids": []string{root, child}}); m["num_deleted"] != 0.0 {
			t.Fatalf("second delete num_deleted = %v", m["num_deleted"])
		}
		ids := make([]string, 1001)
		for i := range ids {
			ids[i] = NewUUIDv7()
		}
		e.fail("alice", "/calls/delete", map[string]any{"project_id": proj, "call_ids": ids}, 413)
		if m := e.ok("alice", "/calls/delete", map[string]any{"project_id": proj, "call_ids": ids[:1000]}); m["num_deleted"] != 0.0 {
			t.Fatal("1000 unknown ids")
		}
		e.fail("alice", "/calls/delete", map[string]any{"project_id": proj, "call_ids": []string{"nope"}}, 400)
		e.fail("alice", "/calls/delete", map[string]any{"project_id": proj}, 400)
	})
}

func TestBadInput(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		e.fail("alice", "/call/start", `{"start": {`, 400)
		e.fail("alice", "/call/start", ``, 400)
		e.fail("alice", "/call/start", `[]`, 400)
		e.fail("alice", "/call/read", `{"project_id": 5, "id": "x"}`, 400)
		e.fail("alice", "/call/read", `{"project_id": "alice/p1", "id": "x", "include_costs": "yes"}`, 400)
		for field, val := range map[string]any{"op_name": 5, "inputs": []int{1}, "attributes": "x", "display_name": 3,
			"started_at": "yesterday", "id": "not-a-uuid", "trace_id": "xyz", "parent_id": "123", "platform_run_step": "three"} {
			reason := e.fail("alice", "/call/start", map[string]any{"start": startReqMap(map[string]any{field: val})}, 400)
			if !strings.Contains(reason, "start."+field) {
				t.Errorf("reason %q does not name start.%s", reason, field)
			}
		}
		for _, field := range []string{"op_name", "started_at", "inputs", "attributes", "project_id"} {
			m := startReqMap(nil)
			delete(m, field)
			reason := e.fail("alice", "/call/start", map[string]any{"start": m}, 400)
			if !strings.Contains(reason, "start."+field) {
				t.Errorf("missing %s: reason %q", field, reason)
			}
		}
		e.fail("alice", "/call/start", map[string]any{}, 400)
		id, _ := e.start("alice", startReqMap(nil))
		endReq := func(extra map[string]any) map[string]any {
			m := map[string]any{"project_id": proj, "id": id, "ended_at": "2025-01-02T03:04:06Z", "summary": map[string]any{}}
			for k, v := range extra {
				m[k] = v
			}
			return map[string]any{"end": m}
		}
		r := e.fail("alice", "/call/end", endReq(map[string]any{"summary": nil}), 400)
		if !strings.Contains(r, "end.summary") {
			t.Errorf("missing summary reason: %q", r)
		}
		m := endReq(nil)
		delete(m["end"].(map[string]any), "summary")
		e.fail("alice", "/call/end", m, 400)
		e.fail("alice", "/call/end", endReq(map[string]any{"summary": []int{}}), 400)
		e.fail("alice", "/call/end", endReq(map[string]any{"id": "bad"}), 400)
		e.fail("alice", "/call/end", endReq(map[string]any{"ended_at": 5}), 400)
		e.fail("alice", "/call/end", endReq(map[string]any{"exception": 5}), 400)
		e.fail("alice", "/call/update", map[string]any{"project_id": proj, "call_id": "bad", "display_name": "x"}, 400)
		// OpenTelemetry ids are accepted
		otel := e.ok("alice", "/call/start", map[string]any{"start": startReqMap(map[string]any{"id": "00f067aa0ba902b7", "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"})})
		if otel["id"] != "00f067aa0ba902b7" || otel["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Fatalf("otel ids: %v", otel)
		}
		// ended_at before started_at: stored as sent, latency 0
		e.end("alice", endReq(map[string]any{"ended_at": "2025-01-02T03:04:00Z"})["end"].(map[string]any))
		c := e.read("alice", proj, id, nil)
		if c["ended_at"] != "2025-01-02T03:04:00.000000Z" || platform(c)["latency_ms"] != 0.0 || platform(c)["status"] != "success" {
			t.Fatalf("ended before started: %v", c)
		}
		// bodies over the server's limit: 413 {"reason"} (api's TestBodyLimit,
		// with the middleware that sets the limit)
	})
}

func TestQueries(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		// two traces; started_at increasing with i
		var ids []string
		root1, t1 := e.start("alice", startReqMap(map[string]any{"started_at": "2025-01-01T00:00:00Z", "op_name": "weave:///alice/p1/op/root:aaa"}))
		ids = append(ids, root1)
		for i := 1; i <= 4; i++ {
			id, _ := e.start("alice", startReqMap(map[string]any{"started_at": fmt.Sprintf("2025-01-01T00:00:0%dZ", i), "trace_id": t1,
				"parent_id": root1, "op_name": "child", "thread_id": fmt.Sprintf("th%d", i%2)}))
			ids = append(ids, id)
		}
		root2, _ := e.start("bob", map[string]any{"project_id": "bob/p", "op_name": "x", "started_at": "2025-01-01T00:00:00Z", "attributes": map[string]any{}, "inputs": map[string]any{}})
		_ = root2
		root3, _ := e.start("alice", startReqMap(map[string]any{"started_at": "2025-01-01T00:00:09Z", "op_name": "weave:///alice/p1/op/root:bbb"}))
		ids = append(ids, root3)

		list := func(body map[string]any) []string {
			t.Helper()
			body["project_id"] = proj
			calls := e.ok("alice", "/calls/query", body)["calls"].([]any)
			var out []string
			for _, c := range calls {
				out = append(out, c.(map[string]any)["id"].(string))
			}
			return out
		}
		eq := func(got, want []string) {
			t.Helper()
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("got %v\nwant %v", got, want)
			}
		}
		eq(list(map[string]any{}), ids)
		eq(list(map[string]any{"limit": 2, "offset": 1}), ids[1:3])
		eq(list(map[string]any{"sort_by": []any{map[string]any{"field": "started_at", "direction": "desc"}}}), []string{ids[5], ids[4], ids[3], ids[2], ids[1], ids[0]})
		eq(list(map[string]any{"filter": map[string]any{"trace_roots_only": true}}), []string{root1, root3})
		eq(list(map[string]any{"filter": map[string]any{"parent_ids": []string{root1}}}), ids[1:5])
		eq(list(map[string]any{"filter": map[string]any{"trace_ids": []string{t1}, "thread_ids": []string{"th1"}}}), []string{ids[1], ids[3]})
		eq(list(map[string]any{"filter": map[string]any{"op_names": []string{"child"}, "call_ids": []string{ids[2], ids[5]}}}), []string{ids[2]})
		eq(list(map[string]any{"filter": map[string]any{"op_names": []string{"weave:///alice/p1/op/root:*"}}}), []string{root1, root3})
		eq(list(map[string]any{"filter": map[string]any{"platform_user_ids": []string{"user-bob"}}}), nil)
		eq(list(map[string]any{"filter": map[string]any{"op_names": []string{}}}), nil)
		eq(list(map[string]any{"filter": map[string]any{"platform_run_ids": []string{"none"}}}), nil)
		e.fail("alice", "/calls/query", map[string]any{"project_id": proj, "sort_by": []any{map[string]any{"field": "nope"}}}, 400)
		e.fail("alice", "/calls/query", map[string]any{"project_id": proj, "sort_by": []any{map[string]any{"field": "id", "direction": "sideways"}}}, 400)
		e.fail("alice", "/calls/query", map[string]any{"project_id": proj, "limit": -1}, 400)
		e.fail("alice", "/calls/query", map[string]any{"project_id": proj, "filter": map[string]any{"call_ids": "x"}}, 400)
		// sorting by derived fields
		list(map[string]any{"sort_by": []any{map[string]any{"field": "summary.platform.status"}, map[string]any{"field": "summary.platform.latency_ms", "direction": "desc"}}})
		// unknown project of own entity: empty
		if c := e.ok("alice", "/calls/query", map[string]any{"project_id": "alice/none"})["calls"].([]any); len(c) != 0 {
			t.Fatal("unknown project lists calls")
		}

		// stream_query: JSON lines, same rows, all keys present
		req, _ := http.NewRequest("POST", e.srv.URL+"/calls/stream_query", strings.NewReader(`{"project_id": "alice/p1", "include_storage_size": true, "include_total_storage_size": true, "include_costs": true}`))
		req.Header.Set("X-Test-User", "alice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); ct != "application/jsonl" {
			t.Fatalf("stream content type %q", ct)
		}
		sc := bufio.NewScanner(resp.Body)
		var got []string
		for sc.Scan() {
			var c map[string]any
			if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
				t.Fatalf("bad line %q", sc.Text())
			}
			if len(c) != len(callKeys) || c["storage_size_bytes"] == nil {
				t.Fatalf("line lacks keys or sizes: %v", c)
			}
			got = append(got, c["id"].(string))
		}
		eq(got, ids)
		st, body := e.post("alice", "/calls/stream_query", map[string]any{"project_id": "alice/none"})
		if st != 200 || len(body) != 0 {
			t.Fatalf("empty stream: %d %q", st, body)
		}
	})
}

func TestCostEndpoints(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		m := e.ok("alice", "/cost/create", `{"project_id": "alice/p1", "costs": {
			"m-b": {"prompt_token_cost": 1e-06, "completion_token_cost": 2e-06},
			"m-a": {"prompt_token_cost": 3e-06, "completion_token_cost": 4e-06, "provider_id": "openai", "prompt_token_cost_unit": "EUR", "effective_date": "2024-01-01T00:00:00Z"}}}`)
		ids := m["ids"].([]any)
		if len(ids) != 2 || ids[0].([]any)[1] != "m-b" || ids[1].([]any)[1] != "m-a" {
			t.Fatalf("ids in order received: %v", ids)
		}
		idB, idA := ids[0].([]any)[0].(string), ids[1].([]any)[0].(string)
		res := e.ok("alice", "/cost/query", map[string]any{"project_id": proj})["results"].([]any)
		if len(res) != 2 || res[0].(map[string]any)["llm_id"] != "m-a" {
			t.Fatalf("cost/query: %v", res)
		}
		a := res[0].(map[string]any)
		if a["provider_id"] != "openai" || a["prompt_token_cost_unit"] != "EUR" || a["completion_token_cost_unit"] != "USD" ||
			a["effective_date"] != "2024-01-01T00:00:00.000000Z" || a["pricing_level"] != "project" || a["id"] != idA {
			t.Fatalf("price record: %v", a)
		}
		res = e.ok("alice", "/cost/query", map[string]any{"project_id": proj, "fields": []string{"id", "llm_id"},
			"query": map[string]any{"$expr": map[string]any{"$eq": []any{map[string]any{"$getField": "llm_id"}, map[string]any{"$literal": "m-b"}}}}})["results"].([]any)
		if len(res) != 1 || len(res[0].(map[string]any)) != 2 || res[0].(map[string]any)["id"] != idB {
			t.Fatalf("filtered cost/query: %v", res)
		}
		e.fail("alice", "/cost/create", map[string]any{"project_id": proj, "costs": map[string]any{"x": map[string]any{"prompt_token_cost": 1}}}, 400)
		e.fail("alice", "/cost/create", map[string]any{"project_id": proj, "costs": map[string]any{"x": map[string]any{"prompt_token_cost": "1", "completion_token_cost": 1}}}, 400)
		e.fail("alice", "/cost/purge", map[string]any{"project_id": proj, "query": map[string]any{"$expr": map[string]any{"$eq": []any{map[string]any{"$getField": "llm_id"}, map[string]any{"$literal": "m-b"}}}}}, 400)
		e.ok("alice", "/cost/purge", map[string]any{"project_id": proj, "query": map[string]any{"$expr": map[string]any{"$or": []any{
			map[string]any{"$eq": []any{map[string]any{"$getField": "id"}, map[string]any{"$literal": idB}}},
			map[string]any{"$in": []any{map[string]any{"$getField": "id"}, []any{map[string]any{"$literal": "nope"}}}},
		}}}})
		res = e.ok("alice", "/cost/query", map[string]any{"project_id": proj})["results"].([]any)
		if len(res) != 1 || res[0].(map[string]any)["id"] != idA {
			t.Fatalf("after purge: %v", res)
		}
	})
}

func TestRecordCall(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{DefaultServicePrice: &TokenPrice{Prompt: 1e-06, Completion: 2e-06}})
		p := testUsers["alice"]
		start := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
		id, err := e.svc.RecordCall(t.Context(), p, "alice/served", "chat.completions", start, start.Add(1500*time.Millisecond),
			json.RawMessage(`{"model":"alice/served/m:step1","messages":[{"role":"user","content":"héllo"}]}`),
			json.RawMessage(`{"choices":[]}`),
			json.RawMessage(`{"usage":{"alice/served/m:step1":{"requests":1,"prompt_tokens":10,"completion_tokens":20,"total_tokens":30}}}`), "")
		if err != nil {
			t.Fatal(err)
		}
		c := e.read("alice", "alice/served", id, allFlags)
		if c == nil || c["trace_id"] != id || c["platform_user_id"] != "user-alice" || c["op_name"] != "chat.completions" {
			t.Fatalf("recorded call: %v", c)
		}
		pl := platform(c)
		if pl["status"] != "success" || pl["latency_ms"] != 1500.0 || pl["costs"] == nil {
			t.Fatalf("platform: %v", pl)
		}
		id2, err := e.svc.RecordCall(t.Context(), p, "alice/served", "chat.completions", start, start, json.RawMessage("null"), nil, nil, "engine failed")
		if err != nil {
			t.Fatal(err)
		}
		if c := e.read("alice", "alice/served", id2, nil); platform(c)["status"] != "error" || c["exception"] != "engine failed" {
			t.Fatalf("errored record: %v", c)
		}
		if _, err := e.svc.RecordCall(t.Context(), p, "bob/x", "op", start, start, nil, nil, nil, ""); err == nil {
			t.Fatal("RecordCall into another entity succeeded")
		}
	})
}

func TestConcurrentWriters(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		// on a database opened as internal/store opens it (BEGIN IMMEDIATE, 8 conns)
		e := newEnvDB(t, dt.openService(t), Options{})
		var wg sync.WaitGroup
		const workers, per = 4, 10
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < per; i++ {
					id := NewUUIDv7()
					st, out := e.post("alice", "/call/upsert_batch", map[string]any{"batch": []any{
						map[string]any{"mode": "start", "req": startReqMap(map[string]any{"id": id})},
						map[string]any{"mode": "end", "req": map[string]any{"project_id": proj, "id": id, "ended_at": "2025-01-02T03:04:06Z", "summary": map[string]any{}}},
					}})
					if st != 200 {
						t.Errorf("batch: %d %s", st, out)
					}
					e.post("alice", "/call/read", map[string]any{"project_id": proj, "id": id, "include_total_storage_size": true})
				}
			}()
		}
		wg.Wait()
		if n := len(e.ok("alice", "/calls/query", map[string]any{"project_id": proj})["calls"].([]any)); n != workers*per {
			t.Fatalf("calls = %d, want %d", n, workers*per)
		}
	})
}
