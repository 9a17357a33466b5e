package trace

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// Row and table digests computed by Weave's own code (weave 0.54.0,
// weave/trace/serialization/digest.py: compute_row_digest and
// compute_table_digest) for these rows.
const (
	tableRowsJSON = `[{"q": "2+2", "a": 4}, {"q": "é?", "a": [1, 2.5, null], "z": {"b": true, "a": 1e-7}}, {"a": 4, "q": "2+2"}]`
	rowDigest0    = "VFqNlLTJiR3tbX0qjLO67Q2feGsqM1vILazadYZcfEI"
	rowDigest1    = "hCVg33KaP1f7S0tzoRo9uMQEZK8lfAQrX6ERueFHu48"
	tableDigest3  = "f979a6d0f4411d66a2b407655e98f9011dd4bc830d697025ea2eba5db379e940"
	tableDigest02 = "5a2a44b4c9cf2825e75fd8308b384cdafe56fcbd35fb937a7887e8acec1810e0" // rows 0 and 2
	emptyTable    = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
)

func tableCreate(e *env, user, project, rows string) (int, []byte) {
	e.t.Helper()
	return e.post(user, "/table/create", `{"table": {"project_id": "`+project+`", "rows": `+rows+`}}`)
}

type tableRowOut struct {
	Digest        string         `json:"digest"`
	Val           map[string]any `json:"val"`
	OriginalIndex int            `json:"original_index"`
}

