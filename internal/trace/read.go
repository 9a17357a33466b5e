package trace

import (
	"context"
	"database/sql"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"

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
const totalExpr = `CASE WHEN c.parent_id IS NULL THEN (SELECT CAST(SUM(t.start_size + t.end_size) AS BIGINT) FROM trace_calls t
	WHERE t.project = c.project AND t.trace_id = c.trace_id) END`

type scanner interface{ Scan(dest ...any) error }

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
	bp := getReadBuf()
	defer putReadBuf(bp)
	buf, err := s.appendRead(r.Context(), (*bp)[:0], entity, name, *req.ID, inc)
	*bp = buf
	if err != nil {
		return err
	}
	writeRaw(w, http.StatusOK, "application/json", buf)
	return nil
}

// readBufs pools the response buffers of /call/read: a read renders into a
// pooled buffer that goes back once the response is written, so the steady
// state allocates no response-sized memory (less GC work, a shorter tail).
var readBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// maxPooledReadBuf caps the buffers kept in readBufs: one huge call does
// not pin its buffer.
const maxPooledReadBuf = 64 << 10

func getReadBuf() *[]byte { return readBufs.Get().(*[]byte) }

func putReadBuf(b *[]byte) {
	if cap(*b) <= maxPooledReadBuf {
		*b = (*b)[:0]
		readBufs.Put(b)
	}
}

// readScanners pools the row scanners of /call/read, with ([1]) and
// without ([0]) the total-size column.
var readScanners = [2]sync.Pool{
	{New: func() any { return newRowScanner(false) }},
	{New: func() any { return newRowScanner(true) }},
}

// readSQL and readTotalSQL select one visible call by id, without and with
// the root's total storage size (built once: the text is the key of the
// prepared-statement cache).
var (
	readSQL      = `SELECT ` + callColumns + readFrom
	readTotalSQL = `SELECT ` + callColumns + ", " + totalExpr + readFrom
)

const readFrom = ` FROM trace_calls c WHERE c.project = ? AND c.id = ? AND c.deleted_at IS NULL AND c.started_at IS NOT NULL`

// appendRead appends {"call": ...}\n for one call to b. The row is scanned
// into a pooled rowScanner (JSON columns as sql.RawBytes, not copied) and
// rendered while the cursor is open.
func (s *Service) appendRead(ctx context.Context, b []byte, entity, name, id string, inc includes) ([]byte, error) {
	const null = "{\"call\": null}\n"
	proj, ok, err := s.lookupProject(ctx, s.db, entity, name)
	if err != nil {
		return b, err
	}
	if !ok {
		return append(b, null...), nil
	}
	q := readSQL
	if inc.Total {
		q = readTotalSQL
	}
	st, err := s.prepared(q)
	if err != nil {
		return b, err
	}
	pool := &readScanners[0]
	if inc.Total {
		pool = &readScanners[1]
	}
	rs := pool.Get().(*rowScanner)
	defer pool.Put(rs) // after rows.Close: rs's RawBytes are the cursor's
	rows, err := st.QueryContext(ctx, proj, id)
	if err != nil {
		return b, err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return b, err
		}
		return append(b, null...), nil
	}
	row, err := rs.scan(rows)
	if err != nil {
		return b, err
	}
	projectID := entity + "/" + name
	var book *priceBook
	if inc.Costs && hasUsage(row.summary) {
		if book, err = s.loadPrices(ctx, projectID, nil); err != nil {
			return b, err
		}
	}
	b = append(b, `{"call": `...)
	b = s.appendCall(b, row, projectID, inc, book)
	b = append(b, "}\n"...)
	return b, rows.Close()
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
// With several stored "platform" members the last one is the merged one.
func (s *Service) appendSummary(b []byte, c *callRow, inc includes, book *priceBook) []byte {
	var members []rawMember
	if c.summary != nil {
		members, _ = splitObject(c.summary)
	}
	platIdx := -1
	for i, m := range members {
		if m.Key == "platform" {
			platIdx = i
		}
	}
	b = append(b, '{')
	for i, m := range members {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendPyString(b, m.Key)
		b = append(b, ": "...)
		if i == platIdx {
			b = s.appendPlatform(b, c, members, m.Value, inc, book)
		} else {
			b = append(b, m.Value...)
		}
	}
	if platIdx < 0 {
		if len(members) > 0 {
			b = append(b, ", "...)
		}
		b = append(b, `"platform": `...)
		b = s.appendPlatform(b, c, members, nil, inc, book)
	}
	return append(b, '}')
}

