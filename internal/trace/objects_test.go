package trace

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
)

// Digests computed by Weave's own code: the TypeScript SDK's computeDigest /
// valDigest (weave 0.11.1, dist/digest.js) and, for the non-ASCII value,
// Python's json.dumps(v, sort_keys=True) hashed as weave/shared/digest.py
// does.
func TestDigestVectors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "47DEQpj8HBSaXYTImWX5JCeuQeRkm5NMpJWZG3hSuFU"},
		{"function add(a, b) { return a + b; }", "BUsBayqJhQyMo8fpQp4wQvFvwG29MHBGtbFdxyguzLU"},
	} {
		if got := Digest([]byte(c.in)); got != c.want {
			t.Errorf("Digest(%q) = %s, want %s", c.in, got, c.want)
		}
	}
	for _, c := range []struct{ val, want string }{
		{`{"b":1,"a":[1,2.5,"x"],"c":{"z":null,"y":true}}`, "CvRP1wIoziYkPjzD6X3UodV13YLDHAOKgH1JFxIhOvI"},
		{`{"b": 1, "a": "é"}`, "1zkT77MJtZhs3JWS7IaXxaAkwiQM4yF893fTlsTjg60"},
	} {
		got, err := objectDigest([]byte(c.val))
		if err != nil || got != c.want {
			t.Errorf("objectDigest(%s) = %s, %v; want %s", c.val, got, err, c.want)
		}
	}
	sorted, _ := canonicalSorted([]byte(`{"b":1,"a":[1,2.5,"x"],"c":{"z":null,"y":true},"a":0}`))
	if string(sorted) != `{"a": 0, "b": 1, "c": {"y": true, "z": null}}` {
		t.Errorf("canonicalSorted = %s", sorted)
	}
}

const opVal = `{"_type": "CustomWeaveType", "weave_type": {"type": "Op"}, "files": {"obj.py": "BUsBayqJhQyMo8fpQp4wQvFvwG29MHBGtbFdxyguzLU"}, "load_op": "NO_LOAD_OP"}`

var objKeys = []string{"project_id", "object_id", "created_at", "deleted_at", "digest", "version_index", "is_latest", "kind",
	"base_object_class", "leaf_object_class", "val", "platform_user_id", "size_bytes"}

func objCreate(e *env, user, project, objectID, val string) string {
	e.t.Helper()
	st, out := e.post(user, "/obj/create", `{"obj": {"project_id": "`+project+`", "object_id": "`+objectID+`", "val": `+val+`}}`)
	if st != 200 {
		e.t.Fatalf("obj/create: %d %s", st, out)
	}
	var m map[string]string
	if err := json.Unmarshal(out, &m); err != nil || len(m) != 1 || m["digest"] == "" {
		e.t.Fatalf("obj/create answered %s, want {\"digest\"}", out)
	}
	return m["digest"]
}

func objRead(e *env, project, objectID, digest string) map[string]any {
	e.t.Helper()
	m := e.ok("alice", "/obj/read", map[string]any{"project_id": project, "object_id": objectID, "digest": digest})
	return m["obj"].(map[string]any)
}

func keysOf(m map[string]any) map[string]bool {
	k := map[string]bool{}
	for key := range m {
		k[key] = true
	}
	return k
}

