package trace

import (
	"bytes"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"flywheel/internal/pgtest"
	"flywheel/internal/sqlmigrate"
)

// agreementCalls are calls chosen to tell the dialects apart where they
// could differ: NULL order, byte order of text (case, '_', non-ASCII),
// prefix matching with LIKE/GLOB metacharacters and case, the derived status.
func agreementCalls() []any {
	type c struct {
		op, display, thread any
		exc                 any
		errCount            any // summary.status_counts.error; nil: no end
		startMs, endMs      int
		parent              int // index of the parent call, -1 for a root
	}
	calls := []c{
		{"weave:///alice/p1/op/gen:abc", nil, "t1", nil, 0, 0, 1500, -1},
		{"weave:///alice/p1/op/gen:def", "Beta", "t1", nil, 2, 10, 20, 0},
		{"weave:///alice/p1/op/Gen:abc", "alpha", nil, nil, nil, 20, 0, 0},
		{"weave:///alice/p1/op/g_n%:abc", "", "t2", "boom", 0, 30, 30, -1},
		{"weave:///alice/p1/op/g[n]*?:x", "Ölfass", nil, nil, "1", 40, 45, -1},
		{"weave:///alice/p1/op/gxn%:abc", "zeta", "T1", nil, 1.5, 40, 44, 3},
		{"plain_op", "beta", nil, "", 0, 50, 49, -1},
		{"plain_op", nil, "t2", nil, nil, 60, 0, -1},
	}
	ids := make([]string, len(calls))
	for i := range ids {
		ids[i] = fmt.Sprintf("0190aaaa-0000-7000-8000-%012d", 7-i) // ids sort against insertion order
	}
	base := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	var batch []any
	for i, cl := range calls {
		trace := ids[i]
		start := map[string]any{"project_id": proj, "id": ids[i], "op_name": cl.op, "display_name": cl.display,
			"thread_id": cl.thread, "started_at": base.Add(time.Duration(cl.startMs) * time.Millisecond).Format(time.RFC3339Nano),
			"attributes": map[string]any{}, "inputs": map[string]any{"i": i}}
		if cl.parent >= 0 {
			start["parent_id"] = ids[cl.parent]
			trace = ids[cl.parent]
		}
		start["trace_id"] = trace
		batch = append(batch, map[string]any{"mode": "start", "req": start})
		if cl.errCount != nil {
			batch = append(batch, map[string]any{"mode": "end", "req": map[string]any{"project_id": proj, "id": ids[i],
				"ended_at":  base.Add(time.Duration(cl.endMs) * time.Millisecond).Format(time.RFC3339Nano),
				"exception": cl.exc, "output": i, "summary": map[string]any{"status_counts": map[string]any{"error": cl.errCount}}}})
		}
	}
	return batch
}

