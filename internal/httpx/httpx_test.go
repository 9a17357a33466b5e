package httpx

import (
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func decodeBody(t *testing.T, rec *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		t.Fatalf("response is not JSON: %q", rec.Body.String())
	}
	return m
}

func TestWriteOpenAIErrorEnvelope(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteOpenAIError(rec, Invalid("trajectory_groups[3].trajectories[0].reward", "invalid_type", "expected a number"))
	if rec.Code != 400 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, content type %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	got := decodeBody(t, rec)["error"].(map[string]any)
	want := map[string]any{"message": "expected a number", "type": "invalid_request_error",
		"param": "trajectory_groups[3].trajectories[0].reward", "code": "invalid_type"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("error.%s = %v, want %v", k, got[k], v)
		}
	}
}

func TestInternalErrorsAreOpaque(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteOpenAIError(rec, errors.New("sql: database is locked at /var/lib/x.db"))
	if rec.Code != 500 || strings.Contains(rec.Body.String(), "sql") {
		t.Fatalf("status %d body %s: internals leaked", rec.Code, rec.Body.String())
	}
	got := decodeBody(t, rec)["error"].(map[string]any)
	if got["type"] != "server_error" || got["param"] != nil {
		t.Fatalf("error = %v", got)
	}

	rec = httptest.NewRecorder()
	WriteReason(rec, errors.New("boom: /etc/secret"))
	if rec.Code != 500 || decodeBody(t, rec)["reason"] != "internal server error" {
		t.Fatalf("status %d body %s", rec.Code, rec.Body.String())
	}
}

func TestWriteReasonNamesParam(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteReason(rec, Invalid("start.op_name", "missing_field", "is required"))
	if rec.Code != 400 || decodeBody(t, rec)["reason"] != "start.op_name: is required" {
		t.Fatalf("status %d body %s", rec.Code, rec.Body.String())
	}
	// A message that starts with its field already (a type mismatch) is not
	// prefixed twice.
	rec = httptest.NewRecorder()
	WriteReason(rec, UnmarshalJSON([]byte(`{"limit": 1e12}`), &struct {
		Limit int `json:"limit"`
	}{}))
	if rec.Code != 400 || decodeBody(t, rec)["reason"] != "limit: expected an integer, got a number" {
		t.Fatalf("status %d body %s", rec.Code, rec.Body.String())
	}
}

func TestStatusTypes(t *testing.T) {
	for status, typ := range map[int]string{401: "authentication_error", 403: "permission_error", 404: "not_found_error",
		409: "conflict_error", 413: "request_too_large", 429: "rate_limit_error", 503: "server_error", 422: "invalid_request_error"} {
		rec := httptest.NewRecorder()
		WriteOpenAIError(rec, Errorf(status, "x"))
		if got := decodeBody(t, rec)["error"].(map[string]any)["type"]; rec.Code != status || got != typ {
			t.Errorf("status %d: got %d %v, want type %s", status, rec.Code, got, typ)
		}
	}
}

func TestMaxBytesIs413(t *testing.T) {
	req := httptest.NewRequest("POST", "/", strings.NewReader(`{"a": "0123456789"}`))
	rec := httptest.NewRecorder()
	req.Body = http.MaxBytesReader(rec, req.Body, 5)
	var v map[string]any
	err := DecodeJSON(req, &v)
	if e := AsError(err); e.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("got %v (status %d), want 413", err, e.Status)
	}
}

