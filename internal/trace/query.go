package trace

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"flywheel/internal/auth"
	"flywheel/internal/httpx"
)

type callsFilter struct {
	CallIDs         []string `json:"call_ids"`
	TraceIDs        []string `json:"trace_ids"`
	ParentIDs       []string `json:"parent_ids"`
	OpNames         []string `json:"op_names"`
	ThreadIDs       []string `json:"thread_ids"`
	TurnIDs         []string `json:"turn_ids"`
	TraceRootsOnly  *bool    `json:"trace_roots_only"`
	PlatformUserIDs []string `json:"platform_user_ids"`
	PlatformRunIDs  []string `json:"platform_run_ids"`
	// Extensions (the dashboard's filters): calls started at or after /
	// before a time (RFC 3339), and calls of the given derived statuses
	// (summary.platform.status: success, error, running, descendant_error).
	StartedAfter  *string  `json:"started_after"`
	StartedBefore *string  `json:"started_before"`
	Statuses      []string `json:"statuses"`
}

type queryReq struct {
	ProjectID               string       `json:"project_id"`
	Filter                  *callsFilter `json:"filter"`
	SortBy                  []sortField  `json:"sort_by"`
	Limit                   *int64       `json:"limit"`
	Offset                  *int64       `json:"offset"`
	IncludeCosts            *bool        `json:"include_costs"`
	IncludeStorageSize      *bool        `json:"include_storage_size"`
	IncludeTotalStorageSize *bool        `json:"include_total_storage_size"`
	// Query is Weave's expression language over calls, which flywheel does
	// not serve: a query is a 400 rather than an answer that ignores it.
	Query json.RawMessage `json:"query"`
}

// refuseCallsQuery is the 400 for a /calls/* request with a query expression.
func refuseCallsQuery(q json.RawMessage) error {
	if len(q) == 0 || string(q) == "null" {
		return nil
	}
	return httpx.Invalid("query", "unsupported", "query expressions over calls are not served by flywheel; use filter (call_ids, trace_ids, parent_ids, op_names, ...)")
}

// sortColumns maps the sortable fields to SQL expressions over trace_calls c.
var sortColumns = map[string]string{
	"id": "c.id", "op_name": "c.op_name", "display_name": "c.display_name", "trace_id": "c.trace_id",
	"parent_id": "c.parent_id", "thread_id": "c.thread_id", "turn_id": "c.turn_id",
	"started_at": "c.started_at", "ended_at": "c.ended_at", "exception": "c.exception",
	"platform_user_id": "c.platform_user_id", "platform_run_id": "c.platform_run_id",
	"platform_run_step": "c.platform_run_step", "platform_run_step_end": "c.platform_run_step_end",
	"storage_size_bytes":          "(c.start_size + c.end_size)",
	"summary.platform.latency_ms": "(c.ended_at - c.started_at)",
	"summary.platform.trace_name": "COALESCE(NULLIF(c.display_name, ''), c.op_name)",
	// the status as statusOf derives it, numbered in the names' order:
	// descendant_error, error, running, success
	"summary.platform.status": `(CASE WHEN c.exception IS NOT NULL AND c.exception != '' THEN 1
		WHEN c.ended_at IS NULL THEN 2 WHEN c.status_error != 0 THEN 0 ELSE 3 END)`,
}

// statusCodes are the numbers sortColumns["summary.platform.status"] gives
// the statuses statusOf names.
var statusCodes = map[string]string{"descendant_error": "0", "error": "1", "running": "2", "success": "3"}

// limitOffset validates limit and offset; no limit is the largest int64
// (SQLite's LIMIT -1 is an error on PostgreSQL).
func limitOffset(limit, offset *int64) (int64, int64, error) {
	lim, off := int64(math.MaxInt64), int64(0)
	if limit != nil {
		if *limit < 0 {
			return 0, 0, httpx.Invalid("limit", "invalid_value", "must be >= 0")
		}
		lim = *limit
	}
	if offset != nil {
		if *offset < 0 {
			return 0, 0, httpx.Invalid("offset", "invalid_value", "must be >= 0")
		}
		off = *offset
	}
	return lim, off, nil
}

