package trace

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/jackc/pgx/v5/pgtype"

	"flywheel/internal/auth"
	"flywheel/internal/httpx"
	"flywheel/internal/jsonlex"
)

// MaxDeleteIDs is the most call ids one /calls/delete may name (413 above).
const MaxDeleteIDs = 1000

// Wire shapes of the write requests. Pointers tell absent/null from values.

type startReq struct {
	ProjectID       string          `json:"project_id"`
	ID              *string         `json:"id"`
	TraceID         *string         `json:"trace_id"`
	ParentID        *string         `json:"parent_id"`
	ThreadID        *string         `json:"thread_id"`
	TurnID          *string         `json:"turn_id"`
	OpName          *string         `json:"op_name"`
	DisplayName     *string         `json:"display_name"`
	StartedAt       *string         `json:"started_at"`
	Attributes      json.RawMessage `json:"attributes"`
	Inputs          json.RawMessage `json:"inputs"`
	PlatformRunID   *string         `json:"platform_run_id"`
	PlatformRunStep *int64          `json:"platform_run_step"`
	// platform_user_id is deliberately not read: the server sets it.

	path string // JSON path of the object the fields were read from
}

type endReq struct {
	ProjectID          string          `json:"project_id"`
	ID                 *string         `json:"id"`
	EndedAt            *string         `json:"ended_at"`
	Exception          *string         `json:"exception"`
	Output             json.RawMessage `json:"output"`
	Summary            json.RawMessage `json:"summary"`
	PlatformRunStepEnd *int64          `json:"platform_run_step_end"`

	path string // JSON path of the object the fields were read from
}

// writeOp is one validated write, ready for the database.
type writeOp struct {
	kind         byte // 's' start, 'e' end, 'u' update
	entity, name string
	id           string

	// start
	traceID                 string
	parentID, threadID      *string
	turnID, opName, display *string
	startedAt               int64
	attributes, inputs      []byte
	userID                  string
	runID                   *string
	runStep                 *int64

	// end
	endedAt     int64
	exception   *string
	output      []byte
	summary     []byte
	runStepEnd  *int64
	statusError bool // summary.status_counts.error > 0 (the trace_calls.status_error column)
}

// checkText refuses a string that a text column cannot hold on every
// database: PostgreSQL's text is valid UTF-8 without NUL characters (a
// \u0000 escape, or a lone surrogate \ud800, decodes to neither), so the
// call store answers 400 naming the field on SQLite too.
func checkText(v *string, path string) error {
	if v == nil {
		return nil
	}
	if strings.IndexByte(*v, 0) >= 0 {
		return httpx.Invalid(path, "invalid_value", "must not contain NUL characters (\\u0000)")
	}
	if !utf8.ValidString(*v) {
		return httpx.Invalid(path, "invalid_value", "must be valid Unicode text (no lone surrogates or invalid UTF-8)")
	}
	return nil
}

func optID(v *string, path string) error {
	if v != nil && !validID(*v) {
		return httpx.Invalid(path, "invalid_id", "invalid id %q: expected a UUID or an OpenTelemetry hex id (32 or 16 hex digits)", *v)
	}
	return nil
}

// checkObject checks an already canonical JSON object field.
func checkObject(raw []byte, path string, required bool) ([]byte, error) {
	switch jsonKindOf(raw) {
	case 'o':
		return raw, nil
	case 0, 'z':
		if required {
			return nil, httpx.Invalid(path, "missing_field", "required: a JSON object")
		}
		return nil, nil
	}
	return nil, httpx.Invalid(path, "invalid_type", "expected an object")
}

// canonicalObject canonicalises a required JSON object field.
func canonicalObject(raw json.RawMessage, path string, required bool) ([]byte, error) {
	k := jsonKindOf(raw)
	if k == 0 || k == 'z' {
		if required {
			return nil, httpx.Invalid(path, "missing_field", "required: a JSON object")
		}
		return nil, nil
	}
	if k != 'o' {
		return nil, httpx.Invalid(path, "invalid_type", "expected an object")
	}
	out, err := Canonicalize(raw)
	if err != nil {
		return nil, httpx.Invalid(path, "invalid_json", "%s", err.Error())
	}
	return out, nil
}

