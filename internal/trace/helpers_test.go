package trace

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"flywheel/internal/auth"
	"flywheel/internal/httpx"
	"flywheel/internal/pgtest"
	"flywheel/internal/store"
)

// Test principals: alice is in entities alice and team; bob only in bob.
var testUsers = map[string]*auth.Principal{
	"alice": {UserID: "user-alice", UserName: "alice", PersonalEntity: "alice", Entities: []string{"alice", "team"}, KeyID: "k1"},
	"bob":   {UserID: "user-bob", UserName: "bob", PersonalEntity: "bob", Entities: []string{"bob"}, KeyID: "k2"},
}

// testAuth is a tiny stand-in for the foundation's auth middleware: the
// X-Test-User header names the principal; no header, no principal.
func testAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := testUsers[r.Header.Get("X-Test-User")]; ok {
			r = r.WithContext(auth.WithPrincipal(r.Context(), p))
		}
		next.ServeHTTP(w, r)
	})
}

func openTestDB(t testing.TB) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.db")
	db, err := sql.Open("sqlite", path+"?_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// openFoundationDB opens a database exactly as the service does
// (store.OpenSQLite: WAL, synchronous NORMAL, BEGIN IMMEDIATE, mmap, 8
// connections), for the benchmark and a compatibility test.
func openFoundationDB(t testing.TB) *sql.DB {
	t.Helper()
	st, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st.DB()
}

// openPostgres opens a fresh database on the test PostgreSQL server (see
// internal/pgtest: skipped without FLYWHEEL_TEST_POSTGRES, a failure under
// CI) over pgx's database/sql driver, as the service does.
func openPostgres(t testing.TB) *sql.DB {
	t.Helper()
	return openPostgresDSN(t, pgtest.DSN(t))
}

// openPostgresDSN opens a pool of its own on dsn (a node of several).
func openPostgresDSN(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(8)
	t.Cleanup(func() { db.Close() })
	return db
}

// testDialect is one database the suite runs on.
type testDialect struct {
	name string
	// open returns an empty database; openService one opened as the service
	// opens it (for SQLite, internal/store's settings).
	open, openService func(t testing.TB) *sql.DB
}

var testDialects = []testDialect{
	{name: DialectSQLite, open: openTestDB, openService: openFoundationDB},
	{name: DialectPostgres, open: openPostgres, openService: openPostgres},
}

// eachDialect runs body once per database, as the subtests "sqlite" and
// "postgres".
func eachDialect(t *testing.T, body func(t *testing.T, dt testDialect)) {
	for _, dt := range testDialects {
		t.Run(dt.name, func(t *testing.T) { body(t, dt) })
	}
}

type env struct {
	t   testing.TB
	svc *Service
	srv *httptest.Server
	db  *sql.DB
}

func newEnvDB(t testing.TB, db *sql.DB, opts Options) *env {
	t.Helper()
	svc, err := New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	svc.Register(httpx.NewRoutes(mux))
	srv := httptest.NewServer(testAuth(mux))
	t.Cleanup(srv.Close)
	return &env{t: t, svc: svc, srv: srv, db: db}
}

// post sends body (a string, []byte or a value to marshal) as user and
// returns the status and the raw response.
func (e *env) post(user, path string, body any) (int, []byte) {
	e.t.Helper()
	var b []byte
	switch v := body.(type) {
	case string:
		b = []byte(v)
	case []byte:
		b = v
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			e.t.Fatal(err)
		}
	}
	req, _ := http.NewRequest("POST", e.srv.URL+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	return e.do(user, req)
}

// do sends req as user and returns the status and the raw response.
func (e *env) do(user string, req *http.Request) (int, []byte) {
	e.t.Helper()
	if user != "" {
		req.Header.Set("X-Test-User", user)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// ok posts and requires 200, decoding the response into a generic map.
func (e *env) ok(user, path string, body any) map[string]any {
	e.t.Helper()
	st, out := e.post(user, path, body)
	if st != 200 {
		e.t.Fatalf("%s: status %d: %s", path, st, out)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		e.t.Fatalf("%s: bad JSON %q: %v", path, out, err)
	}
	return m
}

// fail posts and requires the given status and a {"reason"} body.
func (e *env) fail(user, path string, body any, status int) string {
	e.t.Helper()
	st, out := e.post(user, path, body)
	if st != status {
		e.t.Fatalf("%s: status %d, want %d: %s", path, st, status, out)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		e.t.Fatalf("%s: error body not JSON: %q", path, out)
	}
	reason, ok := m["reason"].(string)
	if !ok || reason == "" || len(m) != 1 {
		e.t.Fatalf("%s: error body %s is not {\"reason\": ...}", path, out)
	}
	return reason
}

func (e *env) start(user string, req map[string]any) (id, traceID string) {
	e.t.Helper()
	m := e.ok(user, "/call/start", map[string]any{"start": req})
	return m["id"].(string), m["trace_id"].(string)
}

func (e *env) end(user string, req map[string]any) {
	e.t.Helper()
	m := e.ok(user, "/call/end", map[string]any{"end": req})
	if len(m) != 0 {
		e.t.Fatalf("end answered %v", m)
	}
}

// read returns the "call" object (nil when null).
func (e *env) read(user, project, id string, flags map[string]any) map[string]any {
	e.t.Helper()
	body := map[string]any{"project_id": project, "id": id}
	for k, v := range flags {
		body[k] = v
	}
	m := e.ok(user, "/call/read", body)
	c, present := m["call"]
	if !present {
		e.t.Fatalf("read: no call key: %v", m)
	}
	if c == nil {
		return nil
	}
	return c.(map[string]any)
}

var allFlags = map[string]any{"include_costs": true, "include_storage_size": true, "include_total_storage_size": true}

func platform(c map[string]any) map[string]any {
	return c["summary"].(map[string]any)["platform"].(map[string]any)
}