// TestDialectsAgree runs the same writes on SQLite and PostgreSQL and
// requires byte-identical answers to queries that sort and filter on every
// sortable field, in both directions, with paging.
func TestDialectsAgree(t *testing.T) {
	now := func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }
	envs := map[string]*env{}
	for _, dt := range testDialects {
		envs[dt.name] = newEnvDB(t, dt.open(t), Options{Now: now})
	}
	batch := agreementCalls()
	for _, e := range envs {
		e.ok("alice", "/call/upsert_batch", map[string]any{"batch": batch})
		e.ok("alice", "/calls/delete", map[string]any{"project_id": proj, "call_ids": []string{"0190aaaa-0000-7000-8000-000000000000"}})
		for i, v := range []any{map[string]any{"b": 1}, map[string]any{"a": 2}, map[string]any{"_class_name": "Zed", "_bases": []string{"Object", "BaseModel"}}} {
			e.ok("alice", "/obj/create", map[string]any{"obj": map[string]any{"project_id": proj, "object_id": []string{"b_obj", "B-obj", "a.obj"}[i], "val": v}})
		}
		e.ok("alice", "/cost/create", map[string]any{"project_id": proj, "costs": map[string]any{
			"m-b": map[string]any{"prompt_token_cost": 1, "completion_token_cost": 2},
			"M-a": map[string]any{"prompt_token_cost": 3, "completion_token_cost": 0.5, "provider_id": "z"}}})
	}
	var queries []struct {
		path string
		body map[string]any
	}
	add := func(path string, body map[string]any) {
		body["project_id"] = proj
		queries = append(queries, struct {
			path string
			body map[string]any
		}{path, body})
	}
	var fields []string
	for f := range sortColumns {
		fields = append(fields, f)
	}
	fields = append(fields, "status", "latency_ms", "trace_name")
	for _, f := range fields {
		for _, dir := range []string{"asc", "desc"} {
			add("/calls/stream_query", map[string]any{"sort_by": []any{map[string]any{"field": f, "direction": dir}}, "include_storage_size": true})
		}
	}
	for _, filter := range []map[string]any{
		{"op_names": []string{"weave:///alice/p1/op/gen:*"}},
		{"op_names": []string{"weave:///alice/p1/op/g_n%:*", "plain_op"}},
		{"op_names": []string{"weave:///alice/p1/op/g[n]*?:*"}},
		{"op_names": []string{}},
		{"trace_roots_only": true},
		{"thread_ids": []string{"t1", "T1"}},
		{"parent_ids": []string{"0190aaaa-0000-7000-8000-000000000007"}},
		{"call_ids": []string{"0190aaaa-0000-7000-8000-000000000003", "0190aaaa-0000-7000-8000-000000000001", "nope"}},
		{"trace_ids": []string{"0190aaaa-0000-7000-8000-000000000004"}},
	} {
		add("/calls/query", map[string]any{"filter": filter, "include_total_storage_size": true})
	}
	for off := 0; off < 8; off += 3 {
		add("/calls/stream_query", map[string]any{"limit": 3, "offset": off, "sort_by": []any{map[string]any{"field": "display_name", "direction": "desc"}}})
	}
	for _, f := range []string{"object_id", "created_at"} {
		for _, dir := range []string{"asc", "desc"} {
			add("/objs/query", map[string]any{"sort_by": []any{map[string]any{"field": f, "direction": dir}}})
		}
	}
	add("/objs/query", map[string]any{"filter": map[string]any{"exclude_base_object_classes": []string{"Zed"}}})
	add("/cost/query", map[string]any{"fields": []string{"llm_id", "provider_id", "prompt_token_cost"}, "sort_by": []any{map[string]any{"field": "llm_id"}}})
	add("/cost/query", map[string]any{"fields": []string{"llm_id"}, "query": map[string]any{"$expr": map[string]any{"$gt": []any{
		map[string]any{"$getField": "prompt_token_cost"}, map[string]any{"$literal": 2}}}}})
	add("/cost/query", map[string]any{"fields": []string{"llm_id"}, "query": map[string]any{"$expr": map[string]any{"$lt": []any{
		map[string]any{"$getField": "llm_id"}, map[string]any{"$literal": "a"}}}}})
	for _, q := range queries {
		_, lite := envs[DialectSQLite].post("alice", q.path, q.body)
		_, pg := envs[DialectPostgres].post("alice", q.path, q.body)
		if !bytes.Equal(lite, pg) {
			t.Errorf("%s %v:\nsqlite:   %s\npostgres: %s", q.path, q.body, lite, pg)
		}
	}
	// and the agreed answers are the intended ones
	order := func(body map[string]any, key string) string {
		body["project_id"] = proj
		var out []string
		for _, c := range envs[DialectSQLite].ok("alice", "/calls/query", body)["calls"].([]any) {
			v := c.(map[string]any)[key]
			if key == "status" {
				v = c.(map[string]any)["summary"].(map[string]any)["platform"].(map[string]any)["status"]
			}
			out = append(out, fmt.Sprint(v))
		}
		return strings.Join(out, ",")
	}
	for _, c := range []struct {
		body      map[string]any
		key, want string
	}{
		{map[string]any{"sort_by": []any{map[string]any{"field": "display_name"}}}, "display_name", "<nil>,,Beta,alpha,beta,zeta,Ölfass"},
		{map[string]any{"sort_by": []any{map[string]any{"field": "display_name", "direction": "desc"}}}, "display_name", "Ölfass,zeta,beta,alpha,Beta,,<nil>"},
		{map[string]any{"sort_by": []any{map[string]any{"field": "status"}}}, "status", "descendant_error,descendant_error,error,running,success,success,success"}, // "1" (a string) is not an error count
		{map[string]any{"filter": map[string]any{"op_names": []string{"weave:///alice/p1/op/gen:*"}}}, "op_name", "weave:///alice/p1/op/gen:abc,weave:///alice/p1/op/gen:def"},
		{map[string]any{"filter": map[string]any{"op_names": []string{"weave:///alice/p1/op/g_n%:*"}}}, "op_name", "weave:///alice/p1/op/g_n%:abc"},
		{map[string]any{"filter": map[string]any{"op_names": []string{"weave:///alice/p1/op/g[n]*?:*"}}}, "op_name", "weave:///alice/p1/op/g[n]*?:x"},
	} {
		if got := order(c.body, c.key); got != c.want {
			t.Errorf("%v: %s = %s, want %s", c.body, c.key, got, c.want)
		}
	}
}

