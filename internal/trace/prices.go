package trace

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"flywheel/internal/auth"
	"flywheel/internal/httpx"
)

// Price is one row of the price table.
type Price struct {
	ID                      string
	LLMID                   string
	PromptTokenCost         float64
	CompletionTokenCost     float64
	PromptTokenCostUnit     string
	CompletionTokenCostUnit string
	EffectiveDate           int64 // Unix microseconds
	ProviderID              string
	PricingLevel            string // "default" or "project"
	PricingLevelID          string // "default" or the project id entity/project
	CreatedBy               string
	CreatedAt               int64 // Unix microseconds
}

// Text returns the price's costs and effective date as the call store's
// JSON writes them (a cost as Python's float repr, a time in RFC 3339 with
// microseconds), for listings such as `flywheel prices list`.
func (p *Price) Text() (prompt, completion, effective string) {
	return string(appendPyFloat(nil, p.PromptTokenCost)), string(appendPyFloat(nil, p.CompletionTokenCost)), formatTime(p.EffectiveDate)
}

const priceColumns = `id, llm_id, prompt_token_cost, completion_token_cost, prompt_token_cost_unit,
	completion_token_cost_unit, effective_date, provider_id, pricing_level, pricing_level_id, created_by, created_at`

func scanPrice(sc scanner) (*Price, error) {
	var p Price
	var by sql.NullString
	if err := sc.Scan(&p.ID, &p.LLMID, &p.PromptTokenCost, &p.CompletionTokenCost, &p.PromptTokenCostUnit,
		&p.CompletionTokenCostUnit, &p.EffectiveDate, &p.ProviderID, &p.PricingLevel, &p.PricingLevelID, &by, &p.CreatedAt); err != nil {
		return nil, err
	}
	p.CreatedBy = by.String
	return &p, nil
}

// priceBook is the view of the price table one request uses: a snapshot of
// every price and the project whose project-level prices apply.
type priceBook struct {
	snap    *priceSnapshot
	project string // external id entity/project
}

// priceSnapshot is an immutable in-memory copy of trace_prices (a small
// table), by model id.
type priceSnapshot struct {
	byModel map[string][]*Price
	at      time.Time
	gen     uint64
}

// priceTTL bounds how long a snapshot is used: prices written by another
// process (the prices CLI) are seen within it; writes through this Service
// invalidate the snapshot at once.
const priceTTL = time.Second

// loadPrices returns the price view for projectID (models is unused: the
// snapshot holds every model).
func (s *Service) loadPrices(ctx context.Context, projectID string, models []string) (*priceBook, error) {
	snap, err := s.priceSnapshot(ctx)
	if err != nil {
		return nil, err
	}
	return &priceBook{snap: snap, project: projectID}, nil
}

