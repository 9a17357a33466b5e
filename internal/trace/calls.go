package trace

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unsafe"

	"flywheel/internal/auth"
	"flywheel/internal/httpx"
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
	endedAt    int64
	exception  *string
	output     []byte
	summary    []byte
	runStepEnd *int64
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
	op := &writeOp{kind: 'e', entity: entity, name: name, id: *r.ID, endedAt: ts, exception: r.Exception, runStepEnd: r.PlatformRunStepEnd}
	if op.summary, err = checkObject(r.Summary, joinPath(prefix, "summary"), true); err != nil {
		return nil, err
	}
	// An end always stores its output; absent is the same as null ("null", 4 bytes).
	op.output = r.Output
	if len(op.output) == 0 {
		op.output = []byte("null")
	}
	return op, nil
}

const (
	sqlStart = `INSERT INTO trace_calls (project, id, op_name, display_name, trace_id, parent_id, thread_id, turn_id,
		started_at, attributes, inputs, platform_user_id, platform_run_id, platform_run_step, start_size)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (project, id) DO UPDATE SET op_name = excluded.op_name,
		display_name = COALESCE(excluded.display_name, trace_calls.display_name), trace_id = excluded.trace_id,
		parent_id = excluded.parent_id, thread_id = excluded.thread_id, turn_id = excluded.turn_id,
		started_at = excluded.started_at, attributes = excluded.attributes, inputs = excluded.inputs,
		platform_user_id = excluded.platform_user_id, platform_run_id = excluded.platform_run_id,
		platform_run_step = excluded.platform_run_step, start_size = excluded.start_size`
	sqlEnd = `INSERT INTO trace_calls (project, id, ended_at, exception, output, summary, platform_run_step_end, end_size)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (project, id) DO UPDATE SET ended_at = excluded.ended_at, exception = excluded.exception,
		output = excluded.output, summary = excluded.summary, platform_run_step_end = excluded.platform_run_step_end,
		end_size = excluded.end_size`
	sqlStartEnd = `INSERT INTO trace_calls (project, id, op_name, display_name, trace_id, parent_id, thread_id, turn_id,
		started_at, attributes, inputs, platform_user_id, platform_run_id, platform_run_step, start_size,
		ended_at, exception, output, summary, platform_run_step_end, end_size)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (project, id) DO UPDATE SET op_name = excluded.op_name,
		display_name = COALESCE(excluded.display_name, trace_calls.display_name), trace_id = excluded.trace_id,
		parent_id = excluded.parent_id, thread_id = excluded.thread_id, turn_id = excluded.turn_id,
		started_at = excluded.started_at, attributes = excluded.attributes, inputs = excluded.inputs,
		platform_user_id = excluded.platform_user_id, platform_run_id = excluded.platform_run_id,
		platform_run_step = excluded.platform_run_step, start_size = excluded.start_size,
		ended_at = excluded.ended_at, exception = excluded.exception,
		output = excluded.output, summary = excluded.summary, platform_run_step_end = excluded.platform_run_step_end,
		end_size = excluded.end_size`
	sqlUpdate = `INSERT INTO trace_calls (project, id, display_name) VALUES (?, ?, ?)
	ON CONFLICT (project, id) DO UPDATE SET display_name = excluded.display_name`
)

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
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	type pk struct{ e, n string }
	projects := map[pk]int64{}
	// Resolve (and create) projects first: the first statement is a write, so
	// the transaction holds the write lock from the start.
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
	// A start and an end of the same call in one batch (the common case:
	// clients flush both together) become one combined upsert. Ops on
	// different calls commute; ops on one call keep their order otherwise.
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
			k := ck{projects[pk{op.entity, op.name}], op.id}
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
	stmts := map[string]*sql.Stmt{}
	defer func() {
		for _, st := range stmts {
			st.Close()
		}
	}()
	exec := func(q string, args ...any) error {
		st := stmts[q]
		if st == nil {
			parent, err := s.prepared(q)
			if err != nil {
				return err
			}
			st = tx.StmtContext(ctx, parent)
			stmts[q] = st
		}
		_, err := st.ExecContext(ctx, args...)
		return err
	}
	for _, op := range ops {
		proj := projects[pk{op.entity, op.name}]
		if pairs != nil {
			if pr := pairs[ck{proj, op.id}]; pr.n == 2 && pr.start != nil && pr.end != nil {
				if pr.done { // written with its partner
					continue
				}
				pr.done = true
				st, en := pr.start, pr.end
				if err := exec(sqlStartEnd, proj, st.id, *st.opName, nullStr(st.display), st.traceID,
					nullStr(st.parentID), nullStr(st.threadID), nullStr(st.turnID), st.startedAt,
					bytesStr(st.attributes), bytesStr(st.inputs), st.userID, nullStr(st.runID), nullInt(st.runStep),
					len(st.attributes)+len(st.inputs),
					en.endedAt, nullStr(en.exception), bytesStr(en.output), bytesStr(en.summary), nullInt(en.runStepEnd),
					len(en.output)+len(en.summary)); err != nil {
					return err
				}
				continue
			}
		}
		var err error
		switch op.kind {
		case 's':
			err = exec(sqlStart, proj, op.id, *op.opName, nullStr(op.display), op.traceID,
				nullStr(op.parentID), nullStr(op.threadID), nullStr(op.turnID), op.startedAt,
				bytesStr(op.attributes), bytesStr(op.inputs), op.userID, nullStr(op.runID), nullInt(op.runStep),
				len(op.attributes)+len(op.inputs))
		case 'e':
			err = exec(sqlEnd, proj, op.id, op.endedAt, nullStr(op.exception), bytesStr(op.output),
				bytesStr(op.summary), nullInt(op.runStepEnd), len(op.output)+len(op.summary))
		case 'u':
			err = exec(sqlUpdate, proj, op.id, nullStr(op.display))
		}
		if err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	for k, id := range projects {
		s.rememberProject(k.e, k.n, id)
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
			prefix := "batch[" + strconv.Itoa(i) + "]"
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
						st := d.c.pos
						if err := d.skip(); err != nil {
							return err
						}
						pending = d.c.in[st:d.c.pos]
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
	idsJSON, _ := json.Marshal(ids)
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	res, err := s.db.ExecContext(ctx, `WITH RECURSIVE tree(id) AS (
			SELECT id FROM trace_calls WHERE project = ?1 AND id IN (SELECT value FROM json_each(?2))
			UNION
			SELECT c.id FROM trace_calls c JOIN tree ON c.parent_id = tree.id WHERE c.project = ?1)
		UPDATE trace_calls SET deleted_at = ?3
		WHERE project = ?1 AND deleted_at IS NULL AND id IN (SELECT id FROM tree)`,
		proj, string(idsJSON), s.now().UnixMicro())
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
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
	end := &writeOp{kind: 'e', entity: entity, name: name, id: id, endedAt: endedAt.UnixMicro(), output: out, summary: sum}
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