// buildQuery turns a query request into SQL over trace_calls c, in d's form.
func buildQuery(d *dialect, req *queryReq, proj int64, inc includes) (string, []any, error) {
	if err := refuseCallsQuery(req.Query); err != nil {
		return "", nil, err
	}
	var sb strings.Builder
	sb.WriteString("SELECT ")
	sb.WriteString(callColumns)
	if inc.Total {
		sb.WriteString(", ")
		sb.WriteString(totalExpr)
	}
	sb.WriteString(" FROM trace_calls c WHERE c.project = ? AND c.deleted_at IS NULL AND c.started_at IS NOT NULL")
	args := []any{proj}
	in := func(col string, vals []string) {
		if vals == nil {
			return
		}
		sb.WriteString(" AND " + d.inList(col, "?"))
		args = append(args, d.listArg(vals))
	}
	if f := req.Filter; f != nil {
		in("c.id", f.CallIDs)
		in("c.trace_id", f.TraceIDs)
		in("c.parent_id", f.ParentIDs)
		in("c.thread_id", f.ThreadIDs)
		in("c.turn_id", f.TurnIDs)
		in("c.platform_user_id", f.PlatformUserIDs)
		in("c.platform_run_id", f.PlatformRunIDs)
		if f.OpNames != nil {
			// exact names; a name ending in ":*" matches any digest of that op ref
			var exact []string
			var parts []string
			for _, n := range f.OpNames {
				if strings.HasSuffix(n, ":*") {
					parts = append(parts, d.prefixMatch("c.op_name"))
					args = append(args, d.prefixArg(strings.TrimSuffix(n, "*")))
				} else {
					exact = append(exact, n)
				}
			}
			if exact != nil {
				parts = append(parts, d.inList("c.op_name", "?"))
				args = append(args, d.listArg(exact))
			}
			if len(parts) == 0 {
				parts = append(parts, "1 = 0")
			}
			// the prefix args were appended before the list arg, matching parts' order
			sb.WriteString(" AND (" + strings.Join(parts, " OR ") + ")")
		}
		if isTrue(f.TraceRootsOnly) {
			sb.WriteString(" AND c.parent_id IS NULL")
		}
		for _, t := range []struct {
			v    *string
			op   string
			path string
		}{{f.StartedAfter, ">=", "filter.started_after"}, {f.StartedBefore, "<", "filter.started_before"}} {
			if t.v == nil {
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, *t.v)
			if err != nil {
				return "", nil, httpx.Invalid(t.path, "invalid_value", "expected an RFC 3339 time, got %q", *t.v)
			}
			sb.WriteString(" AND c.started_at " + t.op + " ?")
			args = append(args, at.UnixMicro())
		}
		if f.Statuses != nil {
			codes := make([]string, 0, len(f.Statuses))
			for i, st := range f.Statuses {
				code, ok := statusCodes[st]
				if !ok {
					return "", nil, httpx.Invalid(fmt.Sprintf("filter.statuses[%d]", i), "invalid_value",
						`expected "success", "error", "running" or "descendant_error", got %q`, st)
				}
				codes = append(codes, code)
			}
			if len(codes) == 0 {
				sb.WriteString(" AND 1 = 0")
			} else {
				sb.WriteString(" AND " + sortColumns["summary.platform.status"] + " IN (" + strings.Join(codes, ", ") + ")")
			}
		}
	}
	sb.WriteString(" ORDER BY ")
	hasID := false
	if len(req.SortBy) == 0 {
		sb.WriteString("c.started_at " + d.asc + ", c.id " + d.asc)
		hasID = true
	}
	for i, sf := range req.SortBy {
		col, ok := sortColumns[sf.Field]
		if !ok {
			col, ok = sortColumns["summary.platform."+sf.Field]
		}
		if !ok {
			return "", nil, httpx.Invalid(fmt.Sprintf("sort_by[%d].field", i), "invalid_value", "cannot sort by %q", sf.Field)
		}
		dir, err := d.direction(sf.Direction, fmt.Sprintf("sort_by[%d].direction", i))
		if err != nil {
			return "", nil, err
		}
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(col + " " + dir)
		if sf.Field == "id" {
			hasID = true
		}
	}
	if !hasID {
		sb.WriteString(", c.id " + d.asc)
	}
	lim, off, err := limitOffset(req.Limit, req.Offset)
	if err != nil {
		return "", nil, err
	}
	sb.WriteString(" LIMIT ? OFFSET ?")
	args = append(args, lim, off)
	return d.dyn(sb.String()), args, nil
}

func (s *Service) handleQuery(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	return s.runQuery(w, r, p, body, false)
}

func (s *Service) handleStreamQuery(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	return s.runQuery(w, r, p, body, true)
}

// flushWriter flushes the HTTP response whenever its buffer is written out.
type flushWriter struct {
	w http.ResponseWriter
	f *http.ResponseController
}

func (fw flushWriter) Write(b []byte) (int, error) {
	n, err := fw.w.Write(b)
	if err == nil {
		_ = fw.f.Flush()
	}
	return n, err
}