func TestUnmarshalJSONErrors(t *testing.T) {
	type inner struct {
		Reward float64 `json:"reward"`
	}
	type shared struct {
		Seed *int64 `json:"seed"`
	}
	type body struct {
		shared
		Model string  `json:"model"`
		Items []inner `json:"items"`
	}
	cases := []struct {
		in, param, code, msg string
	}{
		{``, "", "invalid_json", "empty"},
		{`{"model": `, "", "invalid_json", "unexpected end"},
		{`{"model": 1}`, "model", "invalid_type", "model: expected a string, got a number"},
		// The JSON path, with the element's index (encoding/json's Field
		// says "items.reward").
		{`{"items": [{"reward": 1}, {"reward": "high"}]}`, "items[1].reward", "invalid_type", "items[1].reward: expected a number, got a string"},
		{`{"items": {"reward": 1}}`, "items", "invalid_type", "items: expected an array, got an object"},
		// A field of an embedded struct by its JSON name (encoding/json's
		// Field says "shared.seed").
		{`{"model": "m", "seed": "7"}`, "seed", "invalid_type", "seed: expected an integer, got a string"},
		{`[1]`, "", "invalid_type", "must be an object, got an array"},
	}
	for _, c := range cases {
		var b body
		e := AsError(UnmarshalJSON([]byte(c.in), &b))
		if e.Status != 400 || e.Param != c.param || e.Code != c.code || !strings.Contains(e.Message, c.msg) {
			t.Errorf("%q: got %d %q %q %q, want param %q code %q message containing %q", c.in, e.Status, e.Param, e.Code, e.Message, c.param, c.code, c.msg)
		}
	}
	var b body
	if err := UnmarshalJSON([]byte(`{"model": "m", "unknown": [1, 2]}`), &b); err != nil || b.Model != "m" {
		t.Fatalf("unknown fields must be ignored: %v", err)
	}
}

type sqlStateErr string

// connErr is a driver's connection-level failure (pgconn's "conn closed").
type connErr struct{}

func (connErr) Error() string     { return "conn closed" }
func (connErr) SafeToRetry() bool { return true }

func (e sqlStateErr) Error() string    { return "pg: " + string(e) }
func (e sqlStateErr) SQLState() string { return string(e) }

// A database that is down or restarting makes a 503 (retry), anything else
// unknown a 500.
func TestDatabaseUnavailableIs503(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("get job: %w", sqlStateErr("57P03")), 503}, // cannot connect now (starting up)
		{fmt.Errorf("x: %w", sqlStateErr("57P01")), 503},       // admin shutdown
		{sqlStateErr("08006"), 503},                            // connection failure
		{fmt.Errorf("begin: %w", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}), 503},
		{fmt.Errorf("q: %w", driver.ErrBadConn), 503},
		{fmt.Errorf("begin: %w", connErr{}), 503},
		{fmt.Errorf("upsert: %w", pgconn.ErrConnClosed), 503},
		{fmt.Errorf("get job: %w", io.ErrUnexpectedEOF), 503},
		{sqlStateErr("23505"), 500}, // a unique violation is a bug here, not an outage
		{errors.New("boom"), 500},
	} {
		if got := AsError(c.err).Status; got != c.want {
			t.Errorf("%v: status %d, want %d", c.err, got, c.want)
		}
	}
}

// sqliteErr is modernc.org/sqlite's error shape.
type sqliteErr struct {
	code int
	msg  string
}

func (e sqliteErr) Error() string { return e.msg }
func (e sqliteErr) Code() int     { return e.code }

// A full disk is 507 insufficient_storage, saying so: a file write's
// ENOSPC, SQLite's SQLITE_FULL, PostgreSQL's disk_full.
func TestFullDiskIs507(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("store request: %w", &os.PathError{Op: "write", Path: "/data/requests/x", Err: syscall.ENOSPC}),
		fmt.Errorf("insert call: %w", sqliteErr{13, "database or disk is full (13)"}),
		fmt.Errorf("insert call: %w", sqlStateErr("53100")),
	} {
		e := AsError(err)
		if e.Status != http.StatusInsufficientStorage || e.Code != "insufficient_storage" || !strings.Contains(e.Message, "disk is full") {
			t.Fatalf("%v: got %+v", err, e)
		}
	}
	if e := AsError(sqliteErr{19, "constraint failed"}); e.Status != 500 {
		t.Fatalf("a constraint error: %+v", e)
	}
}