// parseStart validates a decoded start request (JSON fields canonical).
func (s *Service) parseStart(p *auth.Principal, r *startReq, prefix string) (*writeOp, error) {
	entity, name, err := authorize(p, r.ProjectID, joinPath(prefix, "project_id"))
	if err != nil {
		return nil, err
	}
	op := &writeOp{kind: 's', entity: entity, name: name, userID: p.UserID}
	for _, f := range []struct {
		v    *string
		name string
	}{{r.ID, "id"}, {r.TraceID, "trace_id"}, {r.ParentID, "parent_id"}} {
		if err := optID(f.v, joinPath(prefix, f.name)); err != nil {
			return nil, err
		}
	}
	if r.OpName == nil || *r.OpName == "" {
		return nil, httpx.Invalid(joinPath(prefix, "op_name"), "missing_field", "required: a non-empty string")
	}
	if r.StartedAt == nil {
		return nil, httpx.Invalid(joinPath(prefix, "started_at"), "missing_field", "required: an RFC 3339 timestamp")
	}
	ts, ok := parseTime(*r.StartedAt)
	if !ok {
		return nil, httpx.Invalid(joinPath(prefix, "started_at"), "invalid_value", "invalid timestamp %q: expected RFC 3339", *r.StartedAt)
	}
	if op.attributes, err = checkObject(r.Attributes, joinPath(prefix, "attributes"), true); err != nil {
		return nil, err
	}
	if op.inputs, err = checkObject(r.Inputs, joinPath(prefix, "inputs"), true); err != nil {
		return nil, err
	}
	if r.ID != nil {
		op.id = *r.ID
	} else {
		op.id = NewUUIDv7()
	}
	if r.TraceID != nil {
		op.traceID = *r.TraceID
	} else {
		op.traceID = NewUUIDv7()
	}
	for _, f := range []struct {
		v    *string
		name string
	}{{r.OpName, "op_name"}, {r.DisplayName, "display_name"}, {r.ThreadID, "thread_id"}, {r.TurnID, "turn_id"}, {r.PlatformRunID, "platform_run_id"}} {
		if err := checkText(f.v, joinPath(prefix, f.name)); err != nil {
			return nil, err
		}
	}
	op.parentID, op.threadID, op.turnID = r.ParentID, r.ThreadID, r.TurnID
	op.opName, op.display = r.OpName, r.DisplayName
	op.startedAt = ts
	op.runID, op.runStep = r.PlatformRunID, r.PlatformRunStep
	return op, nil
}

// parseEnd validates a decoded end request (JSON fields canonical).
func (s *Service) parseEnd(p *auth.Principal, r *endReq, prefix string) (*writeOp, error) {
	entity, name, err := authorize(p, r.ProjectID, joinPath(prefix, "project_id"))
	if err != nil {
		return nil, err
	}
	if r.ID == nil {
		return nil, httpx.Invalid(joinPath(prefix, "id"), "missing_field", "required: the id of the call to end")
	}
	if err := optID(r.ID, joinPath(prefix, "id")); err != nil {
		return nil, err
	}
	if r.EndedAt == nil {
		return nil, httpx.Invalid(joinPath(prefix, "ended_at"), "missing_field", "required: an RFC 3339 timestamp")
	}
	ts, ok := parseTime(*r.EndedAt)
	if !ok {
		return nil, httpx.Invalid(joinPath(prefix, "ended_at"), "invalid_value", "invalid timestamp %q: expected RFC 3339", *r.EndedAt)
	}
	if err := checkText(r.Exception, joinPath(prefix, "exception")); err != nil {
		return nil, err
	}
	op := &writeOp{kind: 'e', entity: entity, name: name, id: *r.ID, endedAt: ts, exception: r.Exception, runStepEnd: r.PlatformRunStepEnd}
	if op.summary, err = checkObject(r.Summary, joinPath(prefix, "summary"), true); err != nil {
		return nil, err
	}
	// An end always stores its output; absent is the same as null ("null", 4 bytes).
	op.output = r.Output
	if len(op.output) == 0 {
		op.output = []byte("null")
	}
	op.statusError = summaryHasError(op.summary)
	return op, nil
}