func (s *Service) priceSnapshot(ctx context.Context) (*priceSnapshot, error) {
	if snap := s.priceSnap.Load(); snap != nil && snap.gen == s.priceGen.Load() && time.Since(snap.at) < priceTTL {
		return snap, nil
	}
	s.priceMu.Lock()
	defer s.priceMu.Unlock()
	gen := s.priceGen.Load()
	if snap := s.priceSnap.Load(); snap != nil && snap.gen == gen && time.Since(snap.at) < priceTTL {
		return snap, nil
	}
	st, err := s.prepared(`SELECT ` + priceColumns + ` FROM trace_prices`)
	if err != nil {
		return nil, err
	}
	at := time.Now()
	rows, err := st.QueryContext(ctx)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	snap := &priceSnapshot{byModel: map[string][]*Price{}, at: at, gen: gen}
	for rows.Next() {
		p, err := scanPrice(rows)
		if err != nil {
			return nil, err
		}
		snap.byModel[p.LLMID] = append(snap.byModel[p.LLMID], p)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	s.priceSnap.Store(snap)
	return snap, nil
}

// invalidatePrices makes the next price lookup reload the table.
func (s *Service) invalidatePrices() { s.priceGen.Add(1) }

// better reports whether a beats b for a call started at `started`: prices
// already effective first, then project level over default, then the latest
// effective date (then the latest created).
func better(a, b *Price, started int64) bool {
	ae, be := a.EffectiveDate <= started, b.EffectiveDate <= started
	if ae != be {
		return ae
	}
	ap, bp := a.PricingLevel == "project", b.PricingLevel == "project"
	if ap != bp {
		return ap
	}
	if a.EffectiveDate != b.EffectiveDate {
		return a.EffectiveDate > b.EffectiveDate
	}
	if a.CreatedAt != b.CreatedAt {
		return a.CreatedAt > b.CreatedAt
	}
	return a.ID > b.ID
}

// choosePrice picks the price of model for a call started at `started`, or
// the configured default service price for the service's own models.
func (s *Service) choosePrice(book *priceBook, model string, started int64) *Price {
	var best *Price
	if book != nil {
		for _, p := range book.snap.byModel[model] {
			if p.PricingLevel == "project" && p.PricingLevelID != book.project ||
				p.PricingLevel == "default" && p.PricingLevelID != "default" {
				continue
			}
			if best == nil || better(p, best, started) {
				best = p
			}
		}
	}
	if best != nil {
		return best
	}
	if s.opts.DefaultServicePrice != nil && s.isServedModel(model) {
		return &Price{LLMID: model, PromptTokenCost: s.opts.DefaultServicePrice.Prompt,
			CompletionTokenCost: s.opts.DefaultServicePrice.Completion, PromptTokenCostUnit: "USD",
			CompletionTokenCostUnit: "USD", EffectiveDate: 0, ProviderID: "flywheel", PricingLevel: "default",
			PricingLevelID: "default", CreatedBy: "", CreatedAt: s.started.UnixMicro()}
	}
	return nil
}

func (s *Service) isServedModel(m string) bool {
	if s.opts.IsServedModel != nil {
		return s.opts.IsServedModel(m)
	}
	for _, b := range s.opts.BaseModels {
		if m == b {
			return true
		}
	}
	if i := strings.Index(m, ":///"); i >= 0 {
		m = m[i+4:]
	}
	parts := strings.Split(m, "/")
	if len(parts) != 3 {
		return false
	}
	for _, p := range parts {
		if p == "" {
			return false
		}
	}
	if i := strings.IndexByte(parts[2], ':'); i >= 0 {
		step := parts[2][i+1:]
		if !strings.HasPrefix(step, "step") {
			return false
		}
		if _, err := strconv.ParseUint(step[4:], 10, 64); err != nil {
			return false
		}
	}
	return true
}

// ---- prices over HTTP ----

type costIn struct {
	PromptTokenCost         *float64 `json:"prompt_token_cost"`
	CompletionTokenCost     *float64 `json:"completion_token_cost"`
	PromptTokenCostUnit     *string  `json:"prompt_token_cost_unit"`
	CompletionTokenCostUnit *string  `json:"completion_token_cost_unit"`
	EffectiveDate           *string  `json:"effective_date"`
	ProviderID              *string  `json:"provider_id"`
}

func (c *costIn) toPrice(model, path string, defaultEffective int64) (*Price, error) {
	if c.PromptTokenCost == nil {
		return nil, httpx.Invalid(path+".prompt_token_cost", "missing_field", "required: a number")
	}
	if c.CompletionTokenCost == nil {
		return nil, httpx.Invalid(path+".completion_token_cost", "missing_field", "required: a number")
	}
	if *c.PromptTokenCost < 0 || *c.CompletionTokenCost < 0 {
		return nil, httpx.Invalid(path, "invalid_value", "token costs must not be negative")
	}
	p := &Price{LLMID: model, PromptTokenCost: *c.PromptTokenCost, CompletionTokenCost: *c.CompletionTokenCost,
		PromptTokenCostUnit: "USD", CompletionTokenCostUnit: "USD", ProviderID: "default", EffectiveDate: defaultEffective}
	if c.PromptTokenCostUnit != nil && *c.PromptTokenCostUnit != "" {
		p.PromptTokenCostUnit = *c.PromptTokenCostUnit
	}
	if c.CompletionTokenCostUnit != nil && *c.CompletionTokenCostUnit != "" {
		p.CompletionTokenCostUnit = *c.CompletionTokenCostUnit
	}
	if c.ProviderID != nil && *c.ProviderID != "" {
		p.ProviderID = *c.ProviderID
	}
	if c.EffectiveDate != nil {
		t, ok := parseTime(*c.EffectiveDate)
		if !ok {
			return nil, httpx.Invalid(path+".effective_date", "invalid_value", "invalid timestamp %q: expected RFC 3339", *c.EffectiveDate)
		}
		p.EffectiveDate = t
	}
	if err := checkText(&model, path); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		v    *string
		name string
	}{{&p.PromptTokenCostUnit, "prompt_token_cost_unit"}, {&p.CompletionTokenCostUnit, "completion_token_cost_unit"}, {&p.ProviderID, "provider_id"}} {
		if err := checkText(f.v, path+"."+f.name); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func insertPrice(ctx context.Context, tx *sql.Tx, d *dialect, p *Price) error {
	_, err := tx.ExecContext(ctx, d.sql(`INSERT INTO trace_prices (`+priceColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		p.ID, p.LLMID, p.PromptTokenCost, p.CompletionTokenCost, p.PromptTokenCostUnit, p.CompletionTokenCostUnit,
		p.EffectiveDate, p.ProviderID, p.PricingLevel, p.PricingLevelID, nullIfEmpty(p.CreatedBy), p.CreatedAt)
	return err
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (s *Service) handleCostCreate(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	var req struct {
		ProjectID string          `json:"project_id"`
		Costs     json.RawMessage `json:"costs"`
	}
	if err := decodeAt(body, &req, ""); err != nil {
		return err
	}
	entity, name, err := authorize(p, req.ProjectID, "project_id")
	if err != nil {
		return err
	}
	if jsonKindOf(req.Costs) != 'o' {
		return httpx.Invalid("costs", "missing_field", "required: an object {model_id: {prompt_token_cost, completion_token_cost, ...}}")
	}
	members, ok := splitObject(req.Costs)
	if !ok {
		return httpx.Invalid("costs", "invalid_json", "malformed object")
	}
	now := s.now().UnixMicro()
	var prices []*Price
	for _, m := range members {
		path := "costs." + m.Key
		if m.Key == "" {
			return httpx.Invalid("costs", "invalid_value", "model id must not be empty")
		}
		var c costIn
		if jsonKindOf(m.Value) != 'o' {
			return httpx.Invalid(path, "invalid_type", "expected an object")
		}
		if err := decodeAt(m.Value, &c, path); err != nil {
			return err
		}
		pr, err := c.toPrice(m.Key, path, now)
		if err != nil {
			return err
		}
		pr.ID = NewUUIDv7()
		pr.PricingLevel, pr.PricingLevelID = "project", entity+"/"+name
		pr.CreatedBy, pr.CreatedAt = p.UserID, now
		prices = append(prices, pr)
	}
	err = s.projectTx(r.Context(), entity, name, func(tx *sql.Tx, _ int64) error {
		for _, pr := range prices {
			if err := insertPrice(r.Context(), tx, s.d, pr); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.invalidatePrices()
	ids := make([][2]string, 0, len(prices))
	for _, pr := range prices {
		ids = append(ids, [2]string{pr.ID, pr.LLMID})
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"ids": ids})
	return nil
}

// priceFields are the price table's fields by name, with their kind: 't'
// text, 'n' a number, 'd' a date (stored as Unix microseconds).
var priceFields = map[string]byte{
	"id": 't', "llm_id": 't', "prompt_token_cost": 'n', "completion_token_cost": 'n',
	"prompt_token_cost_unit": 't', "completion_token_cost_unit": 't', "effective_date": 'd',
	"provider_id": 't', "pricing_level": 't', "pricing_level_id": 't', "created_by": 't', "created_at": 'd',
}

type sortField struct {
	Field     string `json:"field"`
	Direction string `json:"direction"`
}

// fieldsQuery is the request of the routes that query one table by its
// fields (/cost/query, /feedback/query), decoded and authorized.
type fieldsQuery struct {
	ProjectID string          `json:"project_id"`
	Fields    []string        `json:"fields"`
	Query     json.RawMessage `json:"query"`
	SortBy    []sortField     `json:"sort_by"`
	Limit     *int64          `json:"limit"`
	Offset    *int64          `json:"offset"`

	entity, name string
}

func decodeFieldsQuery(p *auth.Principal, body []byte) (*fieldsQuery, error) {
	var req fieldsQuery
	if err := decodeAt(body, &req, ""); err != nil {
		return nil, err
	}
	var err error
	if req.entity, req.name, err = authorize(p, req.ProjectID, "project_id"); err != nil {
		return nil, err
	}
	return &req, nil
}

func (s *Service) handleCostQuery(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	req, err := decodeFieldsQuery(p, body)
	if err != nil {
		return err
	}
	entity, name := req.entity, req.name
	for i, f := range req.Fields {
		if _, ok := priceFields[f]; !ok {
			return httpx.Invalid(fmt.Sprintf("fields[%d]", i), "invalid_value", "unknown field %q", f)
		}
	}
	where := `pricing_level = 'project' AND pricing_level_id = ?`
	args := []any{entity + "/" + name}
	if k := jsonKindOf(req.Query); k != 0 && k != 'z' {
		cond, cargs, err := querySQL(req.Query, "query", priceFields)
		if err != nil {
			return err
		}
		where += " AND (" + cond + ")"
		args = append(args, cargs...)
	}
	order := ""
	for i, sf := range req.SortBy {
		if _, ok := priceFields[sf.Field]; !ok {
			return httpx.Invalid(fmt.Sprintf("sort_by[%d].field", i), "invalid_value", "unknown field %q", sf.Field)
		}
		dir, err := s.d.direction(sf.Direction, fmt.Sprintf("sort_by[%d].direction", i))
		if err != nil {
			return err
		}
		order += sf.Field + " " + dir + ", "
	}
	order += "llm_id ASC, effective_date DESC, id ASC"
	q := `SELECT ` + priceColumns + ` FROM trace_prices WHERE ` + where + ` ORDER BY ` + order
	lim, off, err := limitOffset(req.Limit, req.Offset)
	if err != nil {
		return err
	}
	q += ` LIMIT ? OFFSET ?`
	args = append(args, lim, off)
	rows, err := s.db.QueryContext(r.Context(), s.d.dyn(q), args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	results := []map[string]any{}
	for rows.Next() {
		pr, err := scanPrice(rows)
		if err != nil {
			return err
		}
		full := priceJSON(pr)
		if len(req.Fields) > 0 {
			sel := map[string]any{}
			for _, f := range req.Fields {
				sel[f] = full[f]
			}
			full = sel
		}
		results = append(results, full)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"results": results})
	return nil
}

func priceJSON(p *Price) map[string]any {
	var by any
	if p.CreatedBy != "" {
		by = p.CreatedBy
	}
	return map[string]any{
		"id": p.ID, "llm_id": p.LLMID, "prompt_token_cost": p.PromptTokenCost,
		"completion_token_cost": p.CompletionTokenCost, "prompt_token_cost_unit": p.PromptTokenCostUnit,
		"completion_token_cost_unit": p.CompletionTokenCostUnit, "effective_date": formatTime(p.EffectiveDate),
		"provider_id": p.ProviderID, "pricing_level": p.PricingLevel, "pricing_level_id": p.PricingLevelID,
		"created_by": by, "created_at": formatTime(p.CreatedAt),
	}
}

// decodePurge reads a purge request {project_id, query} (/cost/purge,
// /feedback/purge): the authorized project and the ids the query names
// (at most MaxDeleteIDs, else 413).
func decodePurge(p *auth.Principal, body []byte) (entity, name string, ids []string, err error) {
	var req struct {
		ProjectID string          `json:"project_id"`
		Query     json.RawMessage `json:"query"`
	}
	if err := decodeAt(body, &req, ""); err != nil {
		return "", "", nil, err
	}
	if entity, name, err = authorize(p, req.ProjectID, "project_id"); err != nil {
		return "", "", nil, err
	}
	if jsonKindOf(req.Query) != 'o' {
		return "", "", nil, httpx.Invalid("query", "missing_field", `required: a query by ids, e.g. {"$expr": {"$eq": [{"$getField": "id"}, {"$literal": "<id>"}]}}`)
	}
	if ids, err = purgeIDs(req.Query); err != nil {
		return "", "", nil, err
	}
	if len(ids) > MaxDeleteIDs {
		return "", "", nil, &httpx.Error{Status: http.StatusRequestEntityTooLarge, Param: "query", Code: "too_many_ids",
			Message: fmt.Sprintf("query: at most %d ids per purge, got %d", MaxDeleteIDs, len(ids))}
	}
	return entity, name, ids, nil
}

func (s *Service) handleCostPurge(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	entity, name, ids, err := decodePurge(p, body)
	if err != nil {
		return err
	}
	if len(ids) > 0 {
		_, err = s.exec(r.Context(), `DELETE FROM trace_prices WHERE pricing_level = 'project' AND pricing_level_id = ?
			AND `+s.d.inList("id", "?"), entity+"/"+name, s.d.listArg(ids))
		s.invalidatePrices()
		if err != nil {
			return err
		}
	}
	writeRaw(w, http.StatusOK, "application/json", []byte("{}\n"))
	return nil
}

// ---- default-level prices: Go API and file (the CLI is cmd/flywheel's) ----

// SetDefaultPrice sets a default-level price (provider "default", unit USD)
// for modelID effective from `effective` (zero = now). A price of the same
// model, provider and effective date is replaced.
func (s *Service) SetDefaultPrice(ctx context.Context, modelID string, promptCost, completionCost float64, effective time.Time) error {
	return s.SetProviderPrice(ctx, "default", modelID, promptCost, completionCost, effective)
}

// SetProviderPrice is SetDefaultPrice for the default-level price of
// another provider id (`flywheel prices set --provider`).
func (s *Service) SetProviderPrice(ctx context.Context, provider, modelID string, promptCost, completionCost float64, effective time.Time) error {
	eff := effective
	if eff.IsZero() {
		eff = s.now()
	}
	defer s.invalidatePrices()
	return s.setDefaultPrice(ctx, &Price{LLMID: modelID, PromptTokenCost: promptCost, CompletionTokenCost: completionCost,
		PromptTokenCostUnit: "USD", CompletionTokenCostUnit: "USD", ProviderID: provider, EffectiveDate: eff.UnixMicro()})
}

// setDefaultPrice inserts default-level price p, or replaces the costs of
// the one of the same model, provider and effective date.
func (s *Service) setDefaultPrice(ctx context.Context, p *Price) error {
	d := s.d
	if p.LLMID == "" {
		return errors.New("trace: model id is required")
	}
	if p.PromptTokenCost < 0 || p.CompletionTokenCost < 0 {
		return errors.New("trace: token costs must not be negative")
	}
	if !d.postgres {
		s.writeMu.Lock()
		defer s.writeMu.Unlock()
	}
	now := s.now()
	return runTx(ctx, s.db, func(tx *sql.Tx) error {
		if d.postgres {
			// nodes loading one prices file at start: one row per model,
			// provider and date, not one per node
			if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, priceLockClass, p.LLMID); err != nil {
				return err
			}
		}
		res, err := tx.ExecContext(ctx, d.sql(`UPDATE trace_prices SET prompt_token_cost = ?, completion_token_cost = ?,
		prompt_token_cost_unit = ?, completion_token_cost_unit = ?
		WHERE pricing_level = 'default' AND pricing_level_id = 'default' AND llm_id = ? AND provider_id = ? AND effective_date = ?`),
			p.PromptTokenCost, p.CompletionTokenCost, p.PromptTokenCostUnit, p.CompletionTokenCostUnit, p.LLMID, p.ProviderID, p.EffectiveDate)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			p.ID = NewUUIDv7()
			p.PricingLevel, p.PricingLevelID = "default", "default"
			p.CreatedBy, p.CreatedAt = "", now.UnixMicro()
			return insertPrice(ctx, tx, d, p)
		}
		return nil
	})
}

// priceLockClass is the first key of the PostgreSQL advisory locks taken
// per model while a default price is set ("prc" in ASCII).
const priceLockClass int32 = 0x707263

// DefaultPrices lists the default-level prices, by model then newest first.
func DefaultPrices(ctx context.Context, db *sql.DB) ([]*Price, error) {
	rows, err := db.QueryContext(ctx, `SELECT `+priceColumns+` FROM trace_prices WHERE pricing_level = 'default'
		ORDER BY llm_id, effective_date DESC, created_at DESC`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Price
	for rows.Next() {
		p, err := scanPrice(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// LoadPricesFile upserts the default-level prices of a JSON file and returns
// how many it read. The file is either an object keyed by model id, like
// /cost/create's "costs":
//
//	{"gpt-4": {"prompt_token_cost": 3e-05, "completion_token_cost": 6e-05,
//	           "effective_date": "2024-01-01T00:00:00Z", "provider_id": "openai"}}
//
// or an array of such objects each with a "model_id". Units default to USD,
// provider_id to "default", and a missing effective_date to the Unix epoch
// (in effect for every call), so loading the same file again changes nothing.
func (s *Service) LoadPricesFile(ctx context.Context, path string) (int, error) {
	defer s.invalidatePrices()
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("trace: prices file: %w", err)
	}
	type entry struct {
		model string
		c     costIn
		path  string
	}
	var entries []entry
	switch jsonKindOf(data) {
	case 'o':
		ms, ok := splitObject(data)
		if !ok {
			return 0, fmt.Errorf("trace: prices file %s: malformed JSON", path)
		}
		for _, m := range ms {
			var c costIn
			if err := decodeAt(m.Value, &c, m.Key); err != nil {
				return 0, fmt.Errorf("trace: prices file %s: %v", path, err)
			}
			entries = append(entries, entry{m.Key, c, m.Key})
		}
	case 'a':
		var list []struct {
			ModelID string `json:"model_id"`
			costIn
		}
		if err := decodeAt(data, &list, ""); err != nil {
			return 0, fmt.Errorf("trace: prices file %s: %v", path, err)
		}
		for i, l := range list {
			if l.ModelID == "" {
				return 0, fmt.Errorf("trace: prices file %s: [%d].model_id is required", path, i)
			}
			entries = append(entries, entry{l.ModelID, l.costIn, fmt.Sprintf("[%d]", i)})
		}
	default:
		return 0, fmt.Errorf("trace: prices file %s: expected a JSON object or array", path)
	}
	for _, e := range entries {
		p, err := e.c.toPrice(e.model, e.path, 0)
		if err != nil {
			return 0, fmt.Errorf("trace: prices file %s: %v", path, err)
		}
		if err := s.setDefaultPrice(ctx, p); err != nil {
			return 0, err
		}
	}
	return len(entries), nil
}
