package trace

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

var feedbackKeys = []string{"id", "project_id", "weave_ref", "wb_user_id", "creator", "created_at", "feedback_type",
	"payload", "annotation_ref", "runnable_ref", "call_ref", "trigger_ref"}

func TestFeedback(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		now := time.Date(2026, 11, 27, 1, 2, 3, 456789000, time.UTC)
		e := newEnvDB(t, dt.open(t), Options{Now: func() time.Time { return now }})
		callRef := "weave:///" + proj + "/call/0190f0a1-0000-7000-8000-000000000001"
		m := e.ok("alice", "/feedback/create", map[string]any{"project_id": proj, "weave_ref": callRef,
			"feedback_type": "wandb.reaction.1", "payload": map[string]any{"emoji": "👍"}, "wb_user_id": "forged"})
		id, _ := m["id"].(string)
		if !validID(id) || m["created_at"] != "2026-11-27T01:02:03.456789Z" || m["wb_user_id"] != "user-alice" ||
			m["payload"].(map[string]any)["emoji"] != "👍" || len(m) != 4 {
			t.Fatalf("create: %v", m)
		}
		clientID := "0190f0a1-0000-7000-8000-0000000000ff"
		b := e.ok("alice", "/feedback/batch/create", map[string]any{"batch": []any{
			map[string]any{"project_id": proj, "weave_ref": callRef, "feedback_type": "wandb.note.1", "payload": map[string]any{"note": "good"}, "id": clientID},
			map[string]any{"project_id": proj, "weave_ref": callRef, "feedback_type": "accuracy", "payload": map[string]any{"output": 0.75}, "creator": "eval"},
		}})
		res := b["res"].([]any)
		if len(res) != 2 || res[0].(map[string]any)["id"] != clientID {
			t.Fatalf("batch: %v", b)
		}
		e.fail("alice", "/feedback/create", map[string]any{"project_id": proj, "weave_ref": callRef, "id": clientID,
			"feedback_type": "x", "payload": map[string]any{}}, 409)

		q := e.ok("alice", "/feedback/query", map[string]any{"project_id": proj,
			"query": map[string]any{"$expr": map[string]any{"$eq": []any{map[string]any{"$getField": "weave_ref"}, map[string]any{"$literal": callRef}}}}})
		result := q["result"].([]any)
		if len(result) != 3 || q["total_count"] != 3.0 {
			t.Fatalf("query: %v", q)
		}
		var first map[string]any // the reaction
		for _, r := range result {
			if r.(map[string]any)["id"] == id {
				first = r.(map[string]any)
			}
		}
		if len(first) != len(feedbackKeys) || first["project_id"] != proj || first["creator"] != nil || first["feedback_type"] != "wandb.reaction.1" {
			t.Fatalf("first: %v", first)
		}
		for _, k := range feedbackKeys {
			if _, ok := first[k]; !ok {
				t.Fatalf("key %s missing: %v", k, first)
			}
		}
		q = e.ok("alice", "/feedback/query", map[string]any{"project_id": proj, "fields": []string{"feedback_type", "payload"},
			"sort_by": []any{map[string]any{"field": "feedback_type", "direction": "asc"}}, "limit": 1, "offset": 1})
		if r := q["result"].([]any); len(r) != 1 || q["total_count"] != 3.0 || len(r[0].(map[string]any)) != 2 ||
			r[0].(map[string]any)["feedback_type"] != "wandb.note.1" {
			t.Fatalf("fields/sort/page: %v", q)
		}
		if q := e.ok("alice", "/feedback/query", map[string]any{"project_id": proj, "fields": []string{}, "limit": 1}); len(q["result"].([]any)[0].(map[string]any)) != len(feedbackKeys) {
			t.Fatalf("empty fields: %v", q)
		}
		// bad input names the field
		for _, c := range []struct {
			body map[string]any
			want string
		}{
			{map[string]any{"project_id": proj, "weave_ref": "weave:///bob/p/call/x", "feedback_type": "x", "payload": map[string]any{}}, "weave_ref"},
			{map[string]any{"project_id": proj, "weave_ref": callRef, "feedback_type": "wandb.reaction.1", "payload": map[string]any{"emoji": 1}}, "payload"},
			{map[string]any{"project_id": proj, "weave_ref": callRef, "feedback_type": "wandb.note.1", "payload": map[string]any{"note": strings.Repeat("x", 1025)}}, "payload.note"},
			{map[string]any{"project_id": proj, "weave_ref": callRef, "feedback_type": "x", "payload": []int{1}}, "payload"},
			{map[string]any{"project_id": proj, "weave_ref": callRef, "payload": map[string]any{}}, "feedback_type"},
			{map[string]any{"project_id": proj, "weave_ref": callRef, "feedback_type": "x", "payload": map[string]any{}, "id": "nope"}, "id"},
		} {
			if r := e.fail("alice", "/feedback/create", c.body, 400); !strings.Contains(r, c.want) {
				t.Errorf("reason %q does not name %s", r, c.want)
			}
		}
		if r := e.fail("alice", "/feedback/query", map[string]any{"project_id": proj, "query": map[string]any{"$expr": map[string]any{"$eq": []any{map[string]any{"$getField": "nope"}, map[string]any{"$literal": "x"}}}}}, 400); !strings.Contains(r, "query.$expr") {
			t.Errorf("reason %q", r)
		}
		// tenancy
		e.fail("bob", "/feedback/query", map[string]any{"project_id": proj}, 403)
		e.fail("bob", "/feedback/create", map[string]any{"project_id": proj, "weave_ref": callRef, "feedback_type": "x", "payload": map[string]any{}}, 403)
		e.fail("bob", "/feedback/purge", map[string]any{"project_id": proj, "query": map[string]any{"$expr": map[string]any{"$eq": []any{map[string]any{"$getField": "id"}, map[string]any{"$literal": id}}}}}, 403)

		// purge by id
		if m := e.ok("alice", "/feedback/purge", map[string]any{"project_id": proj, "query": map[string]any{"$expr": map[string]any{"$eq": []any{map[string]any{"$getField": "id"}, map[string]any{"$literal": id}}}}}); len(m) != 0 {
			t.Fatalf("purge: %v", m)
		}
		e.fail("alice", "/feedback/purge", map[string]any{"project_id": proj, "query": map[string]any{"$expr": map[string]any{"$eq": []any{map[string]any{"$getField": "feedback_type"}, map[string]any{"$literal": "x"}}}}}, 400)
		if q := e.ok("alice", "/feedback/query", map[string]any{"project_id": proj}); q["total_count"] != 2.0 {
			t.Fatalf("after purge: %v", q)
		}
	})
}

