package trace

import (
	"bytes"
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"flywheel/internal/auth"
	"flywheel/internal/httpx"
	"flywheel/internal/names"
	"flywheel/internal/sqlmigrate"
)

//go:embed migrations/sqlite/*.sql migrations/postgres/*.sql
var migrationFS embed.FS

// TokenPrice is a price per token, in USD, for prompt and completion tokens.
type TokenPrice struct {
	Prompt     float64
	Completion float64
}

// Options configures a Service. The zero value is usable.
type Options struct {
	// PricesFile, when set, is a JSON file of default-level prices loaded (and
	// upserted) by New. See LoadPricesFile for the format.
	PricesFile string
	// DefaultServicePrice, when set, prices the usage of the service's own
	// served models (see IsServedModel) when no project or default price
	// exists for that model id.
	DefaultServicePrice *TokenPrice
	// IsServedModel reports whether a model id (a key of summary.usage) is one
	// the service serves itself. When nil, a model id is served when it is one
	// of BaseModels, or has the trained-model form entity/project/name or
	// entity/project/name:stepN (an artifact-URI prefix scheme:/// allowed).
	IsServedModel func(modelID string) bool
	// BaseModels lists the base model ids the service serves.
	BaseModels []string
	// MaxBodyBytes caps request bodies (413 above it). The foundation's
	// middleware usually applies a smaller limit first. Default 64 MiB.
	MaxBodyBytes int64
	// MaxObjectBytes caps an object's value (its stored JSON text) on
	// /obj/create (413 above it). Default DefaultMaxObjectBytes (16 MiB).
	MaxObjectBytes int
	// MaxFileBytes caps a file on /file/create (413 above it). Default
	// DefaultMaxFileBytes (32 MiB).
	MaxFileBytes int64
	// MaxTableRows caps a table's rows (413 above it). Default
	// DefaultMaxTableRows (1,000,000).
	MaxTableRows int
	// MaxRowBytes caps a table row (its stored JSON text; 413 above it).
	// Default DefaultMaxRowBytes (1 MiB).
	MaxRowBytes int
	// MaxFeedbackBytes caps a feedback payload (its stored JSON text; 413
	// above it). Default DefaultMaxFeedbackBytes (1 MiB).
	MaxFeedbackBytes int
	// Logger receives server-side errors. Default slog.Default().
	Logger *slog.Logger
	// Now returns the current time (tests). Default time.Now.
	Now func() time.Time
	// Dialect is the SQL dialect of the database: "" or "sqlite" (the default,
	// today's behaviour) or "postgres" (a database/sql DB over pgx's stdlib driver).
	Dialect string
}

// Service is the call store: storage, HTTP handlers and prices.
type Service struct {
	db      *sql.DB
	d       *dialect
	opts    Options
	log     *slog.Logger
	now     func() time.Time
	writeMu sync.Mutex // serialises this package's write transactions
	started time.Time

	priceMu   sync.Mutex // serialises snapshot reloads
	priceSnap atomic.Pointer[priceSnapshot]
	priceGen  atomic.Uint64

	stmtMu sync.Mutex
	stmts  map[string]*sql.Stmt

	projMu   sync.RWMutex
	projects map[string]int64 // "entity/name" -> trace_projects.id (projects are never deleted)

	extra GraphQLField // root fields other packages serve on /graphql (ExtendGraphQL)
}