// callUpsert is one of the four row writes of trace_calls (a start, an end,
// both together, a display-name update): the columns it sets, with their
// PostgreSQL types, and what it replaces when the row exists. Both dialects
// run the same ON CONFLICT clause; SQLite inserts row by row through a
// prepared statement, PostgreSQL inserts a whole batch of rows of one kind
// in one statement from arrays (unnest), one round trip per batch.
type callUpsert struct {
	sqlite, postgres string
	types            []string // per column: "bigint" or "text"
}

func newCallUpsert(cols, set string) *callUpsert {
	u := &callUpsert{}
	var names, ph, arrays []string
	for i, c := range strings.Split(cols, ",") {
		f := strings.Fields(c)
		names = append(names, f[0])
		u.types = append(u.types, f[1])
		ph = append(ph, "?")
		arrays = append(arrays, fmt.Sprintf("$%d::%s[]", i+1, f[1]))
	}
	ins := "INSERT INTO trace_calls (" + strings.Join(names, ", ") + ") "
	conflict := " ON CONFLICT (project, id) DO UPDATE SET " + set
	u.sqlite = ins + "VALUES (" + strings.Join(ph, ", ") + ")" + conflict
	u.postgres = ins + "SELECT * FROM unnest(" + strings.Join(arrays, ", ") + ")" + conflict
	return u
}

const (
	startCols = `project bigint, id text, op_name text, display_name text, trace_id text, parent_id text, thread_id text,
		turn_id text, started_at bigint, attributes text, inputs text, platform_user_id text, platform_run_id text,
		platform_run_step bigint, start_size bigint`
	endCols = `ended_at bigint, exception text, output text, summary text, platform_run_step_end bigint, end_size bigint,
		status_error bigint`
	startSet = `op_name = excluded.op_name,
		display_name = COALESCE(excluded.display_name, trace_calls.display_name), trace_id = excluded.trace_id,
		parent_id = excluded.parent_id, thread_id = excluded.thread_id, turn_id = excluded.turn_id,
		started_at = excluded.started_at, attributes = excluded.attributes, inputs = excluded.inputs,
		platform_user_id = excluded.platform_user_id, platform_run_id = excluded.platform_run_id,
		platform_run_step = excluded.platform_run_step, start_size = excluded.start_size`
	endSet = `ended_at = excluded.ended_at, exception = excluded.exception,
		output = excluded.output, summary = excluded.summary, platform_run_step_end = excluded.platform_run_step_end,
		end_size = excluded.end_size, status_error = excluded.status_error`
)

// The four writes, by writeOp kind ('b': a start and an end of one call).
var callUpserts = map[byte]*callUpsert{
	's': newCallUpsert(startCols, startSet),
	'e': newCallUpsert("project bigint, id text, "+endCols, endSet),
	'b': newCallUpsert(startCols+", "+endCols, startSet+", "+endSet),
	'u': newCallUpsert("project bigint, id text, display_name text", "display_name = excluded.display_name"),
}

func startArgs(args []any, proj int64, op *writeOp) []any {
	return append(args, proj, op.id, *op.opName, nullStr(op.display), op.traceID,
		nullStr(op.parentID), nullStr(op.threadID), nullStr(op.turnID), op.startedAt,
		bytesStr(op.attributes), bytesStr(op.inputs), op.userID, nullStr(op.runID), nullInt(op.runStep),
		int64(len(op.attributes)+len(op.inputs)))
}

func endArgs(args []any, op *writeOp) []any {
	statusError := int64(0)
	if op.statusError {
		statusError = 1
	}
	return append(args, op.endedAt, nullStr(op.exception), bytesStr(op.output),
		bytesStr(op.summary), nullInt(op.runStepEnd), int64(len(op.output)+len(op.summary)), statusError)
}