func TestObjCreateRead(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		d0 := objCreate(e, "alice", proj, "add", opVal)
		want, _ := objectDigest([]byte(opVal))
		if d0 != want {
			t.Fatalf("digest %s, want %s", d0, want)
		}
		// the same value again (keys in another order, other spacing): same digest, no new version
		if d := objCreate(e, "alice", proj, "add", `{"load_op":"NO_LOAD_OP","files":{"obj.py":"BUsBayqJhQyMo8fpQp4wQvFvwG29MHBGtbFdxyguzLU"},"weave_type":{"type":"Op"},"_type":"CustomWeaveType"}`); d != d0 {
			t.Fatalf("reordered value: digest %s, want %s", d, d0)
		}
		st, raw := e.post("alice", "/obj/read", map[string]any{"project_id": proj, "object_id": "add", "digest": d0})
		if st != 200 {
			t.Fatalf("obj/read: %d %s", st, raw)
		}
		// exact shape: keys in Weave's ObjSchema order, val as stored (canonical, keys as first received)
		wantPrefix := `{"obj": {"project_id": "alice/p1", "object_id": "add", "created_at": "`
		if !bytes.HasPrefix(raw, []byte(wantPrefix)) {
			t.Fatalf("obj/read: %s", raw)
		}
		if !bytes.Contains(raw, []byte(`", "deleted_at": null, "digest": "`+d0+`", "version_index": 0, "is_latest": 1, "kind": "op", "base_object_class": null, "leaf_object_class": null, "val": `+opVal+`, "platform_user_id": "user-alice", "size_bytes": `)) {
			t.Fatalf("obj/read shape: %s", raw)
		}
		o := objRead(e, proj, "add", d0)
		if len(o) != len(objKeys) {
			t.Fatalf("keys %v", keysOf(o))
		}
		for _, k := range objKeys {
			if _, ok := o[k]; !ok {
				t.Fatalf("missing key %s in %v", k, o)
			}
		}
		if o["size_bytes"] != float64(len(opVal)) {
			t.Fatalf("size_bytes %v, want %d", o["size_bytes"], len(opVal))
		}

		// a second version
		d1 := objCreate(e, "alice", proj, "add", `{"_type": "CustomWeaveType", "weave_type": {"type": "Op"}, "files": {"obj.py": "other"}, "load_op": "NO_LOAD_OP"}`)
		if d1 == d0 {
			t.Fatal("a new value got the old digest")
		}
		for _, c := range []struct {
			digest  string
			version float64
			latest  float64
		}{{"latest", 1, 1}, {"v0", 0, 0}, {"v1", 1, 1}, {d0, 0, 0}, {d1, 1, 1}} {
			o := objRead(e, proj, "add", c.digest)
			if o["version_index"] != c.version || o["is_latest"] != c.latest {
				t.Errorf("digest %s: version %v latest %v", c.digest, o["version_index"], o["is_latest"])
			}
		}
		// metadata_only leaves val out
		m := e.ok("alice", "/obj/read", map[string]any{"project_id": proj, "object_id": "add", "digest": "latest", "metadata_only": true})
		if v := m["obj"].(map[string]any)["val"]; len(v.(map[string]any)) != 0 {
			t.Fatalf("metadata_only val = %v", v)
		}
		// missing: 404 in the {"reason"} envelope (the SDK looks for 404)
		for _, body := range []map[string]any{
			{"project_id": proj, "object_id": "add", "digest": "nope"},
			{"project_id": proj, "object_id": "add", "digest": "v7"},
			{"project_id": proj, "object_id": "missing", "digest": "latest"},
			{"project_id": "alice/unknown", "object_id": "add", "digest": "latest"},
		} {
			e.fail("alice", "/obj/read", body, http.StatusNotFound)
		}

		// classes and kinds
		objCreate(e, "alice", proj, "my-model", `{"_type": "MyModel", "_class_name": "MyModel", "_bases": ["Model", "Object", "BaseModel"], "name": "m"}`)
		o = objRead(e, proj, "my-model", "latest")
		if o["kind"] != "object" || o["base_object_class"] != "Model" || o["leaf_object_class"] != "MyModel" {
			t.Fatalf("classes: %v", o)
		}
		objCreate(e, "alice", proj, "scalar", `42`)
		if o := objRead(e, proj, "scalar", "latest"); o["val"] != 42.0 || o["kind"] != "object" || o["base_object_class"] != nil {
			t.Fatalf("scalar: %v", o)
		}
		// builtin_object_class must match the class the value declares
		e.ok("alice", "/obj/create", `{"obj": {"project_id": "alice/p1", "object_id": "m2", "builtin_object_class": "MyModel",
			"val": {"_class_name": "MyModel", "_bases": ["Object", "BaseModel"]}}}`)
		r := e.fail("alice", "/obj/create", `{"obj": {"project_id": "alice/p1", "object_id": "m3", "builtin_object_class": "Leaderboard", "val": {"a": 1}}}`, 400)
		if !strings.HasPrefix(r, "obj.builtin_object_class: ") {
			t.Fatalf("reason %q", r)
		}
	})
}