// New applies the call store's migrations to db, loads Options.PricesFile
// when set, and returns the service.
func New(db *sql.DB, opts Options) (*Service, error) {
	if db == nil {
		return nil, errors.New("trace: nil database")
	}
	d, err := dialectFor(db, opts.Dialect)
	if err != nil {
		return nil, err
	}
	s := &Service{db: db, d: d, opts: opts, log: opts.Logger, now: opts.Now, projects: map[string]int64{}, stmts: map[string]*sql.Stmt{}}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.opts.MaxBodyBytes <= 0 {
		s.opts.MaxBodyBytes = 64 << 20
	}
	s.started = s.now().UTC()
	ctx := context.Background()
	if err := migrate(ctx, db, d); err != nil {
		return nil, err
	}
	if opts.PricesFile != "" {
		if _, err := s.LoadPricesFile(ctx, opts.PricesFile); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Migrate applies the call store's embedded SQL migrations that are not yet
// recorded in trace_schema_migrations, in db's dialect (PostgreSQL for pgx's
// database/sql driver, else SQLite). It is safe to call concurrently from
// several processes: on SQLite each migration runs in a write transaction; on
// PostgreSQL the whole run holds an advisory lock, so nodes starting
// together apply each migration once.
func Migrate(ctx context.Context, db *sql.DB) error {
	d, err := dialectFor(db, "")
	if err != nil {
		return err
	}
	return migrate(ctx, db, d)
}

// migrationLockKey is the PostgreSQL advisory lock held while the call
// store migrates (an arbitrary constant: "flywheel trace" in ASCII, 8 bytes).
const migrationLockKey int64 = 0x666c797472616365

func migrate(ctx context.Context, db *sql.DB, d *dialect) error {
	return sqlmigrate.Set{
		Name: "trace", Files: migrationFS, Dir: "migrations/" + d.name, LockKey: migrationLockKey,
		Ledger: `CREATE TABLE IF NOT EXISTS trace_schema_migrations (
			version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)`,
		Record: func(file string) (string, []any, error) {
			v, err := strconv.Atoi(strings.SplitN(file, "_", 2)[0])
			if err != nil {
				return "", nil, errors.New("bad name: want NNN_name.sql")
			}
			return `INSERT INTO trace_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)
				ON CONFLICT (version) DO NOTHING`, []any{v, file, time.Now().UTC().Format(time.RFC3339Nano)}, nil
		},
	}.Apply(ctx, db, d.postgres)
}

// Register mounts the call-store routes on mux: calls, costs, objects and
// files. Authentication happens before these handlers (httpx.Principal);
// without a principal they answer 401. GET /health and GET /server_info need
// no principal.
func (s *Service) Register(rt *httpx.Routes) {
	rt.Prefix(httpx.CallStore, "/call/", "/calls/", "/cost/", "/obj/", "/objs/", "/file/", "/table/", "/feedback/", "/refs/")
	mux := rt.In(httpx.CallStore)
	mux.HandleFunc("POST /call/read", s.handle(s.handleRead))
	mux.HandleFunc("POST /call/start", s.handle(s.handleStart))
	mux.HandleFunc("POST /call/end", s.handle(s.handleEnd))
	mux.HandleFunc("POST /call/upsert_batch", s.handle(s.handleUpsertBatch))
	mux.HandleFunc("POST /call/update", s.handle(s.handleUpdate))
	mux.HandleFunc("POST /calls/delete", s.handle(s.handleDelete))
	mux.HandleFunc("POST /calls/query", s.handle(s.handleQuery))
	mux.HandleFunc("POST /calls/stream_query", s.handle(s.handleStreamQuery))
	mux.HandleFunc("GET /calls/projects", s.handle(s.handleProjects))
	mux.HandleFunc("POST /cost/create", s.handle(s.handleCostCreate))
	mux.HandleFunc("POST /cost/query", s.handle(s.handleCostQuery))
	mux.HandleFunc("POST /cost/purge", s.handle(s.handleCostPurge))
	mux.HandleFunc("POST /obj/create", s.handle(s.handleObjCreate))
	mux.HandleFunc("POST /obj/read", s.handle(s.handleObjRead))
	mux.HandleFunc("POST /objs/query", s.handle(s.handleObjsQuery))
	mux.HandleFunc("POST /calls/query_stats", s.handle(s.handleQueryStats))
	mux.HandleFunc("POST /obj/delete", s.handle(s.handleObjDelete))
	mux.HandleFunc("POST /refs/read_batch", s.handle(s.handleRefsReadBatch))
	mux.HandleFunc("POST /table/create", s.handle(s.handleTableCreate))
	mux.HandleFunc("POST /table/create_from_digests", s.handle(s.handleTableCreateFromDigests))
	mux.HandleFunc("POST /table/update", s.handle(s.handleTableUpdate))
	mux.HandleFunc("POST /table/query", s.handle(s.handleTableQuery))
	mux.HandleFunc("POST /table/query_stats", s.handle(s.handleTableQueryStats))
	mux.HandleFunc("POST /table/query_stats_batch", s.handle(s.handleTableQueryStatsBatch))
	mux.HandleFunc("POST /feedback/create", s.handle(s.handleFeedbackCreate))
	mux.HandleFunc("POST /feedback/batch/create", s.handle(s.handleFeedbackBatchCreate))
	mux.HandleFunc("POST /feedback/query", s.handle(s.handleFeedbackQuery))
	mux.HandleFunc("POST /feedback/purge", s.handle(s.handleFeedbackPurge))
	mux.HandleFunc("POST /graphql", s.handle(s.handleGraphQL))
	mux.HandleFunc("POST /otel/v1/traces", s.handle(s.handleOtelExport))
	// Weave's Python SDK (0.52+) writes calls here.
	mux.HandleFunc("POST /v2/{entity}/{project}/calls/complete", s.handle(s.handleCallsComplete))
	mux.HandleFunc("POST /v2/{entity}/{project}/call/start", s.handle(s.handleStart))
	mux.HandleFunc("POST /v2/{entity}/{project}/call/end", s.handle(s.handleEnd))
	mux.HandleFunc("POST /file/create", s.handleFileCreate)
	mux.HandleFunc("POST /file/content", s.handle(s.handleFileContent))
	// The Weave SDKs probe these before logging; they need no key.
	public := rt.In(httpx.Public)
	public.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		writeRaw(w, http.StatusOK, "application/json", []byte("{}\n"))
	})
	public.HandleFunc("GET /server_info", func(w http.ResponseWriter, r *http.Request) {
		writeRaw(w, http.StatusOK, "application/json", []byte(`{"min_required_weave_python_version": "0.0.0", "trace_server_version": "flywheel"}`+"\n"))
	})
}

