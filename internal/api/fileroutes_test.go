package api_test

import (
	"bytes"
	"mime/multipart"
	"net/http"
	"os"
	"testing"
)

// uploadAs uploads content as a multipart file with the given purpose.
func uploadAs(t *testing.T, e *env, key, purpose, name, content string) resp {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	mw.WriteField("purpose", purpose)
	fw, _ := mw.CreateFormFile("file", name)
	fw.Write([]byte(content))
	mw.Close()
	req, _ := http.NewRequest("POST", e.url+"/v1/files", &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Authorization", "Bearer "+key)
	return e.send(req)
}

// The OpenAI Files routes: purpose validated, list (newest first, paged,
// by purpose), content as uploaded, delete; another user's file is 404.
func TestFileRoutes(t *testing.T) {
	e := newEnv(t, envOpts{})
	line := `{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}` + "\n"

	bad := e.must(uploadAs(t, e, e.alice, "fine-tuning", "data.jsonl", line), 400)
	if bad.errParam() != "purpose" || bad.errCode() != "invalid_value" {
		t.Fatalf("bad purpose: %s", bad.raw)
	}
	var ids []string
	for _, p := range []string{"fine-tune", "user_data", "fine-tune"} {
		r := e.must(uploadAs(t, e, e.alice, p, "data.jsonl", line), 200)
		ids = append(ids, r.body["id"].(string))
	}
	bobs := e.must(uploadAs(t, e, e.bob, "fine-tune", "data.jsonl", line), 200).body["id"].(string)

	list := e.must(e.do("GET", "/v1/files", e.alice, nil), 200)
	data := list.body["data"].([]any)
	if list.body["object"] != "list" || len(data) != 3 || list.body["has_more"] != false ||
		data[0].(map[string]any)["id"] != ids[2] || data[2].(map[string]any)["id"] != ids[0] {
		t.Fatalf("list: %s", list.raw)
	}
	if f := data[1].(map[string]any); f["object"] != "file" || f["purpose"] != "user_data" || f["bytes"] != float64(len(line)) {
		t.Fatalf("file object: %v", f)
	}
	// Paged with after, ascending, by purpose.
	p1 := e.must(e.do("GET", "/v1/files?limit=2&order=asc", e.alice, nil), 200)
	if d := p1.body["data"].([]any); len(d) != 2 || p1.body["has_more"] != true || p1.body["last_id"] != ids[1] {
		t.Fatalf("page 1: %s", p1.raw)
	}
	p2 := e.must(e.do("GET", "/v1/files?limit=2&order=asc&after="+ids[1], e.alice, nil), 200)
	if d := p2.body["data"].([]any); len(d) != 1 || p2.body["has_more"] != false || d[0].(map[string]any)["id"] != ids[2] {
		t.Fatalf("page 2: %s", p2.raw)
	}
	ft := e.must(e.do("GET", "/v1/files?purpose=user_data", e.alice, nil), 200)
	if d := ft.body["data"].([]any); len(d) != 1 || d[0].(map[string]any)["id"] != ids[1] {
		t.Fatalf("by purpose: %s", ft.raw)
	}
	e.must(e.do("GET", "/v1/files?limit=0", e.alice, nil), 400)
	e.must(e.do("GET", "/v1/files?order=up", e.alice, nil), 400)

	c := e.must(e.do("GET", "/v1/files/"+ids[0]+"/content", e.alice, nil), 200)
	if string(c.raw) != line {
		t.Fatalf("content %q", c.raw)
	}
	// Tenancy: bob sees, reads and deletes none of alice's files.
	e.must(e.do("GET", "/v1/files/"+ids[0]+"/content", e.bob, nil), 404)
	e.must(e.do("DELETE", "/v1/files/"+ids[0], e.bob, nil), 404)
	if d := e.must(e.do("GET", "/v1/files", e.bob, nil), 200).body["data"].([]any); len(d) != 1 || d[0].(map[string]any)["id"] != bobs {
		t.Fatalf("bob's list: %v", d)
	}

	rec, err := e.st.FileByID(t.Context(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	del := e.must(e.do("DELETE", "/v1/files/"+ids[0], e.alice, nil), 200)
	if del.body["id"] != ids[0] || del.body["object"] != "file" || del.body["deleted"] != true {
		t.Fatalf("delete: %s", del.raw)
	}
	if _, err := os.Stat(rec.Path); !os.IsNotExist(err) {
		t.Fatalf("bytes still at %s: %v", rec.Path, err)
	}
	e.must(e.do("GET", "/v1/files/"+ids[0], e.alice, nil), 404)
	e.must(e.do("GET", "/v1/files/"+ids[0]+"/content", e.alice, nil), 404)
	e.must(e.do("DELETE", "/v1/files/"+ids[0], e.alice, nil), 404)
	if d := e.must(e.do("GET", "/v1/files", e.alice, nil), 200).body["data"].([]any); len(d) != 2 {
		t.Fatalf("after delete: %v", d)
	}
}
