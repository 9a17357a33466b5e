package httpx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

var errDomain = errors.New("domain: no such thing")

// The one handler adapter: a returned error is answered in the route
// group's envelope after the package's domain mapping; an unknown error is
// an opaque 500 (logged with the request id); an error after the response
// started adds nothing to it; a request whose client left gets no answer.
func TestRouteAdapter(t *testing.T) {
	var logged bytes.Buffer
	rt := NewRoutes(http.NewServeMux())
	rt.SetLogger(slog.New(slog.NewTextHandler(&logged, nil)))
	mapped := func(err error) error {
		if errors.Is(err, errDomain) {
			return NotFound("thing %q not found", "t1")
		}
		return err
	}
	for _, g := range []*GroupMux{rt.In(OpenAIAPI).MapErrors(mapped), rt.In(CallStore).MapErrors(mapped)} {
		prefix := "/" + g.g.Name
		g.Route("GET "+prefix+"/domain", func(http.ResponseWriter, *http.Request) error { return fmt.Errorf("get: %w", errDomain) })
		g.Route("GET "+prefix+"/internal", func(http.ResponseWriter, *http.Request) error { return errors.New("sql: secret at /var/x") })
		g.Route("GET "+prefix+"/ok", func(w http.ResponseWriter, _ *http.Request) error {
			WriteJSON(w, http.StatusOK, map[string]any{"ok": true})
			return nil
		})
		g.Route("GET "+prefix+"/stream", func(w http.ResponseWriter, _ *http.Request) error {
			_, _ = io.WriteString(w, "partial")
			return fmt.Errorf("%w: query failed", ErrResponseStarted)
		})
		g.Route("GET "+prefix+"/gone", func(http.ResponseWriter, *http.Request) error { return context.Canceled })
	}
	serve := func(path string, ctx context.Context) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("GET", path, nil).WithContext(WithRequestID(ctx, "req-1"))
		rt.Mux().ServeHTTP(rec, r)
		return rec
	}
	bg := context.Background()

	rec := serve("/openai/domain", bg)
	if got := decodeBody(t, rec)["error"].(map[string]any); rec.Code != 404 || got["message"] != `thing "t1" not found` || got["type"] != "not_found_error" {
		t.Errorf("openai domain error: %d %s", rec.Code, rec.Body)
	}
	rec = serve("/callstore/domain", bg)
	if rec.Code != 404 || decodeBody(t, rec)["reason"] != `thing "t1" not found` {
		t.Errorf("call store domain error: %d %s", rec.Code, rec.Body)
	}
	for _, path := range []string{"/openai/internal", "/callstore/internal"} {
		logged.Reset()
		rec = serve(path, bg)
		if rec.Code != 500 || strings.Contains(rec.Body.String(), "secret") {
			t.Errorf("%s: %d %s, want an opaque 500", path, rec.Code, rec.Body)
		}
		if l := logged.String(); !strings.Contains(l, "request_id=req-1") || !strings.Contains(l, "secret") {
			t.Errorf("%s: the 500 was not logged with its request id and cause: %q", path, l)
		}
	}
	if rec = serve("/openai/ok", bg); rec.Code != 200 || decodeBody(t, rec)["ok"] != true {
		t.Errorf("ok: %d %s", rec.Code, rec.Body)
	}
	logged.Reset()
	if rec = serve("/callstore/stream", bg); rec.Code != 200 || rec.Body.String() != "partial" || !strings.Contains(logged.String(), "query failed") {
		t.Errorf("error after the response started: %d %q (logged %q), want the partial answer alone and a log line", rec.Code, rec.Body, logged.String())
	}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if rec = serve("/openai/gone", ctx); rec.Body.Len() != 0 {
		t.Errorf("a client that left got %d %s", rec.Code, rec.Body)
	}
	if rec = serve("/openai/gone", bg); rec.Code != 500 {
		t.Errorf("a cancellation of the server's own: %d, want 500", rec.Code)
	}
}

// ReadBody reads a body with or without Content-Length, hands sink every
// byte in order, answers a body shorter than announced 400 and one over
// the server's limit (the middleware's MaxBytesReader) 413.
func TestReadBody(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 3<<16) // 3 MiB: several flushes
	for _, chunked := range []bool{false, true} {
		r := httptest.NewRequest("POST", "/", bytes.NewReader(data))
		if chunked {
			r.Body, r.ContentLength = io.NopCloser(io.MultiReader(bytes.NewReader(data))), -1
		}
		var sunk []byte
		got, err := ReadBody(r, func(b []byte) { sunk = append(sunk, b...) })
		if err != nil || !bytes.Equal(got, data) || !bytes.Equal(sunk, data) {
			t.Errorf("chunked %v: %v, read %d bytes, sank %d, want %d", chunked, err, len(got), len(sunk), len(data))
		}
	}
	r := httptest.NewRequest("POST", "/", strings.NewReader("{}"))
	r.ContentLength = 10
	if _, err := ReadBody(r, nil); AsError(err).Status != 400 {
		t.Errorf("short body: %v, want 400", err)
	}
	rec := httptest.NewRecorder()
	for _, n := range []int64{int64(len(data)), -1} {
		r = httptest.NewRequest("POST", "/", bytes.NewReader(data))
		r.ContentLength = n
		r.Body = http.MaxBytesReader(rec, r.Body, 1<<20)
		if _, err := ReadBody(r, nil); AsError(err).Status != 413 || !strings.Contains(err.Error(), "limit of 1048576 bytes") {
			t.Errorf("Content-Length %d over the limit: %v, want 413", n, err)
		}
	}
}