func TestFeedbackBounds(t *testing.T) {
	e := newEnvDB(t, openTestDB(t), Options{MaxFeedbackBytes: 30})
	ref := "weave:///" + proj + "/call/x"
	if r := e.fail("alice", "/feedback/create", map[string]any{"project_id": proj, "weave_ref": ref, "feedback_type": "x",
		"payload": map[string]any{"v": strings.Repeat("x", 40)}}, 413); !strings.Contains(r, "payload") {
		t.Fatalf("reason %q", r)
	}
	batch := make([]any, 1001)
	for i := range batch {
		batch[i] = map[string]any{"project_id": proj, "weave_ref": ref, "feedback_type": "x", "payload": map[string]any{}}
	}
	if r := e.fail("alice", "/feedback/batch/create", map[string]any{"batch": batch}, 413); !strings.Contains(r, "batch") {
		t.Fatalf("reason %q", r)
	}
}

func TestRefsReadBatch(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		st, out := tableCreate(e, "alice", proj, tableRowsJSON)
		if st != 200 {
			t.Fatal(string(out))
		}
		ds := objCreate(e, "alice", proj, "ds", `{"_type": "Dataset", "name": "ds", "rows": "weave:///`+proj+`/table/`+tableDigest3+`", "tags": ["a", "b/c"], "meta": {"k v": 1}}`)
		ev := objCreate(e, "alice", proj, "ev", `{"_type": "Evaluation", "dataset": "weave:///`+proj+`/object/ds:`+ds+`"}`)
		base := "weave:///" + proj + "/object/ds:" + ds
		refs := []string{
			base,
			base + "/attr/tags/index/1",
			base + "/attr/meta/key/k%20v",
			base + "/attr/rows/id/" + rowDigest1,
			base + "/attr/rows/id/" + rowDigest1 + "/key/z/key/b",
			"weave:///" + proj + "/object/ev:" + ev + "/attr/dataset/attr/name",
			"weave:///" + proj + "/object/ds:latest/attr/name",
		}
		_, raw := e.post("alice", "/refs/read_batch", map[string]any{"refs": refs})
		var res struct{ Vals []json.RawMessage }
		if err := json.Unmarshal(raw, &res); err != nil || len(res.Vals) != len(refs) {
			t.Fatalf("read_batch: %s", raw)
		}
		want := []string{"", `"b/c"`, `1`, `{"q": "\u00e9?", "a": [1, 2.5, null], "z": {"b": true, "a": 1e-07}}`, `true`, `"ds"`, `"ds"`}
		for i, w := range want[1:] {
			if string(res.Vals[i+1]) != w {
				t.Errorf("%s = %s, want %s", refs[i+1], res.Vals[i+1], w)
			}
		}
		for _, c := range []struct {
			ref    string
			status int
		}{
			{base + "/attr/nope", 404},
			{base + "/attr/rows/id/nope", 404},
			{"weave:///" + proj + "/object/ds:nope", 404},
			{"weave:///" + proj + "/call/x", 400},
			{"weave:///bob/p/object/ds:" + ds, 403},
			{"nope", 400},
			{base + "/attr", 400},
		} {
			if r := e.fail("alice", "/refs/read_batch", map[string]any{"refs": []string{c.ref}}, c.status); !strings.Contains(r, "refs[0]") && c.status != 403 {
				t.Errorf("%s: reason %q does not name refs[0]", c.ref, r)
			}
		}
		e.fail("alice", "/refs/read_batch", map[string]any{"refs": make([]string, 1001)}, 413)

		// deleting the object: its refs, reads and queries no longer see it
		e.fail("bob", "/obj/delete", map[string]any{"project_id": proj, "object_id": "ds"}, 403)
		if m := e.ok("alice", "/obj/delete", map[string]any{"project_id": proj, "object_id": "ds", "digests": []string{ds}}); m["num_deleted"] != 1.0 {
			t.Fatalf("delete: %v", m)
		}
		e.fail("alice", "/obj/delete", map[string]any{"project_id": proj, "object_id": "ds"}, 404)
		e.fail("alice", "/refs/read_batch", map[string]any{"refs": []string{base}}, 404)
		e.fail("alice", "/obj/read", map[string]any{"project_id": proj, "object_id": "ds", "digest": ds}, 404)
		e.fail("alice", "/obj/read", map[string]any{"project_id": proj, "object_id": "ds", "digest": "latest"}, 404)
		if q := e.ok("alice", "/objs/query", map[string]any{"project_id": proj}); len(q["objs"].([]any)) != 1 {
			t.Fatalf("objs after delete: %v", q)
		}
		// creating the value again brings it back, with its digest
		if d := objCreate(e, "alice", proj, "ds", `{"_type": "Dataset", "name": "ds", "rows": "weave:///`+proj+`/table/`+tableDigest3+`", "tags": ["a", "b/c"], "meta": {"k v": 1}}`); d != ds {
			t.Fatalf("recreated digest %s", d)
		}
		objRead(e, proj, "ds", "latest")
		e.fail("alice", "/obj/delete", map[string]any{"project_id": proj, "object_id": "ds", "digests": make([]string, 101)}, 413)
	})
}