func TestObjCreateValidation(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{MaxObjectBytes: 64})
		for _, c := range []struct {
			body   string
			status int
			prefix string
		}{
			{`{}`, 400, "obj: "},
			{`{"obj": {"object_id": "a", "val": 1}}`, 400, "obj.project_id: "},
			{`{"obj": {"project_id": "alice/p1", "val": 1}}`, 400, "obj.object_id: "},
			{`{"obj": {"project_id": "alice/p1", "object_id": "a/b", "val": 1}}`, 400, "obj.object_id: "},
			{`{"obj": {"project_id": "alice/p1", "object_id": "` + strings.Repeat("x", 129) + `", "val": 1}}`, 400, "obj.object_id: "},
			{`{"obj": {"project_id": "alice/p1", "object_id": "a"}}`, 400, "obj.val: "},
			{`{"obj": {"project_id": "alice/p1", "object_id": 5, "val": 1}}`, 400, "obj.object_id: "},
			{`{"obj": {"project_id": "alice/p1", "object_id": "a", "val": "` + strings.Repeat("x", 70) + `"}}`, 413, "obj.val: "},
			{`{"obj": {"project_id": "bob/p1", "object_id": "a", "val": 1}}`, 403, ""},
		} {
			r := e.fail("alice", "/obj/create", c.body, c.status)
			if !strings.HasPrefix(r, c.prefix) {
				t.Errorf("%s: reason %q, want prefix %q", c.body, r, c.prefix)
			}
		}
		e.fail("", "/obj/create", `{"obj": {"project_id": "alice/p1", "object_id": "a", "val": 1}}`, 401)
		// exactly at the limit is fine
		objCreate(e, "alice", proj, "a", `"`+strings.Repeat("x", 62)+`"`)
	})
}

func TestObjsQuery(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		objCreate(e, "alice", proj, "add", opVal)
		objCreate(e, "alice", proj, "cfg", `{"x": 1}`)
		objCreate(e, "alice", proj, "cfg", `{"x": 2}`)
		objCreate(e, "alice", proj, "model", `{"_class_name": "M", "_bases": ["Model", "Object", "BaseModel"]}`)
		ids := func(body map[string]any) []string {
			t.Helper()
			body["project_id"] = proj
			m := e.ok("alice", "/objs/query", body)
			var out []string
			for _, o := range m["objs"].([]any) {
				om := o.(map[string]any)
				out = append(out, om["object_id"].(string)+":"+jsonStr(om["version_index"]))
			}
			return out
		}
		for _, c := range []struct {
			body map[string]any
			want string
		}{
			{map[string]any{}, "add:0 cfg:0 cfg:1 model:0"},
			{map[string]any{"filter": map[string]any{"is_op": true}}, "add:0"},
			{map[string]any{"filter": map[string]any{"is_op": false, "latest_only": true}}, "cfg:1 model:0"},
			{map[string]any{"filter": map[string]any{"object_ids": []string{"cfg"}}}, "cfg:0 cfg:1"},
			{map[string]any{"filter": map[string]any{"base_object_classes": []string{"Model"}}}, "model:0"},
			{map[string]any{"filter": map[string]any{"exclude_base_object_classes": []string{"Model"}}}, "add:0 cfg:0 cfg:1"},
			{map[string]any{"filter": map[string]any{"leaf_object_classes": []string{"M"}}}, "model:0"},
			{map[string]any{"sort_by": []map[string]any{{"field": "object_id", "direction": "desc"}}}, "model:0 cfg:0 cfg:1 add:0"},
			{map[string]any{"limit": 2, "offset": 1}, "cfg:0 cfg:1"},
		} {
			if got := strings.Join(ids(c.body), " "); got != c.want {
				t.Errorf("%v: %s, want %s", c.body, got, c.want)
			}
		}
		m := e.ok("alice", "/objs/query", map[string]any{"project_id": proj, "filter": map[string]any{"object_ids": []string{"add"}},
			"metadata_only": true, "include_storage_size": true})
		o := m["objs"].([]any)[0].(map[string]any)
		if len(o) != len(objKeys) || len(o["val"].(map[string]any)) != 0 || o["size_bytes"] != float64(len(opVal)) {
			t.Fatalf("metadata_only row: %v", o)
		}
		m = e.ok("alice", "/objs/query", map[string]any{"project_id": proj, "filter": map[string]any{"object_ids": []string{"add"}}})
		if o := m["objs"].([]any)[0].(map[string]any); o["size_bytes"] != nil || o["val"].(map[string]any)["_type"] != "CustomWeaveType" {
			t.Fatalf("default row: %v", o)
		}
		if m := e.ok("alice", "/objs/query", map[string]any{"project_id": "team/none"}); len(m["objs"].([]any)) != 0 {
			t.Fatalf("unknown project: %v", m)
		}
		if r := e.fail("alice", "/objs/query", map[string]any{"project_id": proj, "sort_by": []map[string]any{{"field": "val", "direction": "asc"}}}, 400); !strings.HasPrefix(r, "sort_by[0].field: ") {
			t.Fatalf("reason %q", r)
		}
		e.fail("alice", "/objs/query", map[string]any{"project_id": proj, "limit": -1}, 400)
		e.fail("bob", "/objs/query", map[string]any{"project_id": proj}, 403)
	})
}