// TestMigrateConcurrently starts several services on one fresh PostgreSQL
// database at once, as nodes starting together do: each migration is
// applied once, and every service works.
func TestMigrateConcurrently(t *testing.T) {
	dsn := pgtest.DSN(t)
	const nodes = 4
	var wg sync.WaitGroup
	errs := make(chan error, nodes)
	for i := 0; i < nodes; i++ {
		db := openPostgresDSN(t, dsn) // a pool per node
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := New(db, Options{Dialect: DialectPostgres})
			errs <- err
		}()
	}
	db := openPostgresDSN(t, dsn)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var n, distinct int
	if err := db.QueryRow(`SELECT COUNT(*), COUNT(DISTINCT version) FROM trace_schema_migrations`).Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	files, _ := migrationFS.ReadDir("migrations/postgres")
	if n != len(files) || distinct != n {
		t.Fatalf("%d migration rows (%d distinct), want %d", n, distinct, len(files))
	}
}

// TestObjectVersionsAcrossNodes adds versions of one object from two
// services (two nodes) on one PostgreSQL database at once: every value gets
// its own version, numbered 0..n-1, none lost to a conflict.
func TestObjectVersionsAcrossNodes(t *testing.T) {
	dsn := pgtest.DSN(t)
	db := openPostgresDSN(t, dsn)
	a := newEnvDB(t, db, Options{})
	b := newEnvDB(t, openPostgresDSN(t, dsn), Options{})
	const per = 10
	var wg sync.WaitGroup
	for n, e := range []*env{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				st, out := e.post("alice", "/obj/create", map[string]any{"obj": map[string]any{"project_id": proj, "object_id": "shared", "val": map[string]any{"node": n, "i": i}}})
				if st != 200 {
					t.Errorf("obj/create: %d %s", st, out)
				}
			}
		}()
	}
	wg.Wait()
	var n, maxV int
	if err := db.QueryRow(`SELECT COUNT(*), MAX(version_index) FROM trace_objects WHERE object_id = 'shared'`).Scan(&n, &maxV); err != nil {
		t.Fatal(err)
	}
	if n != 2*per || maxV != 2*per-1 {
		t.Fatalf("%d versions, highest %d; want %d and %d", n, maxV, 2*per, 2*per-1)
	}
}

// TestDialectOption checks Options.Dialect against the database's driver.
func TestDialectOption(t *testing.T) {
	lite := openTestDB(t)
	for _, c := range []struct {
		db      *sql.DB
		dialect string
		ok      bool
	}{{lite, "", true}, {lite, DialectSQLite, true}, {lite, DialectPostgres, false}, {lite, "mysql", false}} {
		if _, err := New(c.db, Options{Dialect: c.dialect}); (err == nil) != c.ok {
			t.Errorf("New(sqlite, Dialect %q): err = %v", c.dialect, err)
		}
	}
	pg := openPostgres(t)
	if _, err := New(pg, Options{Dialect: DialectSQLite}); err == nil {
		t.Error("New(postgres, Dialect sqlite) succeeded")
	}
}