func TestCallsQueryStats(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		root, trace := e.start("alice", map[string]any{"project_id": proj, "op_name": "root", "started_at": "2026-01-01T00:00:00Z", "attributes": map[string]any{}, "inputs": map[string]any{"a": 5, "b": 10}})
		child, _ := e.start("alice", map[string]any{"project_id": proj, "op_name": "child", "trace_id": trace, "parent_id": root, "started_at": "2026-01-01T00:00:01Z", "attributes": map[string]any{}, "inputs": map[string]any{}})
		other, _ := e.start("alice", map[string]any{"project_id": proj, "op_name": "other", "started_at": "2026-01-01T00:00:02Z", "attributes": map[string]any{}, "inputs": map[string]any{}})
		_ = child
		m := e.ok("alice", "/calls/query_stats", map[string]any{"project_id": proj})
		if m["count"] != 3.0 || m["total_storage_size_bytes"] != nil {
			t.Fatalf("stats: %v", m)
		}
		m = e.ok("alice", "/calls/query_stats", map[string]any{"project_id": proj, "filter": map[string]any{"trace_roots_only": true}, "include_total_storage_size": true})
		// root: {"a": 5, "b": 10} + {} = 19 bytes, child 4, other 4; roots' totals: 23 + 4
		if m["count"] != 2.0 || m["total_storage_size_bytes"] != 27.0 {
			t.Fatalf("roots: %v", m)
		}
		if m := e.ok("alice", "/calls/query_stats", map[string]any{"project_id": proj, "limit": 1}); m["count"] != 1.0 {
			t.Fatalf("limit: %v", m)
		}
		// soft-deleted calls are not counted
		e.ok("alice", "/calls/delete", map[string]any{"project_id": proj, "call_ids": []string{root}})
		if m := e.ok("alice", "/calls/query_stats", map[string]any{"project_id": proj}); m["count"] != 1.0 {
			t.Fatalf("after delete: %v", m)
		}
		_ = other
		e.fail("bob", "/calls/query_stats", map[string]any{"project_id": proj}, 403)
		// Weave's query expressions are not served: a 400, not an answer ignoring them
		q := map[string]any{"$expr": map[string]any{"$eq": []any{map[string]any{"$getField": "op_name"}, map[string]any{"$literal": "x"}}}}
		for _, route := range []string{"/calls/query_stats", "/calls/query", "/calls/stream_query"} {
			if r := e.fail("alice", route, map[string]any{"project_id": proj, "query": q}, 400); !strings.Contains(r, "query") {
				t.Errorf("%s: reason %q", route, r)
			}
		}
		e.ok("alice", "/calls/query_stats", map[string]any{"project_id": proj, "query": nil})
		if m := e.ok("alice", "/calls/query_stats", map[string]any{"project_id": "team/none"}); m["count"] != 0.0 {
			t.Fatalf("unknown project: %v", m)
		}
	})
}
