package trace

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"

	"flywheel/internal/auth"
	"flywheel/internal/httpx"
)

// callRow is one stored call as read from trace_calls.
type callRow struct {
	id                                        string
	opName, displayName, traceID, parentID    sql.NullString
	threadID, turnID                          sql.NullString
	startedAt, endedAt                        sql.NullInt64
	attributes, inputs, output, summary       []byte // nil = SQL NULL
	exception, userID, runID                  sql.NullString
	runStep, runStepEnd, deletedAt, size, tot sql.NullInt64
}

const callColumns = `c.id, c.op_name, c.display_name, c.trace_id, c.parent_id, c.thread_id, c.turn_id,
	c.started_at, c.ended_at, c.attributes, c.inputs, c.output, c.exception, c.summary,
	c.platform_user_id, c.platform_run_id, c.platform_run_step, c.platform_run_step_end, c.deleted_at,
	c.start_size + c.end_size`

// totalExpr is the root's total storage size over its trace (deleted calls
// included), an index-only sum over trace_calls_by_trace; NULL for non-roots.
const totalExpr = `CASE WHEN c.parent_id IS NULL THEN (SELECT SUM(t.start_size + t.end_size) FROM trace_calls t
	WHERE t.project = c.project AND t.trace_id = c.trace_id) END`

type scanner interface{ Scan(dest ...any) error }

func scanCall(sc scanner, withTotal bool) (*callRow, error) {
	var c callRow
	dest := []any{&c.id, &c.opName, &c.displayName, &c.traceID, &c.parentID, &c.threadID, &c.turnID,
		&c.startedAt, &c.endedAt, &c.attributes, &c.inputs, &c.output, &c.exception, &c.summary,
		&c.userID, &c.runID, &c.runStep, &c.runStepEnd, &c.deletedAt, &c.size}
	if withTotal {
		dest = append(dest, &c.tot)
	}
	if err := sc.Scan(dest...); err != nil {
		return nil, err
	}
	return &c, nil
}

// rowScanner scans rows of a cursor into one reused callRow; the JSON
// columns go through sql.RawBytes buffers (no allocation per row), valid
// until the next row.
type rowScanner struct {
	c                     callRow
	attrs, ins, out, summ sql.RawBytes
	dest                  []any
}

func newRowScanner(withTotal bool) *rowScanner {
	r := &rowScanner{}
	c := &r.c
	r.dest = []any{&c.id, &c.opName, &c.displayName, &c.traceID, &c.parentID, &c.threadID, &c.turnID,
		&c.startedAt, &c.endedAt, &r.attrs, &r.ins, &r.out, &c.exception, &r.summ,
		&c.userID, &c.runID, &c.runStep, &c.runStepEnd, &c.deletedAt, &c.size}
	if withTotal {
		r.dest = append(r.dest, &c.tot)
	}
	return r
}

func (r *rowScanner) scan(rows *sql.Rows) (*callRow, error) {
	r.attrs, r.ins, r.out, r.summ = r.attrs[:0], r.ins[:0], r.out[:0], r.summ[:0]
	if err := rows.Scan(r.dest...); err != nil {
		return nil, err
	}
	c := &r.c
	c.attributes, c.inputs, c.output, c.summary = nilIfNull(r.attrs), nilIfNull(r.ins), nilIfNull(r.out), nilIfNull(r.summ)
	return c, nil
}

// nilIfNull maps a NULL column (nil RawBytes) to nil and keeps empty text.
func nilIfNull(b sql.RawBytes) []byte {
	if b == nil {
		return nil
	}
	return b
}

// includes are the three include_* flags (null = false).
type includes struct {
	Costs, Size, Total bool
}

type readReq struct {
	ProjectID               string  `json:"project_id"`
	ID                      *string `json:"id"`
	IncludeCosts            *bool   `json:"include_costs"`
	IncludeStorageSize      *bool   `json:"include_storage_size"`
	IncludeTotalStorageSize *bool   `json:"include_total_storage_size"`
}

func isTrue(b *bool) bool { return b != nil && *b }