// TestTextColumns refuses strings no text column can hold on both
// databases (NUL, lone surrogates) with a 400 naming the field.
func TestTextColumns(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		for _, c := range []struct{ body, param string }{
			{`{"start": {"project_id": "alice/p1", "op_name": "a\u0000b", "started_at": "2025-01-01T00:00:00Z", "attributes": {}, "inputs": {}}}`, "start.op_name"},
			{`{"start": {"project_id": "alice/p1", "op_name": "op", "display_name": "\ud800", "started_at": "2025-01-01T00:00:00Z", "attributes": {}, "inputs": {}}}`, "start.display_name"},
		} {
			if reason := e.fail("alice", "/call/start", c.body, 400); !strings.Contains(reason, c.param) {
				t.Errorf("reason %q does not name %s", reason, c.param)
			}
		}
		if reason := e.fail("alice", "/cost/create", `{"project_id": "alice/p1", "costs": {"m": {"prompt_token_cost": 1, "completion_token_cost": 1, "provider_id": "a\u0000"}}}`, 400); !strings.Contains(reason, "costs.m.provider_id") {
			t.Errorf("reason %q", reason)
		}
		// a lone surrogate inside a JSON value is fine: it is stored escaped
		m := e.ok("alice", "/call/start", `{"start": {"project_id": "alice/p1", "op_name": "op", "started_at": "2025-01-01T00:00:00Z", "attributes": {}, "inputs": {"s": "\ud800"}}}`)
		_, out := e.post("alice", "/call/read", map[string]any{"project_id": proj, "id": m["id"]})
		if !bytes.Contains(out, []byte(`"inputs": {"s": "\ud800"}`)) {
			t.Fatalf("lone surrogate in inputs: %s", out)
		}
	})
}

// TestCostQueryTypes refuses comparisons the databases would answer
// differently (a field with a literal of another type, two literals).
func TestCostQueryTypes(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		q := func(a, b any) map[string]any {
			return map[string]any{"project_id": proj, "query": map[string]any{"$expr": map[string]any{"$eq": []any{a, b}}}}
		}
		field := func(f string) any { return map[string]any{"$getField": f} }
		lit := func(v any) any { return map[string]any{"$literal": v} }
		for _, c := range []struct {
			body  map[string]any
			param string
		}{
			{q(field("llm_id"), lit(5)), "query.$expr.$eq[1]"},
			{q(field("prompt_token_cost"), lit("x")), "query.$expr.$eq[1]"},
			{q(field("effective_date"), lit("soon")), "query.$expr.$eq[1]"},
			{q(lit(1), lit(1)), "query.$expr.$eq"},
			{q(field("llm_id"), field("created_at")), "query.$expr.$eq"},
			{q(field("llm_id"), lit(true)), "query.$expr.$eq[1]"},
		} {
			if reason := e.fail("alice", "/cost/query", c.body, 400); !strings.HasPrefix(reason, c.param+":") {
				t.Errorf("%v: reason %q does not name %s", c.body, reason, c.param)
			}
		}
		e.ok("alice", "/cost/create", map[string]any{"project_id": proj, "costs": map[string]any{"m": map[string]any{"prompt_token_cost": 1, "completion_token_cost": 1, "effective_date": "2024-01-01T00:00:00Z"}}})
		for _, c := range []struct {
			body map[string]any
			n    int
		}{
			{q(field("effective_date"), lit("2024-01-01T00:00:00Z")), 1},
			{q(field("prompt_token_cost"), lit(1)), 1},
			{q(field("created_by"), lit(nil)), 0},
			{map[string]any{"project_id": proj, "query": map[string]any{"$expr": map[string]any{"$in": []any{field("llm_id"), []any{}}}}}, 0},
		} {
			if got := len(e.ok("alice", "/cost/query", c.body)["results"].([]any)); got != c.n {
				t.Errorf("%v: %d results, want %d", c.body, got, c.n)
			}
		}
	})
}