// appendPlatform writes summary.platform: the stored platform object's
// members in order (a non-object stored value counts as {}), where the first
// member named like a derived key (status, latency_ms, display_name or
// trace_name, costs) gets the derived value, then the derived keys the stored
// object lacks, in that order. summary is the stored summary's members.
func (s *Service) appendPlatform(b []byte, c *callRow, summary []rawMember, stored []byte, inc includes, book *priceBook) []byte {
	var members []rawMember
	if stored != nil {
		members, _ = splitObject(stored)
	}
	hasLatency := c.startedAt.Valid && c.endedAt.Valid
	var nameKey, name string
	if c.displayName.Valid && c.displayName.String != "" {
		nameKey, name = "display_name", c.displayName.String
	} else if c.opName.Valid {
		nameKey, name = "trace_name", traceName(c.opName.String)
	}
	// seen* record that a stored member took the derived value (or, for
	// costs, was where it would have gone).
	var seenStatus, seenLatency, seenName, seenCosts bool
	b = append(b, '{')
	for i, m := range members {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendPyString(b, m.Key)
		b = append(b, ": "...)
		switch {
		case m.Key == "status" && !seenStatus:
			seenStatus = true
			b = appendPyString(b, statusOf(c, summary))
		case m.Key == "latency_ms" && hasLatency && !seenLatency:
			seenLatency = true
			b = appendLatency(b, c)
		case nameKey != "" && m.Key == nameKey && !seenName:
			seenName = true
			b = appendPyString(b, name)
		case m.Key == "costs" && inc.Costs && !seenCosts:
			seenCosts = true
			var ok bool
			if b, ok = s.appendCosts(b, c, summary, book); !ok {
				b = append(b, m.Value...) // no priced usage: the stored value stays
			}
		default:
			b = append(b, m.Value...)
		}
	}
	// status is always present, so every key after it needs a separator
	if !seenStatus {
		if len(members) > 0 {
			b = append(b, ", "...)
		}
		b = append(b, `"status": `...)
		b = appendPyString(b, statusOf(c, summary))
	}
	if hasLatency && !seenLatency {
		b = append(b, `, "latency_ms": `...)
		b = appendLatency(b, c)
	}
	if nameKey != "" && !seenName {
		b = append(b, ", "...)
		b = appendPyString(b, nameKey)
		b = append(b, ": "...)
		b = appendPyString(b, name)
	}
	if inc.Costs && !seenCosts {
		mark := len(b)
		b = append(b, `, "costs": `...)
		var ok bool
		if b, ok = s.appendCosts(b, c, summary, book); !ok {
			b = b[:mark]
		}
	}
	return append(b, '}')
}

// appendLatency writes summary.platform.latency_ms (ended_at - started_at,
// both set): ended_at before started_at is stored as sent, and the latency
// is then 0, never negative.
func appendLatency(b []byte, c *callRow) []byte {
	return strconv.AppendInt(b, max(0, (c.endedAt.Int64-c.startedAt.Int64)/1000), 10)
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

// usageField returns the field of u that a usage key decodes into, matched
// case-insensitively as encoding/json does, or nil.
func usageField(u *usage, key string) *json.Number {
	for _, f := range [...]struct {
		name string
		dst  *json.Number
	}{{"requests", &u.Requests}, {"prompt_tokens", &u.PromptTokens}, {"input_tokens", &u.InputTokens},
		{"completion_tokens", &u.CompletionTokens}, {"output_tokens", &u.OutputTokens}, {"total_tokens", &u.TotalTokens}} {
		if strings.EqualFold(key, f.name) {
			return f.dst
		}
	}
	return nil
}

// decodeUsage decodes one summary.usage entry as json.Unmarshal into usage
// would (ok=false where Unmarshal fails or v is not an object), without
// reflection in the common case: stored canonical members whose values are
// numbers or null are taken directly (the last of duplicate keys wins, null
// leaves a field as it is); any other value of a usage field (a string, which
// Unmarshal takes when it holds a number, or a type error) goes through
// json.Unmarshal itself.
func decodeUsage(v []byte) (u usage, ok bool) {
	if jsonKindOf(v) != 'o' {
		return u, false
	}
	members, ok := splitObject(v)
	if !ok {
		return u, json.Unmarshal(v, &u) == nil
	}
	for _, m := range members {
		dst := usageField(&u, m.Key)
		if dst == nil {
			continue
		}
		switch jsonKindOf(m.Value) {
		case 'n':
			*dst = json.Number(m.Value)
		case 'z':
		default:
			u = usage{}
			return u, json.Unmarshal(v, &u) == nil
		}
	}
	return u, true
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

// hasUsage reports whether a stored summary has summary.usage members.
func hasUsage(summary []byte) bool {
	if summary == nil {
		return false
	}
	members, _ := splitObject(summary)
	return len(usageOf(members)) > 0
}

// appendCount writes a token count: an integer when integral, else a float.
func appendCount(b []byte, f float64) []byte {
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return strconv.AppendInt(b, int64(f), 10)
	}
	return appendPyFloat(b, f)
}

// appendCosts appends summary.platform.costs to b. ok is false (and b is
// returned unchanged) when no usage has a price: the key is then left out.
func (s *Service) appendCosts(b []byte, c *callRow, summary []rawMember, book *priceBook) (_ []byte, ok bool) {
	models := usageOf(summary)
	if len(models) == 0 {
		return b, false
	}
	var started int64
	if c.startedAt.Valid {
		started = c.startedAt.Int64
	}
	out := b
	n := 0
	for _, m := range models {
		pr := s.choosePrice(book, m.Key, started)
		if pr == nil {
			continue
		}
		u, ok := decodeUsage(m.Value)
		if !ok {
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
		return b, false
	}
	return append(out, '}'), true
}
