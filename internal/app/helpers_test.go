package app_test

import (
	"bytes"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"flywheel/internal/app"
)

// serveApp serves a over HTTP and returns its URL and an API key of admin.
func serveApp(t *testing.T, a *app.App) (string, string) {
	t.Helper()
	_, key, err := a.Store.CreateKey(t.Context(), "admin", "test", "")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	return srv.URL, key
}

func mustDo(t *testing.T, url, key, method, path, body string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	return send(t, req)
}

func send(t *testing.T, req *http.Request) map[string]any {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != 200 {
		t.Fatalf("%s %s: %d %v %v", req.Method, req.URL.Path, res.StatusCode, out, err)
	}
	return out
}

// mustUpload uploads a fine-tuning file and returns its id.
func mustUpload(t *testing.T, url, key, name, content string) string {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	mw.WriteField("purpose", "fine-tune")
	fw, _ := mw.CreateFormFile("file", name)
	fw.Write([]byte(content))
	mw.Close()
	req, _ := http.NewRequest("POST", url+"/v1/files", &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Authorization", "Bearer "+key)
	return send(t, req)["id"].(string)
}