func tableQuery(e *env, body map[string]any) []tableRowOut {
	e.t.Helper()
	st, out := e.post("alice", "/table/query", body)
	if st != 200 {
		e.t.Fatalf("table/query: %d %s", st, out)
	}
	var res struct {
		Rows []tableRowOut `json:"rows"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		e.t.Fatalf("table/query answered %s: %v", out, err)
	}
	return res.Rows
}

func TestTables(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		st, out := tableCreate(e, "alice", proj, tableRowsJSON)
		want := `{"digest": "` + tableDigest3 + `", "row_digests": ["` + rowDigest0 + `", "` + rowDigest1 + `", "` + rowDigest0 + `"]}` + "\n"
		if st != 200 || string(out) != want {
			t.Fatalf("table/create: %d %s\nwant %s", st, out, want)
		}
		// the same rows again: the same answer, nothing stored twice
		if st, out2 := tableCreate(e, "alice", proj, tableRowsJSON); st != 200 || string(out2) != want {
			t.Fatalf("table/create again: %d %s", st, out2)
		}
		if st, out := tableCreate(e, "alice", proj, `[]`); st != 200 || !strings.Contains(string(out), emptyTable) {
			t.Fatalf("empty table: %d %s", st, out)
		}
		rows := tableQuery(e, map[string]any{"project_id": proj, "digest": tableDigest3})
		if len(rows) != 3 || rows[0].Digest != rowDigest0 || rows[1].Digest != rowDigest1 || rows[2].OriginalIndex != 2 ||
			rows[1].Val["q"] != "é?" || rows[2].Val["a"] != 4.0 {
			t.Fatalf("rows %+v", rows)
		}
		// a row is stored once per digest, as first sent (keys in that order):
		// row 2 ({"a": 4, "q": "2+2"}) is row 0's value
		_, raw := e.post("alice", "/table/query", map[string]any{"project_id": proj, "digest": tableDigest3, "limit": 1, "offset": 2})
		if wantRaw := `{"rows": [{"digest": "` + rowDigest0 + `", "val": {"q": "2+2", "a": 4}, "original_index": 2}]}` + "\n"; string(raw) != wantRaw {
			t.Fatalf("page: %s\nwant %s", raw, wantRaw)
		}
		rows = tableQuery(e, map[string]any{"project_id": proj, "digest": tableDigest3, "filter": map[string]any{"row_digests": []string{rowDigest1}}})
		if len(rows) != 1 || rows[0].OriginalIndex != 1 {
			t.Fatalf("filtered rows %+v", rows)
		}
		if rows := tableQuery(e, map[string]any{"project_id": proj, "digest": "nope"}); len(rows) != 0 {
			t.Fatalf("unknown table: %+v", rows)
		}
		stats := e.ok("alice", "/table/query_stats", map[string]any{"project_id": proj, "digest": tableDigest3})
		if stats["count"] != 3.0 || len(stats) != 1 {
			t.Fatalf("stats %v", stats)
		}
		_, raw = e.post("alice", "/table/query_stats_batch", map[string]any{"project_id": proj, "digests": []string{"nope", tableDigest3, emptyTable}, "include_storage_size": true})
		var batch struct {
			Tables []struct {
				Digest string `json:"digest"`
				Count  int    `json:"count"`
				Size   *int   `json:"storage_size_bytes"`
			} `json:"tables"`
		}
		if err := json.Unmarshal(raw, &batch); err != nil || len(batch.Tables) != 2 || batch.Tables[0].Digest != tableDigest3 ||
			batch.Tables[0].Count != 3 || batch.Tables[1].Count != 0 || batch.Tables[0].Size == nil || *batch.Tables[0].Size <= 0 || *batch.Tables[1].Size != 0 {
			t.Fatalf("stats batch %s", raw)
		}

		// updates: pop row 1 gives rows 0 and 2; then append and insert
		m := e.ok("alice", "/table/update", map[string]any{"project_id": proj, "base_digest": tableDigest3,
			"updates": []any{map[string]any{"pop": map[string]any{"index": 1}}}})
		if m["digest"] != tableDigest02 || len(m["updated_row_digests"].([]any)) != 0 {
			t.Fatalf("pop: %v", m)
		}
		m = e.ok("alice", "/table/update", map[string]any{"project_id": proj, "base_digest": tableDigest02,
			"updates": []any{map[string]any{"insert": map[string]any{"index": 1, "row": map[string]any{"q": "é?", "a": []any{1, 2.5, nil}, "z": map[string]any{"b": true, "a": 1e-7}}}}}})
		if m["digest"] != tableDigest3 || !reflect.DeepEqual(m["updated_row_digests"], []any{rowDigest1}) {
			t.Fatalf("insert: %v", m)
		}
		m = e.ok("alice", "/table/update", map[string]any{"project_id": proj, "base_digest": emptyTable,
			"updates": []any{map[string]any{"append": map[string]any{"row": map[string]any{"q": "2+2", "a": 4}}}}})
		if m["digest"] != tableDigest(append([]string(nil), rowDigest0)) {
			t.Fatalf("append: %v", m)
		}
		e.fail("alice", "/table/update", map[string]any{"project_id": proj, "base_digest": tableDigest3,
			"updates": []any{map[string]any{"pop": map[string]any{"index": 3}}}}, 400)
		e.fail("alice", "/table/update", map[string]any{"project_id": proj, "base_digest": "nope",
			"updates": []any{map[string]any{"pop": map[string]any{"index": 0}}}}, 404)
		if r := e.fail("alice", "/table/update", map[string]any{"project_id": proj, "base_digest": tableDigest3,
			"updates": []any{map[string]any{}}}, 400); !strings.Contains(r, "updates[0]") {
			t.Fatalf("reason %q", r)
		}

		// from digests: rows already stored; an unknown one is a 400 naming it
		m = e.ok("alice", "/table/create_from_digests", map[string]any{"project_id": proj, "row_digests": []string{rowDigest0, rowDigest0}})
		if m["digest"] != tableDigest([]string{rowDigest0, rowDigest0}) {
			t.Fatalf("from digests: %v", m)
		}
		if r := e.fail("alice", "/table/create_from_digests", map[string]any{"project_id": proj, "row_digests": []string{rowDigest0, "nope"}}, 400); !strings.Contains(r, "row_digests[1]") {
			t.Fatalf("reason %q", r)
		}
		if r := e.fail("alice", "/table/create", `{"table": {"project_id": "`+proj+`", "rows": [{"a": 1}], "expected_digest": "x"}}`, 400); !strings.Contains(r, "expected_digest") {
			t.Fatalf("reason %q", r)
		}
		if r := e.fail("alice", "/table/create", `{"table": {"project_id": "`+proj+`", "rows": [{"a": 1}, 5]}}`, 400); !strings.Contains(r, "table.rows[1]") {
			t.Fatalf("reason %q", r)
		}
		e.fail("alice", "/table/query", map[string]any{"project_id": proj, "digest": tableDigest3, "sort_by": []any{map[string]any{"field": "a..b", "direction": "asc"}}}, 400)
		e.fail("alice", "/table/query", map[string]any{"project_id": proj, "digest": tableDigest3, "sort_by": []any{map[string]any{"field": "a", "direction": "up"}}}, 400)

		// tenancy: another entity's project is 403, nothing leaks to a stranger
		e.fail("bob", "/table/create", `{"table": {"project_id": "`+proj+`", "rows": []}}`, 403)
		e.fail("bob", "/table/query", map[string]any{"project_id": proj, "digest": tableDigest3}, 403)
		e.fail("bob", "/table/query_stats", map[string]any{"project_id": proj, "digest": tableDigest3}, 403)
		if rows := tableQuery(e, map[string]any{"project_id": "team/other", "digest": tableDigest3}); len(rows) != 0 {
			t.Fatalf("table of another project: %+v", rows)
		}
		e.fail("", "/table/query", map[string]any{"project_id": proj, "digest": tableDigest3}, 401)
	})
}

func TestTableBounds(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{MaxTableRows: 3, MaxRowBytes: 20})
		if r := e.fail("alice", "/table/create", `{"table": {"project_id": "`+proj+`", "rows": [{}, {}, {}, {}]}}`, 413); !strings.Contains(r, "table.rows") {
			t.Fatalf("reason %q", r)
		}
		if r := e.fail("alice", "/table/create", `{"table": {"project_id": "`+proj+`", "rows": [{}, {"a": "0123456789012345"}]}}`, 413); !strings.Contains(r, "table.rows[1]") {
			t.Fatalf("reason %q", r)
		}
		m := e.ok("alice", "/table/create", map[string]any{"table": map[string]any{"project_id": proj, "rows": []any{map[string]any{}, map[string]any{"a": 1}, map[string]any{"a": 2}}}})
		if r := e.fail("alice", "/table/update", map[string]any{"project_id": proj, "base_digest": m["digest"],
			"updates": []any{map[string]any{"append": map[string]any{"row": map[string]any{"a": 3}}}}}, 413); !strings.Contains(r, "updates[0]") {
			t.Fatalf("reason %q", r)
		}
	})
}

// A table of many rows pages as a key range: every page answers the rows at
// its offset, in order.
func TestTablePaging(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		var rows []string
		for i := 0; i < 1234; i++ {
			rows = append(rows, fmt.Sprintf(`{"i": %d}`, i))
		}
		st, out := tableCreate(e, "alice", proj, "["+strings.Join(rows, ", ")+"]")
		if st != 200 {
			t.Fatalf("%d %s", st, out)
		}
		var res struct{ Digest string }
		json.Unmarshal(out, &res)
		for _, off := range []int{0, 100, 1200, 1233, 1234} {
			page := tableQuery(e, map[string]any{"project_id": proj, "digest": res.Digest, "limit": 50, "offset": off})
			if n := min(50, 1234-off); len(page) != n {
				t.Fatalf("offset %d: %d rows", off, len(page))
			}
			for j, r := range page {
				if r.OriginalIndex != off+j || r.Val["i"] != float64(off+j) {
					t.Fatalf("offset %d row %d: %+v", off, j, r)
				}
			}
		}
	})
}

// Sorting a table by its rows' fields: the same order on both databases,
// by kind (missing/null, bool, number, string, array/object), then value;
// ties keep table order; paging applies to the sorted rows.
func TestTableSort(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		rows := `[{"i": 0, "s": {"x": 10}}, {"i": 1, "s": {"x": "b"}}, {"i": 2, "s": {"x": 2.5}}, {"i": 3},
			{"i": 4, "s": {"x": "a"}}, {"i": 5, "s": {"x": true}}, {"i": 6, "s": {"x": null}}, {"i": 7, "s": {"x": [1]}}, {"i": 8, "s": {"x": 10}}]`
		st, out := tableCreate(e, "alice", proj, rows)
		if st != 200 {
			t.Fatal(string(out))
		}
		var res struct{ Digest string }
		json.Unmarshal(out, &res)
		order := func(body map[string]any) []int {
			body["project_id"], body["digest"] = proj, res.Digest
			var idx []int
			for _, r := range tableQuery(e, body) {
				idx = append(idx, r.OriginalIndex)
			}
			return idx
		}
		asc := []any{map[string]any{"field": "s.x", "direction": "asc"}}
		if got := order(map[string]any{"sort_by": asc}); !reflect.DeepEqual(got, []int{3, 6, 5, 2, 0, 8, 4, 1, 7}) {
			t.Fatalf("asc: %v", got)
		}
		desc := []any{map[string]any{"field": "val.s.x", "direction": "desc"}, map[string]any{"field": "i", "direction": "desc"}}
		if got := order(map[string]any{"sort_by": desc}); !reflect.DeepEqual(got, []int{7, 1, 4, 8, 0, 2, 5, 6, 3}) {
			t.Fatalf("desc: %v", got)
		}
		if got := order(map[string]any{"sort_by": asc, "limit": 3, "offset": 4}); !reflect.DeepEqual(got, []int{0, 8, 4}) {
			t.Fatalf("page: %v", got)
		}
		if got := order(map[string]any{"sort_by": asc, "offset": 100}); len(got) != 0 {
			t.Fatalf("past the end: %v", got)
		}
	})
}
