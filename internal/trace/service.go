package trace

import (
	"bytes"
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"flywheel/internal/auth"
	"flywheel/internal/httpx"
	"flywheel/internal/jsonlex"
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
	mux.Route("POST /call/read", withBody(s.handleRead))
	mux.Route("POST /call/start", withBody(s.handleStart))
	mux.Route("POST /call/end", withBody(s.handleEnd))
	mux.Route("POST /call/upsert_batch", withBody(s.handleUpsertBatch))
	mux.Route("POST /call/update", withBody(s.handleUpdate))
	mux.Route("POST /calls/delete", withBody(s.handleDelete))
	mux.Route("POST /calls/query", withBody(s.handleQuery))
	mux.Route("POST /calls/stream_query", withBody(s.handleStreamQuery))
	mux.Route("GET /calls/projects", withBody(s.handleProjects))
	mux.Route("POST /cost/create", withBody(s.handleCostCreate))
	mux.Route("POST /cost/query", withBody(s.handleCostQuery))
	mux.Route("POST /cost/purge", withBody(s.handleCostPurge))
	mux.Route("POST /obj/create", withBody(s.handleObjCreate))
	mux.Route("POST /obj/read", withBody(s.handleObjRead))
	mux.Route("POST /objs/query", withBody(s.handleObjsQuery))
	mux.Route("POST /calls/query_stats", withBody(s.handleQueryStats))
	mux.Route("POST /obj/delete", withBody(s.handleObjDelete))
	mux.Route("POST /refs/read_batch", withBody(s.handleRefsReadBatch))
	mux.Route("POST /table/create", withBody(s.handleTableCreate))
	mux.Route("POST /table/create_from_digests", withBody(s.handleTableCreateFromDigests))
	mux.Route("POST /table/update", withBody(s.handleTableUpdate))
	mux.Route("POST /table/query", withBody(s.handleTableQuery))
	mux.Route("POST /table/query_stats", withBody(s.handleTableQueryStats))
	mux.Route("POST /table/query_stats_batch", withBody(s.handleTableQueryStatsBatch))
	mux.Route("POST /feedback/create", withBody(s.handleFeedbackCreate))
	mux.Route("POST /feedback/batch/create", withBody(s.handleFeedbackBatchCreate))
	mux.Route("POST /feedback/query", withBody(s.handleFeedbackQuery))
	mux.Route("POST /feedback/purge", withBody(s.handleFeedbackPurge))
	mux.Route("POST /graphql", withBody(s.handleGraphQL))
	mux.Route("POST /otel/v1/traces", withBody(s.handleOtelExport))
	// Weave's Python SDK (0.52+) writes calls here.
	mux.Route("POST /v2/{entity}/{project}/calls/complete", withBody(s.handleCallsComplete))
	mux.Route("POST /v2/{entity}/{project}/call/start", withBody(s.handleStart))
	mux.Route("POST /v2/{entity}/{project}/call/end", withBody(s.handleEnd))
	mux.Route("POST /file/create", s.handleFileCreate)
	mux.Route("POST /file/content", withBody(s.handleFileContent))
	// The Weave SDKs probe these before logging; they need no key.
	public := rt.In(httpx.Public)
	public.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		writeRaw(w, http.StatusOK, "application/json", []byte("{}\n"))
	})
	public.HandleFunc("GET /server_info", func(w http.ResponseWriter, r *http.Request) {
		writeRaw(w, http.StatusOK, "application/json", []byte(`{"min_required_weave_python_version": "0.0.0", "trace_server_version": "flywheel"}`+"\n"))
	})
}

// handlerFunc is a call-store handler: it gets the caller and the whole
// request body, which every call-store route but /file/create needs first.
type handlerFunc func(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error

// withBody gives h the caller (401 without one) and the request body (under
// the server's one body limit, 413 above it); its errors are answered by
// the handler adapter in the call store's {"reason"} envelope.
func withBody(h handlerFunc) httpx.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		p, err := httpx.Principal(r)
		if err != nil {
			return err
		}
		body, err := httpx.ReadBody(r, nil)
		if err != nil {
			return err
		}
		return h(w, r, p, body)
	}
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
		return httpx.DecodeMismatch(prefix, data, te)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return httpx.Invalid("", "invalid_json", "malformed JSON at byte %d: %s", se.Offset, se.Error())
	}
	return httpx.Invalid(prefix, "invalid_json", "malformed JSON: %s", err.Error())
}

// joinPath is the JSON path of member field of the object at prefix (the
// object itself when field is empty).
func joinPath(prefix, field string) string {
	if field == "" {
		return prefix
	}
	return string(jsonlex.Path(prefix).Key(field))
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