// rowWrite is one row write of a batch: kind as in callUpserts, layer = how
// many writes of the same call precede it in the batch.
type rowWrite struct {
	kind  byte
	layer int
	proj  int64
	id    string
	args  []any
}

// bytesStr views b as a string without copying; b is never modified after
// it is handed to the database (which copies it when binding).
func bytesStr(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func nullStr(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

func nullInt(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// apply writes ops in one transaction: all or nothing.
func (s *Service) apply(ctx context.Context, ops []*writeOp) error {
	if len(ops) == 0 {
		return nil
	}
	type pk struct{ e, n string }
	var projects map[pk]int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		projects = map[pk]int64{}
		// Resolve (and create) projects first: the first statement is a
		// write, so a SQLite transaction holds the write lock from the start.
		for _, op := range ops {
			k := pk{op.entity, op.name}
			if _, ok := projects[k]; ok {
				continue
			}
			id, err := s.ensureProject(ctx, tx, op.entity, op.name)
			if err != nil {
				return err
			}
			projects[k] = id
		}
		writes := planWrites(ops, func(op *writeOp) int64 { return projects[pk{op.entity, op.name}] })
		if s.d.postgres {
			return s.writePostgres(ctx, tx, writes)
		}
		return s.writeSQLite(ctx, tx, writes)
	})
	if err != nil {
		return err
	}
	for k, id := range projects {
		s.rememberProject(k.e, k.n, id)
	}
	return nil
}

// planWrites turns a batch into row writes in an order with the batch's
// effect: a start and an end of the same call (the common case: clients
// flush both together) become one combined write; writes of one call keep
// their order (layer 0, 1, ...); writes of different calls commute, so each
// layer is sorted by kind, then by (project, id). Within a layer no call
// appears twice (PostgreSQL's ON CONFLICT may touch a row once per
// statement), and concurrent transactions lock rows in one order.
func planWrites(ops []*writeOp, project func(*writeOp) int64) []rowWrite {
	type ck struct {
		proj int64
		id   string
	}
	type pair struct {
		start, end *writeOp
		n          int
		done       bool
	}
	var pairs map[ck]*pair
	if len(ops) > 1 {
		pairs = make(map[ck]*pair, len(ops))
		for _, op := range ops {
			k := ck{project(op), op.id}
			pr := pairs[k]
			if pr == nil {
				pr = &pair{}
				pairs[k] = pr
			}
			pr.n++
			switch op.kind {
			case 's':
				pr.start = op
			case 'e':
				pr.end = op
			}
		}
	}
	writes := make([]rowWrite, 0, len(ops))
	var layers map[ck]int
	for _, op := range ops {
		proj := project(op)
		w := rowWrite{kind: op.kind, proj: proj, id: op.id}
		if pairs != nil {
			pr := pairs[ck{proj, op.id}]
			if pr.n == 2 && pr.start != nil && pr.end != nil {
				if pr.done { // written with its partner
					continue
				}
				pr.done = true
				w.kind = 'b'
				w.args = endArgs(startArgs(make([]any, 0, 22), proj, pr.start), pr.end)
				writes = append(writes, w)
				continue
			}
			if pr.n > 1 {
				if layers == nil {
					layers = map[ck]int{}
				}
				k := ck{proj, op.id}
				w.layer = layers[k]
				layers[k]++
			}
		}
		switch op.kind {
		case 's':
			w.args = startArgs(make([]any, 0, 15), proj, op)
		case 'e':
			w.args = endArgs(append(make([]any, 0, 9), proj, op.id), op)
		case 'u':
			w.args = []any{proj, op.id, nullStr(op.display)}
		}
		writes = append(writes, w)
	}
	sort.SliceStable(writes, func(i, j int) bool {
		a, b := &writes[i], &writes[j]
		if a.layer != b.layer {
			return a.layer < b.layer
		}
		if a.kind != b.kind {
			return a.kind < b.kind
		}
		if a.proj != b.proj {
			return a.proj < b.proj
		}
		return a.id < b.id
	})
	return writes
}

// writeSQLite runs the writes row by row through prepared statements.
func (s *Service) writeSQLite(ctx context.Context, tx *sql.Tx, writes []rowWrite) error {
	var stmts [4]*sql.Stmt // by kind, in the order of "beus"
	defer func() {
		for _, st := range stmts {
			if st != nil {
				st.Close()
			}
		}
	}()
	for _, w := range writes {
		i := strings.IndexByte("beus", w.kind)
		if stmts[i] == nil {
			parent, err := s.prepared(callUpserts[w.kind].sqlite)
			if err != nil {
				return err
			}
			stmts[i] = tx.StmtContext(ctx, parent)
		}
		if _, err := stmts[i].ExecContext(ctx, w.args...); err != nil {
			return err
		}
	}
	return nil
}

// pgColumn is column c of the writes as an array parameter: each value
// (a V or nil, SQL NULL) wrapped as a T.
func pgColumn[T, V any](writes []rowWrite, c int, wrap func(V) T) ([]T, error) {
	a := make([]T, len(writes))
	for r := range a {
		switch v := writes[r].args[c].(type) {
		case V:
			a[r] = wrap(v)
		case nil:
		default:
			return nil, fmt.Errorf("trace: column %d of a %c write: %T, want %T", c, writes[r].kind, v, *new(V))
		}
	}
	return a, nil
}

// writePostgres runs each run of writes of one layer and kind as one
// statement over arrays, a column each.
func (s *Service) writePostgres(ctx context.Context, tx *sql.Tx, writes []rowWrite) error {
	for i := 0; i < len(writes); {
		j := i + 1
		for j < len(writes) && writes[j].layer == writes[i].layer && writes[j].kind == writes[i].kind {
			j++
		}
		u := callUpserts[writes[i].kind]
		cols := make([]any, len(u.types))
		for c, typ := range u.types {
			var err error
			if typ == "bigint" {
				cols[c], err = pgColumn(writes[i:j], c, func(v int64) pgtype.Int8 { return pgtype.Int8{Int64: v, Valid: true} })
			} else {
				cols[c], err = pgColumn(writes[i:j], c, func(v string) pgtype.Text { return pgtype.Text{String: v, Valid: true} })
			}
			if err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, u.postgres, cols...); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// decodeOne reads {"<key>": {...}} (the body of /call/start and /call/end)
// and hands the inner object to fn.
func decodeOne(body []byte, key string, fn func(d *dec) error) error {
	d := newDec(body)
	if err := d.begin(); err != nil {
		return err
	}
	seen := false
	err := d.object("", func(k string) error {
		if k != key || d.null() {
			return d.skip()
		}
		seen = true
		return fn(d)
	})
	if err != nil {
		return err
	}
	if err := d.finish(); err != nil {
		return err
	}
	if !seen {
		return httpx.Invalid(key, "missing_field", "required: an object")
	}
	return nil
}

func (s *Service) handleStart(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	var op *writeOp
	err := decodeOne(body, "start", func(d *dec) error {
		req, err := d.decodeStartReq("start", false)
		if err != nil {
			return err
		}
		op, err = s.parseStart(p, req, "start")
		return err
	})
	if err != nil {
		return err
	}
	if err := s.apply(r.Context(), []*writeOp{op}); err != nil {
		return err
	}
	buf := append([]byte(`{"id": `), appendPyString(nil, op.id)...)
	buf = append(buf, `, "trace_id": `...)
	buf = appendPyString(buf, op.traceID)
	writeRaw(w, http.StatusOK, "application/json", append(buf, "}\n"...))
	return nil
}

func (s *Service) handleEnd(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	var op *writeOp
	err := decodeOne(body, "end", func(d *dec) error {
		req, err := d.decodeEndReq("end", false)
		if err != nil {
			return err
		}
		op, err = s.parseEnd(p, req, "end")
		return err
	})
	if err != nil {
		return err
	}
	if err := s.apply(r.Context(), []*writeOp{op}); err != nil {
		return err
	}
	writeRaw(w, http.StatusOK, "application/json", []byte("{}\n"))
	return nil
}

func writeRaw(w http.ResponseWriter, status int, ctype string, b []byte) {
	w.Header().Set("Content-Type", ctype)
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func (s *Service) handleUpsertBatch(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	d := newDec(body)
	if err := d.begin(); err != nil {
		return err
	}
	var ops []*writeOp
	seen := false
	parseItem := func(sub *dec, mode, prefix string) (*writeOp, error) {
		if sub.peek() != '{' {
			if err := sub.checkValue(); err != nil {
				return nil, err
			}
			return nil, sub.typeErr(prefix, "an object")
		}
		if mode == "start" {
			req, err := sub.decodeStartReq(prefix, true)
			if err != nil {
				return nil, err
			}
			return s.parseStart(p, req, req.path)
		}
		req, err := sub.decodeEndReq(prefix, true)
		if err != nil {
			return nil, err
		}
		return s.parseEnd(p, req, req.path)
	}
	err := d.object("", func(k string) error {
		if k != "batch" {
			return d.skip()
		}
		seen = true
		return d.array("batch", func(i int) error {
			prefix := string(jsonlex.Path("batch").Index(i))
			var mode *string
			var op *writeOp
			var pending []byte // req seen before mode
			err := d.object(prefix, func(k string) error {
				switch k {
				case "mode":
					var err error
					if mode, err = d.optString(prefix + ".mode"); err != nil {
						return err
					}
					if mode != nil && *mode != "start" && *mode != "end" {
						return httpx.Invalid(prefix+".mode", "invalid_value", `expected "start" or "end", got %q`, *mode)
					}
				case "req":
					if mode == nil {
						st := d.c.Pos
						if err := d.skip(); err != nil {
							return err
						}
						pending = d.c.Data[st:d.c.Pos]
						return nil
					}
					var err error
					op, err = parseItem(d, *mode, prefix+".req")
					return err
				default:
					return d.skip()
				}
				return nil
			})
			if err != nil {
				return err
			}
			if mode == nil {
				return httpx.Invalid(prefix+".mode", "missing_field", `required: "start" or "end"`)
			}
			if op == nil && pending != nil {
				sub := newDec(pending)
				if op, err = parseItem(sub, *mode, prefix+".req"); err != nil {
					return err
				}
			}
			if op == nil {
				return httpx.Invalid(prefix+".req", "missing_field", "required: an object")
			}
			ops = append(ops, op)
			return nil
		})
	})
	if err != nil {
		return err
	}
	if err := d.finish(); err != nil {
		return err
	}
	if !seen {
		return httpx.Invalid("batch", "missing_field", "required: an array of {mode, req}")
	}
	if err := s.apply(r.Context(), ops); err != nil {
		return err
	}
	buf := make([]byte, 0, 16+len(ops)*96)
	buf = append(buf, `{"res": [`...)
	for i, op := range ops {
		if i > 0 {
			buf = append(buf, ", "...)
		}
		if op.kind == 's' {
			buf = append(buf, `{"id": `...)
			buf = appendPyString(buf, op.id)
			buf = append(buf, `, "trace_id": `...)
			buf = appendPyString(buf, op.traceID)
			buf = append(buf, '}')
		} else {
			buf = append(buf, "{}"...)
		}
	}
	buf = append(buf, "]}\n"...)
	writeRaw(w, http.StatusOK, "application/json", buf)
	return nil
}

func (s *Service) handleUpdate(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	var req struct {
		ProjectID   string  `json:"project_id"`
		CallID      *string `json:"call_id"`
		DisplayName *string `json:"display_name"`
	}
	if err := decodeAt(body, &req, ""); err != nil {
		return err
	}
	entity, name, err := authorize(p, req.ProjectID, "project_id")
	if err != nil {
		return err
	}
	if req.CallID == nil {
		return httpx.Invalid("call_id", "missing_field", "required: the id of the call to update")
	}
	if err := optID(req.CallID, "call_id"); err != nil {
		return err
	}
	if err := checkText(req.DisplayName, "display_name"); err != nil {
		return err
	}
	if req.DisplayName != nil { // null or absent: nothing to update
		op := &writeOp{kind: 'u', entity: entity, name: name, id: *req.CallID, display: req.DisplayName}
		if err := s.apply(r.Context(), []*writeOp{op}); err != nil {
			return err
		}
	}
	writeRaw(w, http.StatusOK, "application/json", []byte("{}\n"))
	return nil
}

func (s *Service) handleDelete(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	var req struct {
		ProjectID string    `json:"project_id"`
		CallIDs   *[]string `json:"call_ids"`
	}
	if err := decodeAt(body, &req, ""); err != nil {
		return err
	}
	entity, name, err := authorize(p, req.ProjectID, "project_id")
	if err != nil {
		return err
	}
	if req.CallIDs == nil {
		return httpx.Invalid("call_ids", "missing_field", "required: an array of call ids")
	}
	ids := *req.CallIDs
	if len(ids) > MaxDeleteIDs {
		return &httpx.Error{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("call_ids: at most %d ids per request, got %d", MaxDeleteIDs, len(ids)), Code: "too_many_ids"}
	}
	for i, id := range ids {
		if err := optID(&id, fmt.Sprintf("call_ids[%d]", i)); err != nil {
			return err
		}
	}
	n, err := s.deleteCalls(r.Context(), entity, name, ids)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]int64{"num_deleted": n})
	return nil
}

// deleteCalls soft-deletes the calls and all their descendants; it returns
// how many calls it newly marked deleted.
func (s *Service) deleteCalls(ctx context.Context, entity, name string, ids []string) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	proj, ok, err := s.lookupProject(ctx, s.db, entity, name)
	if err != nil || !ok {
		return 0, err
	}
	res, err := s.exec(ctx, deleteSQL[s.d.name], proj, s.d.listArg(ids), s.now().UnixMicro())
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// deleteSQL marks calls ?2 of project ?1 and their descendants deleted at ?3.
var deleteSQL = map[string]string{}

func init() {
	for _, d := range []*dialect{sqliteDialect, postgresDialect} {
		deleteSQL[d.name] = `WITH RECURSIVE tree(id) AS (
			SELECT id FROM trace_calls WHERE project = ?1 AND ` + d.inList("id", "?2") + `
			UNION
			SELECT c.id FROM trace_calls c JOIN tree ON c.parent_id = tree.id WHERE c.project = ?1)
		UPDATE trace_calls SET deleted_at = ?3
		WHERE project = ?1 AND deleted_at IS NULL AND id IN (SELECT id FROM tree)`
	}
}

// summaryHasError reports whether a stored summary's status_counts.error
// is a number > 0 (summary.platform.status is then "descendant_error").
func summaryHasError(summary []byte) bool {
	if summary == nil {
		return false
	}
	members, _ := splitObject(summary)
	return statusCountsError(members) > 0
}

// RecordCall records one complete call (start and end together) made on
// behalf of p, e.g. a chat completion served by this service. projectID is
// "entity/project" (created if missing; p must be a member of the entity).
// The call gets a new UUIDv7 id, its trace_id is that id (a root call), and
// platform_user_id is p.UserID. inputs and summary must be JSON objects
// (nil or null = {}); output is any JSON (nil = null); exception "" means
// none. Errors are *httpx.Error values (403 for another entity's project,
// 400 for bad arguments) or wrapped database errors.
func (s *Service) RecordCall(ctx context.Context, p *auth.Principal, projectID, opName string, startedAt, endedAt time.Time,
	inputs, output, summary json.RawMessage, exception string) (callID string, err error) {
	if p == nil {
		return "", httpx.Errorf(http.StatusUnauthorized, "no principal")
	}
	entity, name, err := authorize(p, projectID, "project_id")
	if err != nil {
		return "", err
	}
	if opName == "" {
		return "", httpx.Invalid("op_name", "missing_field", "required: a non-empty string")
	}
	if err := checkText(&opName, "op_name"); err != nil {
		return "", err
	}
	if err := checkText(&exception, "exception"); err != nil {
		return "", err
	}
	if startedAt.IsZero() {
		return "", httpx.Invalid("started_at", "missing_field", "required")
	}
	if endedAt.IsZero() {
		endedAt = startedAt
	}
	if k := jsonKindOf(inputs); k == 0 || k == 'z' {
		inputs = json.RawMessage("{}")
	}
	if k := jsonKindOf(summary); k == 0 || k == 'z' {
		summary = json.RawMessage("{}")
	}
	in, err := canonicalObject(inputs, "inputs", true)
	if err != nil {
		return "", err
	}
	sum, err := canonicalObject(summary, "summary", true)
	if err != nil {
		return "", err
	}
	out := []byte("null")
	if len(output) > 0 {
		if out, err = Canonicalize(output); err != nil {
			return "", httpx.Invalid("output", "invalid_json", "%s", err.Error())
		}
	}
	id := NewUUIDv7()
	name2 := opName
	start := &writeOp{kind: 's', entity: entity, name: name, id: id, traceID: id, opName: &name2,
		startedAt: startedAt.UnixMicro(), attributes: []byte("{}"), inputs: in, userID: p.UserID}
	end := &writeOp{kind: 'e', entity: entity, name: name, id: id, endedAt: endedAt.UnixMicro(), output: out, summary: sum,
		statusError: summaryHasError(sum)}
	if exception != "" {
		end.exception = &exception
	}
	if err := s.apply(ctx, []*writeOp{start, end}); err != nil {
		if errors.Is(err, context.Canceled) {
			return "", err
		}
		return "", fmt.Errorf("trace: record call: %w", err)
	}
	return id, nil
}

// handleCallsComplete serves POST /v2/{entity}/{project}/calls/complete, the
// write path of Weave's Python SDK since 0.52 (use_calls_complete): {"batch":
// [call]} where each call carries its start's and its end's fields together.
// Each is stored as a start and an end in one batch (one transaction); its
// project_id must be the path's project.
func (s *Service) handleCallsComplete(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	pathProject := r.PathValue("entity") + "/" + r.PathValue("project")
	d := newDec(body)
	if err := d.begin(); err != nil {
		return err
	}
	var ops []*writeOp
	seen := false
	err := d.object("", func(k string) error {
		if k != "batch" {
			return d.skip()
		}
		seen = true
		return d.array("batch", func(i int) error {
			prefix := string(jsonlex.Path("batch").Index(i))
			d.ws()
			if d.peek() != '{' {
				if err := d.checkValue(); err != nil {
					return err
				}
				return d.typeErr(prefix, "an object")
			}
			st := d.c.Pos
			if err := d.skip(); err != nil {
				return err
			}
			item := d.c.Data[st:d.c.Pos]
			sreq, err := newDec(item).decodeStartReq(prefix, false)
			if err != nil {
				return err
			}
			if sreq.ProjectID != pathProject {
				return httpx.Invalid(prefix+".project_id", "invalid_value", "the call's project %q is not the path's %q", sreq.ProjectID, pathProject)
			}
			if sreq.ID == nil {
				return httpx.Invalid(prefix+".id", "missing_field", "required: the call's id")
			}
			start, err := s.parseStart(p, sreq, prefix)
			if err != nil {
				return err
			}
			ereq, err := newDec(item).decodeEndReq(prefix, false)
			if err != nil {
				return err
			}
			end, err := s.parseEnd(p, ereq, prefix)
			if err != nil {
				return err
			}
			ops = append(ops, start, end)
			return nil
		})
	})
	if err != nil {
		return err
	}
	if err := d.finish(); err != nil {
		return err
	}
	if !seen {
		return httpx.Invalid("batch", "missing_field", "required: an array of completed calls")
	}
	if err := s.apply(r.Context(), ops); err != nil {
		return err
	}
	writeRaw(w, http.StatusOK, "application/json", []byte("{}\n"))
	return nil
}