func jsonStr(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// postFile sends a multipart /file/create form.
func (e *env) postFile(user string, fields map[string]string, file []byte) (int, []byte) {
	e.t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for k, v := range fields {
		mw.WriteField(k, v)
	}
	if file != nil {
		fw, _ := mw.CreateFormFile("file", "obj.py")
		fw.Write(file)
	}
	mw.Close()
	req, _ := http.NewRequest("POST", e.srv.URL+"/file/create", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	return e.do(user, req)
}

func TestFiles(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{MaxFileBytes: 1000})
		code := []byte("function add(a, b) { return a + b; }")
		st, out := e.postFile("alice", map[string]string{"project_id": proj}, code)
		if st != 200 || string(out) != `{"digest": "BUsBayqJhQyMo8fpQp4wQvFvwG29MHBGtbFdxyguzLU"}`+"\n" {
			t.Fatalf("file/create: %d %s", st, out)
		}
		// again: same digest
		if st, out2 := e.postFile("alice", map[string]string{"project_id": proj}, code); st != 200 || !bytes.Equal(out, out2) {
			t.Fatalf("file/create again: %d %s", st, out2)
		}
		// an empty file is a file
		if st, out := e.postFile("alice", map[string]string{"project_id": proj}, []byte{}); st != 200 || !bytes.Contains(out, []byte("47DEQpj8HBSaXYTImWX5JCeuQeRkm5NMpJWZG3hSuFU")) {
			t.Fatalf("empty file: %d %s", st, out)
		}
		req, _ := http.NewRequest("POST", e.srv.URL+"/file/content", strings.NewReader(`{"project_id": "alice/p1", "digest": "BUsBayqJhQyMo8fpQp4wQvFvwG29MHBGtbFdxyguzLU"}`))
		req.Header.Set("X-Test-User", "alice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Equal(got, code) || resp.Header.Get("Content-Type") != "application/octet-stream" {
			t.Fatalf("file/content: %d %q %s", resp.StatusCode, got, resp.Header.Get("Content-Type"))
		}
		// per project: another project of the same entity does not have it
		e.fail("alice", "/file/content", map[string]any{"project_id": "alice/p2", "digest": "BUsBayqJhQyMo8fpQp4wQvFvwG29MHBGtbFdxyguzLU"}, 404)
		e.fail("alice", "/file/content", map[string]any{"project_id": proj, "digest": "nope"}, 404)
		if r := e.fail("alice", "/file/content", map[string]any{"project_id": proj}, 400); !strings.HasPrefix(r, "digest: ") {
			t.Fatalf("reason %q", r)
		}
		e.fail("bob", "/file/content", map[string]any{"project_id": proj, "digest": "x"}, 403)

		for _, c := range []struct {
			user   string
			fields map[string]string
			file   []byte
			status int
			prefix string
		}{
			{"alice", map[string]string{"project_id": proj}, bytes.Repeat([]byte("x"), 1001), 413, "file: "},
			{"alice", map[string]string{"project_id": proj}, nil, 400, "file: "},
			{"alice", map[string]string{}, code, 400, "project_id: "},
			{"alice", map[string]string{"project_id": "nope"}, code, 400, "project_id: "},
			{"bob", map[string]string{"project_id": proj}, code, 403, ""},
			{"", map[string]string{"project_id": proj}, code, 401, ""},
		} {
			st, out := e.postFile(c.user, c.fields, c.file)
			var m map[string]string
			json.Unmarshal(out, &m)
			if st != c.status || !strings.HasPrefix(m["reason"], c.prefix) {
				t.Errorf("%v: %d %s, want %d %q", c.fields, st, out, c.status, c.prefix)
			}
		}
		// exactly at the limit is fine
		if st, out := e.postFile("alice", map[string]string{"project_id": proj}, bytes.Repeat([]byte("x"), 1000)); st != 200 {
			t.Fatalf("file at the limit: %d %s", st, out)
		}
		e.fail("alice", "/file/create", `{"project_id": "alice/p1"}`, 400) // not multipart
	})
}