func (s *Service) handleRead(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	var req readReq
	if err := decodeAt(body, &req, ""); err != nil {
		return err
	}
	entity, name, err := authorize(p, req.ProjectID, "project_id")
	if err != nil {
		return err
	}
	if req.ID == nil || *req.ID == "" {
		return httpx.Invalid("id", "missing_field", "required: the call id")
	}
	if err := optID(req.ID, "id"); err != nil {
		return err
	}
	inc := includes{Costs: isTrue(req.IncludeCosts), Size: isTrue(req.IncludeStorageSize), Total: isTrue(req.IncludeTotalStorageSize)}
	buf, err := s.readCall(r.Context(), entity, name, *req.ID, inc)
	if err != nil {
		return err
	}
	writeRaw(w, http.StatusOK, "application/json", buf)
	return nil
}

// readCall renders {"call": ...} for one call.
func (s *Service) readCall(ctx context.Context, entity, name, id string, inc includes) ([]byte, error) {
	null := []byte("{\"call\": null}\n")
	proj, ok, err := s.lookupProject(ctx, s.db, entity, name)
	if err != nil {
		return nil, err
	}
	if !ok {
		return null, nil
	}
	q := `SELECT ` + callColumns
	if inc.Total {
		q += ", " + totalExpr
	}
	q += ` FROM trace_calls c WHERE c.project = ? AND c.id = ? AND c.deleted_at IS NULL AND c.started_at IS NOT NULL`
	st, err := s.prepared(q)
	if err != nil {
		return nil, err
	}
	row, err := scanCall(st.QueryRowContext(ctx, proj, id), inc.Total)
	if errors.Is(err, sql.ErrNoRows) {
		return null, nil
	}
	if err != nil {
		return nil, err
	}
	var book *priceBook
	if inc.Costs {
		models := usageModels(row.summary)
		if len(models) > 0 {
			if book, err = s.loadPrices(ctx, entity+"/"+name, models); err != nil {
				return nil, err
			}
		}
	}
	buf := make([]byte, 0, 512+len(row.attributes)+len(row.inputs)+len(row.output)+len(row.summary))
	buf = append(buf, `{"call": `...)
	buf = s.appendCall(buf, row, entity+"/"+name, inc, book)
	buf = append(buf, "}\n"...)
	return buf, nil
}

func appendNullStr(b []byte, v sql.NullString) []byte {
	if !v.Valid {
		return append(b, "null"...)
	}
	return appendPyString(b, v.String)
}

func appendNullInt(b []byte, v sql.NullInt64) []byte {
	if !v.Valid {
		return append(b, "null"...)
	}
	return strconv.AppendInt(b, v.Int64, 10)
}

func appendNullTime(b []byte, v sql.NullInt64) []byte {
	if !v.Valid {
		return append(b, "null"...)
	}
	return appendTime(b, v.Int64)
}

func appendJSON(b, v []byte) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	return append(b, v...)
}

// appendCall writes the CallSchema object: every key, explicit nulls.
func (s *Service) appendCall(b []byte, c *callRow, projectID string, inc includes, book *priceBook) []byte {
	b = append(b, `{"id": `...)
	b = appendPyString(b, c.id)
	b = append(b, `, "project_id": `...)
	b = appendPyString(b, projectID)
	b = append(b, `, "op_name": `...)
	b = appendNullStr(b, c.opName)
	b = append(b, `, "display_name": `...)
	b = appendNullStr(b, c.displayName)
	b = append(b, `, "trace_id": `...)
	b = appendNullStr(b, c.traceID)
	b = append(b, `, "parent_id": `...)
	b = appendNullStr(b, c.parentID)
	b = append(b, `, "thread_id": `...)
	b = appendNullStr(b, c.threadID)
	b = append(b, `, "turn_id": `...)
	b = appendNullStr(b, c.turnID)
	b = append(b, `, "started_at": `...)
	b = appendNullTime(b, c.startedAt)
	b = append(b, `, "ended_at": `...)
	b = appendNullTime(b, c.endedAt)
	b = append(b, `, "attributes": `...)
	b = appendJSON(b, c.attributes)
	b = append(b, `, "inputs": `...)
	b = appendJSON(b, c.inputs)
	b = append(b, `, "output": `...)
	b = appendJSON(b, c.output)
	b = append(b, `, "exception": `...)
	b = appendNullStr(b, c.exception)
	b = append(b, `, "summary": `...)
	b = s.appendSummary(b, c, inc, book)
	b = append(b, `, "platform_user_id": `...)
	b = appendNullStr(b, c.userID)
	b = append(b, `, "platform_run_id": `...)
	b = appendNullStr(b, c.runID)
	b = append(b, `, "platform_run_step": `...)
	b = appendNullInt(b, c.runStep)
	b = append(b, `, "platform_run_step_end": `...)
	b = appendNullInt(b, c.runStepEnd)
	b = append(b, `, "deleted_at": `...)
	b = appendNullTime(b, c.deletedAt)
	b = append(b, `, "storage_size_bytes": `...)
	if inc.Size {
		b = appendNullInt(b, c.size)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `, "total_storage_size_bytes": `...)
	if inc.Total && !c.parentID.Valid {
		b = appendNullInt(b, c.tot)
	} else {
		b = append(b, "null"...)
	}
	return append(b, '}')
}