// TestSQLiteUpgradeStatusError upgrades a SQLite store made before
// migration 003: the new status_error column is filled from the stored
// summaries, so a sort by status agrees with the status a read shows.
func TestSQLiteUpgradeStatusError(t *testing.T) {
	db := openTestDB(t)
	if _, err := db.Exec(`CREATE TABLE trace_schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for v, name := range []string{"001_init.sql", "002_objects_files.sql"} {
		body, err := migrationFS.ReadFile("migrations/sqlite/" + name)
		if err != nil {
			t.Fatal(err)
		}
		for _, stmt := range sqlmigrate.Statements(string(body)) {
			if _, err := db.Exec(stmt); err != nil {
				t.Fatal(err)
			}
		}
		db.Exec(`INSERT INTO trace_schema_migrations VALUES (?, ?, '')`, v+1, name)
	}
	db.Exec(`INSERT INTO trace_projects (id, entity, name, created_at) VALUES (1, 'alice', 'p1', 0)`)
	for i, summary := range []string{`{"status_counts": {"error": 2}}`, `{"status_counts": {"error": "2"}}`, `{}`, `{"status_counts": {"error": 0.5}}`} {
		if _, err := db.Exec(`INSERT INTO trace_calls (project, id, op_name, trace_id, started_at, ended_at, attributes, inputs, output, summary)
			VALUES (1, ?, 'op', ?, ?, ?, '{}', '{}', 'null', ?)`, fmt.Sprintf("0190aaaa-0000-7000-8000-00000000000%d", i),
			fmt.Sprintf("0190aaaa-0000-7000-8000-00000000000%d", i), i, i+1, summary); err != nil {
			t.Fatal(err)
		}
	}
	e := newEnvDB(t, db, Options{})
	var got []string
	for _, c := range e.ok("alice", "/calls/query", map[string]any{"project_id": proj, "sort_by": []any{map[string]any{"field": "status"}}})["calls"].([]any) {
		got = append(got, c.(map[string]any)["id"].(string)[33:]+"="+platform(c.(map[string]any))["status"].(string))
	}
	if want := "000=descendant_error,003=descendant_error,001=success,002=success"; strings.Join(got, ",") != want {
		t.Fatalf("after the upgrade: %s, want %s", strings.Join(got, ","), want)
	}
}

// TestBatchRepeats writes one call several times in one batch (PostgreSQL
// writes such a batch in several statements, one per repeat): the last
// write of each kind wins, as in the batch's order.
func TestBatchRepeats(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		a, b, c := NewUUIDv7(), NewUUIDv7(), NewUUIDv7()
		end := func(id string, out any) any {
			return map[string]any{"mode": "end", "req": map[string]any{"project_id": proj, "id": id, "ended_at": "2025-01-02T03:04:07Z", "output": out, "summary": map[string]any{}}}
		}
		start := func(id, display string) any {
			return map[string]any{"mode": "start", "req": startReqMap(map[string]any{"id": id, "display_name": display})}
		}
		e.ok("alice", "/call/upsert_batch", map[string]any{"batch": []any{
			start(a, "a1"), end(a, 1), end(a, 2), // start, then two ends
			start(b, "b1"), start(b, "b2"), // two starts
			end(c, "early"), start(c, "c1"), end(c, "late"), // end before start, then another end
		}})
		for _, w := range []struct {
			id, display string
			output      any
		}{{a, "a1", 2.0}, {b, "b2", nil}, {c, "c1", "late"}} {
			got := e.read("alice", proj, w.id, nil)
			if got == nil || got["display_name"] != w.display || got["output"] != w.output {
				t.Errorf("call %s: %v, want display %s output %v", w.id, got, w.display, w.output)
			}
		}
	})
}

// TestConcurrentBatchesAcrossNodes has two nodes on one PostgreSQL database
// write batches of the same calls at once, in opposite orders (a client
// retrying through another node): every batch succeeds and each call is one
// row with its start and end.
func TestConcurrentBatchesAcrossNodes(t *testing.T) {
	dsn := pgtest.DSN(t)
	nodes := []*env{newEnvDB(t, openPostgresDSN(t, dsn), Options{}), newEnvDB(t, openPostgresDSN(t, dsn), Options{})}
	ids := make([]string, 40)
	for i := range ids {
		ids[i] = NewUUIDv7()
	}
	batch := func(reverse bool) []any {
		var items []any
		for i := range ids {
			id := ids[i]
			if reverse {
				id = ids[len(ids)-1-i]
			}
			items = append(items, map[string]any{"mode": "start", "req": startReqMap(map[string]any{"id": id})},
				map[string]any{"mode": "end", "req": map[string]any{"project_id": proj, "id": id, "ended_at": "2025-01-02T03:04:07Z", "summary": map[string]any{}}})
		}
		return items
	}
	var wg sync.WaitGroup
	for n, e := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				if st, out := e.post("alice", "/call/upsert_batch", map[string]any{"batch": batch(n == 1)}); st != 200 {
					t.Errorf("node %d batch %d: %d %s", n, i, st, out)
				}
			}
		}()
	}
	wg.Wait()
	calls := nodes[0].ok("alice", "/calls/query", map[string]any{"project_id": proj})["calls"].([]any)
	if len(calls) != len(ids) {
		t.Fatalf("%d calls, want %d", len(calls), len(ids))
	}
	for _, c := range calls {
		if c.(map[string]any)["ended_at"] == nil {
			t.Fatalf("call without its end: %v", c)
		}
	}
}