type handlerFunc func(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error

// handle does what every route shares: the principal (401), the body read
// under the size cap (413), and the {"reason"} error envelope.
func (s *Service) handle(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, err := httpx.Principal(r)
		if err != nil {
			httpx.WriteReason(w, err)
			return
		}
		body, err := readBody(w, r, s.opts.MaxBodyBytes)
		if err != nil {
			s.writeErr(w, r, err)
			return
		}
		if err := h(w, r, p, body); err != nil {
			s.writeErr(w, r, err)
		}
	}
}

var errHeadersSent = errors.New("response already started")

func (s *Service) writeErr(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errHeadersSent) {
		s.log.Error("trace: error after the response started", "path", r.URL.Path, "err", err)
		return
	}
	e := httpx.AsError(err)
	if e.Status >= 500 {
		s.log.Error("trace: request failed", "path", r.URL.Path, "err", err)
	}
	httpx.WriteReason(w, e)
}

func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, &httpx.Error{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("request body exceeds the limit of %d bytes", limit), Code: "body_too_large"}
	}
	rd := http.MaxBytesReader(w, r.Body, limit)
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength))
	}
	if _, err := buf.ReadFrom(rd); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, httpx.AsError(err)
		}
		return nil, httpx.Errorf(http.StatusBadRequest, "could not read the request body")
	}
	return buf.Bytes(), nil
}

// decodeAt decodes data into v; errors are 400s whose reason names the JSON
// path, prefixed with prefix ("start", "batch[3].req").
func decodeAt(data []byte, v any, prefix string) error {
	if len(bytes.TrimSpace(data)) == 0 {
		if prefix == "" {
			return httpx.Invalid("", "invalid_json", "request body is empty; expected a JSON object")
		}
		return httpx.Invalid(prefix, "invalid_type", "expected an object")
	}
	err := json.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		path := joinPath(prefix, te.Field)
		if path == "" {
			return httpx.Invalid("", "invalid_type", "request body must be a JSON object, got %s", te.Value)
		}
		return httpx.Invalid(path, "invalid_type", "expected %s, got %s", httpx.JSONKind(te.Type.Kind().String()), te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return httpx.Invalid("", "invalid_json", "malformed JSON at byte %d: %s", se.Offset, se.Error())
	}
	return httpx.Invalid(prefix, "invalid_json", "malformed JSON: %s", err.Error())
}

func joinPath(prefix, field string) string {
	switch {
	case prefix == "":
		return field
	case field == "":
		return prefix
	}
	return prefix + "." + field
}

// splitProjectID validates an external project id "entity/project".
func splitProjectID(projectID, param string) (entity, name string, err error) {
	if projectID == "" {
		return "", "", httpx.Invalid(param, "missing_field", "required: a project id of the form entity/project")
	}
	i := strings.IndexByte(projectID, '/')
	if i <= 0 || i == len(projectID)-1 || strings.IndexByte(projectID[i+1:], '/') >= 0 || len(projectID) > 512 ||
		strings.TrimSpace(projectID) != projectID {
		return "", "", httpx.Invalid(param, "invalid_value", "invalid project id %q: expected entity/project", projectID)
	}
	if err := names.Check(projectID); err != nil {
		return "", "", httpx.Invalid(param, "invalid_value", "%s %s", param, err.Error())
	}
	return projectID[:i], projectID[i+1:], nil
}