// traceName is the op name, or for an op reference ".../op/<name>:<digest>"
// the <name> part.
func traceName(op string) string {
	if i := strings.LastIndex(op, "/op/"); i >= 0 {
		rest := op[i+4:]
		if j := strings.LastIndexByte(rest, ':'); j > 0 {
			return rest[:j]
		}
		if rest != "" {
			return rest
		}
	}
	return op
}

// statusOf derives summary.platform.status.
func statusOf(c *callRow, summary []rawMember) string {
	switch {
	case c.exception.Valid && c.exception.String != "":
		return "error"
	case !c.endedAt.Valid:
		return "running"
	case statusCountsError(summary) > 0:
		return "descendant_error"
	}
	return "success"
}

func statusCountsError(summary []rawMember) float64 {
	for _, m := range summary {
		if m.Key != "status_counts" {
			continue
		}
		sc, ok := splitObject(m.Value)
		if !ok {
			return 0
		}
		for _, e := range sc {
			if e.Key == "error" && jsonKindOf(e.Value) == 'n' {
				f, _ := strconv.ParseFloat(string(e.Value), 64)
				return f
			}
		}
	}
	return 0
}

// appendSummary writes the stored summary with summary.platform derived and
// merged over any stored platform object (stored keys kept, derived ones set).
func (s *Service) appendSummary(b []byte, c *callRow, inc includes, book *priceBook) []byte {
	var members []rawMember
	if c.summary != nil {
		members, _ = splitObject(c.summary)
	}
	var platform []rawMember
	platIdx := -1
	for i, m := range members {
		if m.Key == "platform" {
			platIdx = i
			platform, _ = splitObject(m.Value) // a non-object stored value is replaced
		}
	}
	set := func(key string, val []byte) {
		for i := range platform {
			if platform[i].Key == key {
				platform[i].Value = val
				return
			}
		}
		platform = append(platform, rawMember{Key: key, Value: val})
	}
	set("status", appendPyString(nil, statusOf(c, members)))
	if c.startedAt.Valid && c.endedAt.Valid {
		lat := (c.endedAt.Int64 - c.startedAt.Int64) / 1000
		if lat < 0 {
			lat = 0 // ended_at before started_at is stored as sent; latency is never negative
		}
		set("latency_ms", strconv.AppendInt(nil, lat, 10))
	}
	if c.displayName.Valid && c.displayName.String != "" {
		set("display_name", appendPyString(nil, c.displayName.String))
	} else if c.opName.Valid {
		set("trace_name", appendPyString(nil, traceName(c.opName.String)))
	}
	if inc.Costs {
		if costs := s.costsFor(c, members, book); costs != nil {
			set("costs", costs)
		}
	}
	var pb []byte
	pb = append(pb, '{')
	for i, m := range platform {
		if i > 0 {
			pb = append(pb, ", "...)
		}
		pb = appendPyString(pb, m.Key)
		pb = append(pb, ": "...)
		pb = append(pb, m.Value...)
	}
	pb = append(pb, '}')
	if platIdx >= 0 {
		members[platIdx].Value = pb
	} else {
		members = append(members, rawMember{Key: "platform", Value: pb})
	}
	b = append(b, '{')
	for i, m := range members {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendPyString(b, m.Key)
		b = append(b, ": "...)
		b = append(b, m.Value...)
	}
	return append(b, '}')
}