// The Weave SDKs' batch shape: {"mode": "start", "req": {"start": {...}}}.
// The flat shape (req = the start/end itself) keeps working.
func TestUpsertBatchNested(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		const id1, id2 = "01a20a43-f856-7832-ae44-9a2eeafb5af2", "01a20a43-f856-7832-ae44-9a2eeafb5af3"
		start := func(id string) string {
			return `{"project_id": "alice/p1", "id": "` + id + `", "trace_id": "` + id + `", "op_name": "weave:///alice/p1/op/add:abc",
				"started_at": "2026-01-02T03:04:05.000Z", "attributes": {"weave": {"source": "js-sdk"}}, "inputs": {"a": 2, "b": 3}}`
		}
		end := func(id string) string {
			return `{"project_id": "alice/p1", "id": "` + id + `", "ended_at": "2026-01-02T03:04:05.500Z", "output": {"sum": 5},
				"summary": {"usage": {"gpt-4": {"requests": 1, "prompt_tokens": 10}}}}`
		}
		m := e.ok("alice", "/call/upsert_batch", `{"batch": [
			{"mode": "start", "req": {"start": `+start(id1)+`}},
			{"mode": "end", "req": {"end": `+end(id1)+`}},
			{"mode": "start", "req": `+start(id2)+`},
			{"req": `+end(id2)+`, "mode": "end"}]}`)
		if jsonStr(m) != `{"res":[{"id":"`+id1+`","trace_id":"`+id1+`"},{},{"id":"`+id2+`","trace_id":"`+id2+`"},{}]}` {
			t.Fatalf("res %v", m)
		}
		for _, id := range []string{id1, id2} {
			c := e.read("alice", proj, id, map[string]any{"include_storage_size": true})
			if c["op_name"] != "weave:///alice/p1/op/add:abc" || jsonStr(c["inputs"]) != `{"a":2,"b":3}` || jsonStr(c["output"]) != `{"sum":5}` ||
				platform(c)["status"] != "success" || platform(c)["trace_name"] != "add" || platform(c)["latency_ms"] != 500.0 {
				t.Fatalf("call %s: %v", id, c)
			}
		}
		// errors name the nested path
		for _, c := range []struct{ body, prefix string }{
			{`{"batch": [{"mode": "start", "req": {"start": {"project_id": "alice/p1", "op_name": "x", "attributes": {}, "inputs": {}}}}]}`, "batch[0].req.start.started_at: "},
			{`{"batch": [{"mode": "end", "req": {"end": {"project_id": "alice/p1", "id": "` + id1 + `", "summary": {}}}}]}`, "batch[0].req.end.ended_at: "},
			{`{"batch": [{"mode": "start", "req": {"start": 5}}]}`, "batch[0].req.start: "},
			{`{"batch": [{"mode": "start", "req": {"start": {"project_id": "alice/p1", "op_name": "x", "started_at": "2026-01-02T03:04:05Z", "attributes": {}, "inputs": []}}}]}`, "batch[0].req.start.inputs: "},
		} {
			if r := e.fail("alice", "/call/upsert_batch", c.body, 400); !strings.HasPrefix(r, c.prefix) {
				t.Errorf("%s: reason %q, want prefix %q", c.body, r, c.prefix)
			}
		}
		e.fail("alice", "/call/upsert_batch", `{"batch": [{"mode": "start", "req": {"start": {"project_id": "bob/p1", "op_name": "x",
			"started_at": "2026-01-02T03:04:05Z", "attributes": {}, "inputs": {}}}}]}`, 403)
	})
}

func TestHealthAndServerInfo(t *testing.T) {
	eachDialect(t, func(t *testing.T, dt testDialect) {
		e := newEnvDB(t, dt.open(t), Options{})
		for path, want := range map[string]string{"/health": "{}\n",
			"/server_info": `{"min_required_weave_python_version": "0.0.0", "trace_server_version": "flywheel"}` + "\n"} {
			resp, err := http.Get(e.srv.URL + path) // no principal
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(b) != want || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("GET %s: %d %q", path, resp.StatusCode, b)
			}
		}
	})
}