// authorize validates projectID and checks that p is a member of its entity
// (403 otherwise).
func authorize(p *auth.Principal, projectID, param string) (entity, name string, err error) {
	entity, name, err = splitProjectID(projectID, param)
	if err != nil {
		return "", "", err
	}
	if !p.Member(entity) {
		return "", "", httpx.Errorf(http.StatusForbidden, "you are not a member of entity %q", entity)
	}
	return entity, name, nil
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// lookupProject returns the internal id of entity/name, or found=false.
func (s *Service) lookupProject(ctx context.Context, q querier, entity, name string) (int64, bool, error) {
	key := entity + "/" + name
	s.projMu.RLock()
	id, ok := s.projects[key]
	s.projMu.RUnlock()
	if ok {
		return id, true, nil
	}
	err := q.QueryRowContext(ctx, s.d.sql(`SELECT id FROM trace_projects WHERE entity = ? AND name = ?`), entity, name).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	s.projMu.Lock()
	s.projects[key] = id
	s.projMu.Unlock()
	return id, true, nil
}

// ensureProject returns the id of entity/name, creating the project.
func (s *Service) ensureProject(ctx context.Context, tx *sql.Tx, entity, name string) (int64, error) {
	key := entity + "/" + name
	s.projMu.RLock()
	id, ok := s.projects[key]
	s.projMu.RUnlock()
	if ok {
		return id, nil
	}
	if _, err := tx.ExecContext(ctx, s.d.sql(`INSERT INTO trace_projects (entity, name, created_at) VALUES (?, ?, ?) ON CONFLICT (entity, name) DO NOTHING`),
		entity, name, s.now().UnixMicro()); err != nil {
		return 0, err
	}
	if err := tx.QueryRowContext(ctx, s.d.sql(`SELECT id FROM trace_projects WHERE entity = ? AND name = ?`), entity, name).Scan(&id); err != nil {
		return 0, err
	}
	// cached only after commit by the caller (see rememberProjects)
	return id, nil
}

func (s *Service) rememberProject(entity, name string, id int64) {
	s.projMu.Lock()
	s.projects[entity+"/"+name] = id
	s.projMu.Unlock()
}

// Time handling: times are stored as Unix microseconds and written as RFC
// 3339 UTC with exactly six fractional digits.

const timeLayout = "2006-01-02T15:04:05.000000Z"

func formatTime(us int64) string {
	return time.UnixMicro(us).UTC().Format(timeLayout)
}

func appendTime(b []byte, us int64) []byte {
	b = append(b, '"')
	b = time.UnixMicro(us).UTC().AppendFormat(b, timeLayout)
	return append(b, '"')
}

// parseTime accepts RFC 3339 (any offset, any fraction) and the offset-less
// ISO 8601 form Python's datetime.isoformat() writes for naive datetimes
// (taken as UTC); 'T' or ' ' between date and time.
func parseTime(s string) (int64, bool) {
	if len(s) > 10 && s[10] == ' ' {
		s = s[:10] + "T" + s[11:]
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UnixMicro(), true
	}
	for _, layout := range []string{"2006-01-02T15:04:05.999999999", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t.UnixMicro(), true
		}
	}
	return 0, false
}

// ParseTime parses a time as the call store's API accepts one (RFC 3339, or
// ISO 8601 without an offset, taken as UTC), to microseconds.
func ParseTime(s string) (time.Time, bool) {
	us, ok := parseTime(s)
	return time.UnixMicro(us), ok
}

// prepared returns a statement prepared once on the pool for q.
func (s *Service) prepared(q string) (*sql.Stmt, error) {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	if st, ok := s.stmts[q]; ok {
		return st, nil
	}
	st, err := s.db.PrepareContext(context.Background(), s.d.sql(q))
	if err != nil {
		return nil, err
	}
	s.stmts[q] = st
	return st, nil
}

// Close releases the prepared statements. The database stays open.
func (s *Service) Close() error {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	for q, st := range s.stmts {
		st.Close()
		delete(s.stmts, q)
	}
	return nil
}