// usage is one model's entry of summary.usage.
type usage struct {
	Requests         json.Number `json:"requests"`
	PromptTokens     json.Number `json:"prompt_tokens"`
	InputTokens      json.Number `json:"input_tokens"`
	CompletionTokens json.Number `json:"completion_tokens"`
	OutputTokens     json.Number `json:"output_tokens"`
	TotalTokens      json.Number `json:"total_tokens"`
}

func num(n json.Number) float64 {
	if n == "" {
		return 0
	}
	f, err := n.Float64()
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

// usageOf returns summary.usage's members (model -> usage object).
func usageOf(summary []rawMember) []rawMember {
	for _, m := range summary {
		if m.Key == "usage" {
			u, _ := splitObject(m.Value)
			return u
		}
	}
	return nil
}

// usageModels lists the model keys of summary.usage in a stored summary.
func usageModels(summary []byte) []string {
	if summary == nil {
		return nil
	}
	members, _ := splitObject(summary)
	var out []string
	for _, m := range usageOf(members) {
		out = append(out, m.Key)
	}
	return out
}

// appendCount writes a token count: an integer when integral, else a float.
func appendCount(b []byte, f float64) []byte {
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return strconv.AppendInt(b, int64(f), 10)
	}
	return appendPyFloat(b, f)
}

// costsFor builds summary.platform.costs, or nil when no usage has a price.
func (s *Service) costsFor(c *callRow, summary []rawMember, book *priceBook) []byte {
	models := usageOf(summary)
	if len(models) == 0 {
		return nil
	}
	var started int64
	if c.startedAt.Valid {
		started = c.startedAt.Int64
	}
	var out []byte
	n := 0
	for _, m := range models {
		pr := s.choosePrice(book, m.Key, started)
		if pr == nil {
			continue
		}
		var u usage
		if jsonKindOf(m.Value) != 'o' || json.Unmarshal(m.Value, &u) != nil {
			continue
		}
		prompt := num(u.PromptTokens) + num(u.InputTokens)
		completion := num(u.CompletionTokens) + num(u.OutputTokens)
		total := num(u.TotalTokens)
		if u.TotalTokens == "" {
			total = prompt + completion
		}
		if n == 0 {
			out = append(out, '{')
		} else {
			out = append(out, ", "...)
		}
		n++
		out = appendPyString(out, m.Key)
		out = append(out, `: {"prompt_tokens": `...)
		out = appendCount(out, prompt)
		out = append(out, `, "completion_tokens": `...)
		out = appendCount(out, completion)
		out = append(out, `, "requests": `...)
		out = appendCount(out, num(u.Requests))
		out = append(out, `, "total_tokens": `...)
		out = appendCount(out, total)
		out = append(out, `, "prompt_token_cost": `...)
		out = appendPyFloat(out, pr.PromptTokenCost)
		out = append(out, `, "completion_token_cost": `...)
		out = appendPyFloat(out, pr.CompletionTokenCost)
		out = append(out, `, "prompt_tokens_total_cost": `...)
		out = appendPyFloat(out, prompt*pr.PromptTokenCost)
		out = append(out, `, "completion_tokens_total_cost": `...)
		out = appendPyFloat(out, completion*pr.CompletionTokenCost)
		out = append(out, `, "prompt_token_cost_unit": `...)
		out = appendPyString(out, pr.PromptTokenCostUnit)
		out = append(out, `, "completion_token_cost_unit": `...)
		out = appendPyString(out, pr.CompletionTokenCostUnit)
		out = append(out, `, "effective_date": `...)
		out = appendTime(out, pr.EffectiveDate)
		out = append(out, `, "provider_id": `...)
		out = appendPyString(out, pr.ProviderID)
		out = append(out, `, "pricing_level": `...)
		out = appendPyString(out, pr.PricingLevel)
		out = append(out, `, "pricing_level_id": `...)
		out = appendPyString(out, pr.PricingLevelID)
		out = append(out, `, "created_by": `...)
		if pr.CreatedBy == "" {
			out = append(out, "null"...)
		} else {
			out = appendPyString(out, pr.CreatedBy)
		}
		out = append(out, `, "created_at": `...)
		out = appendTime(out, pr.CreatedAt)
		out = append(out, '}')
	}
	if n == 0 {
		return nil
	}
	return append(out, '}')
}