// runQuery serves /calls/query ({"calls": [...]}) and /calls/stream_query
// (JSON lines). Both stream rows from the database cursor to the client
// through a 32 KiB buffer; nothing is built in memory. The first row is
// flushed at once so a client sees data early.
func (s *Service) runQuery(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte, lines bool) error {
	var req queryReq
	if err := decodeAt(body, &req, ""); err != nil {
		return err
	}
	entity, name, err := authorize(p, req.ProjectID, "project_id")
	if err != nil {
		return err
	}
	projectID := entity + "/" + name
	inc := includes{Costs: isTrue(req.IncludeCosts), Size: isTrue(req.IncludeStorageSize), Total: isTrue(req.IncludeTotalStorageSize)}
	ctx := r.Context()
	proj, found, err := s.lookupProject(ctx, s.db, entity, name)
	if err != nil {
		return err
	}
	q, args, err := buildQuery(s.d, &req, proj, inc)
	if err != nil {
		return err
	}
	var book *priceBook
	if found && inc.Costs {
		// loaded before the cursor opens: no nested queries while rows stream
		if book, err = s.loadPrices(ctx, projectID, nil); err != nil {
			return err
		}
	}
	ctype := "application/json"
	if lines {
		ctype = "application/jsonl"
	}
	if !found {
		if lines {
			writeRaw(w, http.StatusOK, ctype, nil)
		} else {
			writeRaw(w, http.StatusOK, ctype, []byte("{\"calls\": []}\n"))
		}
		return nil
	}
	return s.streamCalls(ctx, w, q, args, projectID, inc, book, lines)
}

func (s *Service) streamCalls(ctx context.Context, w http.ResponseWriter, q string, args []any, projectID string,
	inc includes, book *priceBook, lines bool) error {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	ctype := "application/json"
	if lines {
		ctype = "application/jsonl"
	}
	w.Header().Set("Content-Type", ctype)
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(flushWriter{w: w, f: http.NewResponseController(w)}, 32<<10)
	if !lines {
		bw.WriteString(`{"calls": [`)
	}
	var line []byte
	n := 0
	rs := newRowScanner(inc.Total)
	for rows.Next() {
		c, err := rs.scan(rows)
		if err != nil {
			return fmt.Errorf("%w: %v", httpx.ErrResponseStarted, err)
		}
		line = line[:0]
		if !lines && n > 0 {
			line = append(line, ", "...)
		}
		line = s.appendCall(line, c, projectID, inc, book)
		if lines {
			line = append(line, '\n')
		}
		if _, err := bw.Write(line); err != nil {
			return nil // client went away
		}
		n++
		if n == 1 {
			if err := bw.Flush(); err != nil {
				return nil
			}
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%w: %v", httpx.ErrResponseStarted, err)
	}
	if !lines {
		bw.WriteString("]}\n")
	}
	_ = bw.Flush()
	return nil
}

// handleQueryStats serves /calls/query_stats: {count} of the calls a
// /calls/query with the same filter and limit answers, and with
// include_total_storage_size their total_storage_size_bytes summed (roots'
// traces; null without the flag).
func (s *Service) handleQueryStats(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	var req struct {
		ProjectID               string          `json:"project_id"`
		Filter                  *callsFilter    `json:"filter"`
		Limit                   *int64          `json:"limit"`
		IncludeTotalStorageSize *bool           `json:"include_total_storage_size"`
		Query                   json.RawMessage `json:"query"`
	}
	if err := decodeAt(body, &req, ""); err != nil {
		return err
	}
	entity, name, err := authorize(p, req.ProjectID, "project_id")
	if err != nil {
		return err
	}
	ctx := r.Context()
	proj, found, err := s.lookupProject(ctx, s.db, entity, name)
	if err != nil {
		return err
	}
	withTotal := isTrue(req.IncludeTotalStorageSize)
	q, args, err := buildQuery(s.d, &queryReq{ProjectID: req.ProjectID, Filter: req.Filter, Limit: req.Limit, Query: req.Query}, proj, includes{Total: withTotal})
	if err != nil {
		return err
	}
	var count int64
	var total sql.NullInt64
	if found {
		agg := `SELECT COUNT(*), NULL FROM (` + q + `) sub`
		if withTotal {
			// the root's total (NULL for non-roots) is the query's last column
			agg = `SELECT COUNT(*), CAST(SUM(sub.total_size) AS BIGINT) FROM (` + strings.Replace(q, totalExpr, totalExpr+" AS total_size", 1) + `) sub`
		}
		if err := s.db.QueryRowContext(ctx, agg, args...).Scan(&count, &total); err != nil {
			return err
		}
	}
	b := append([]byte(`{"count": `), strconv.AppendInt(nil, count, 10)...)
	b = append(b, `, "total_storage_size_bytes": `...)
	if withTotal {
		b = strconv.AppendInt(b, total.Int64, 10)
	} else {
		b = append(b, "null"...)
	}
	writeRaw(w, http.StatusOK, "application/json", append(b, "}\n"...))
	return nil
}
