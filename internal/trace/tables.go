package trace

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"flywheel/internal/auth"
	"flywheel/internal/httpx"
)

// Tables: the rows of datasets and evaluation results, as the Weave SDKs
// write them (/table/create, /table/update, /table/create_from_digests) and
// read them (/table/query, /table/query_stats, /table/query_stats_batch).
// Rows are content-addressed per project; a table is its rows' digests in
// order, content-addressed by them, exactly as Weave computes both
// (weave/trace/serialization/digest.py): a row's digest is Digest of
// json.dumps(row, sort_keys=True); a table's is the hex SHA-256 of its
// rows' digests concatenated. So the SDK's refs (weave:///e/p/table/<digest>,
// .../id/<row digest>) are the same on flywheel as on Weave.

// Default bounds of the table store (Options.MaxTableRows, MaxRowBytes).
const (
	DefaultMaxTableRows = 1_000_000
	DefaultMaxRowBytes  = 1 << 20
	// maxStatsDigests bounds /table/query_stats_batch's digests.
	maxStatsDigests = 1000
	// tableChunk is the number of rows written per INSERT statement.
	tableChunk = 500
)

func (s *Service) maxTableRows() int {
	if s.opts.MaxTableRows > 0 {
		return s.opts.MaxTableRows
	}
	return DefaultMaxTableRows
}

func (s *Service) maxRowBytes() int {
	if s.opts.MaxRowBytes > 0 {
		return s.opts.MaxRowBytes
	}
	return DefaultMaxRowBytes
}

// tableRow is one row as stored: its digest and canonical JSON text.
type tableRow struct {
	digest string
	val    []byte
}

// tableDigest is Weave's compute_table_digest.
func tableDigest(rowDigests []string) string {
	h := sha256.New()
	for _, d := range rowDigests {
		h.Write([]byte(d))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// parseRow validates one row (a JSON object within the size bound) and
// computes its digest.
func (s *Service) parseRow(raw json.RawMessage, path string) (tableRow, error) {
	if jsonKindOf(raw) != 'o' {
		return tableRow{}, httpx.Invalid(path, "invalid_type", "a table row must be a JSON object")
	}
	val, err := Canonicalize(raw)
	if err != nil {
		return tableRow{}, httpx.Invalid(path, "invalid_json", "%s", err.Error())
	}
	if limit := s.maxRowBytes(); len(val) > limit {
		return tableRow{}, &httpx.Error{Status: http.StatusRequestEntityTooLarge, Param: path, Code: "row_too_large",
			Message: fmt.Sprintf("%s: the row is %d bytes as stored JSON; the limit is %d bytes", path, len(val), limit)}
	}
	sorted, err := canonicalSorted(val)
	if err != nil {
		return tableRow{}, httpx.Invalid(path, "invalid_json", "%s", err.Error())
	}
	return tableRow{digest: Digest(sorted), val: val}, nil
}

func (s *Service) tooManyRows(path string, n int) error {
	return &httpx.Error{Status: http.StatusRequestEntityTooLarge, Param: path, Code: "too_many_rows",
		Message: fmt.Sprintf("%s: a table holds at most %d rows, this one would hold %d", path, s.maxTableRows(), n)}
}

func (s *Service) handleTableCreate(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	var req struct {
		Table *struct {
			ProjectID      string             `json:"project_id"`
			Rows           *[]json.RawMessage `json:"rows"`
			ExpectedDigest *string            `json:"expected_digest"`
		} `json:"table"`
	}
	if err := decodeAt(body, &req, ""); err != nil {
		return err
	}
	t := req.Table
	if t == nil {
		return httpx.Invalid("table", "missing_field", "required: an object {project_id, rows}")
	}
	entity, name, err := authorize(p, t.ProjectID, "table.project_id")
	if err != nil {
		return err
	}
	if t.Rows == nil {
		return httpx.Invalid("table.rows", "missing_field", "required: an array of row objects")
	}
	if len(*t.Rows) > s.maxTableRows() {
		return s.tooManyRows("table.rows", len(*t.Rows))
	}
	rows := make([]tableRow, len(*t.Rows))
	digests := make([]string, len(rows))
	for i, raw := range *t.Rows {
		if rows[i], err = s.parseRow(raw, fmt.Sprintf("table.rows[%d]", i)); err != nil {
			return err
		}
		digests[i] = rows[i].digest
	}
	digest := tableDigest(digests)
	if t.ExpectedDigest != nil && *t.ExpectedDigest != digest {
		return httpx.Invalid("table.expected_digest", "digest_mismatch", "the rows' table digest is %s, not %s", digest, *t.ExpectedDigest)
	}
	if err := s.projectTx(r.Context(), entity, name, func(tx *sql.Tx, proj int64) error {
		if err := s.insertRows(r.Context(), tx, proj, rows); err != nil {
			return err
		}
		return s.insertTable(r.Context(), tx, proj, digest, digests)
	}); err != nil {
		return err
	}
	b := append([]byte(`{"digest": `), appendPyString(nil, digest)...)
	b = append(b, `, "row_digests": `...)
	b = appendStrings(b, digests)
	writeRaw(w, http.StatusOK, "application/json", append(b, "}\n"...))
	return nil
}

func appendStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendPyString(b, s)
	}
	return append(b, ']')
}

// insertRows stores rows not yet in the project (content-addressed: a row
// already stored is the same value).
func (s *Service) insertRows(ctx context.Context, tx *sql.Tx, proj int64, rows []tableRow) error {
	return s.insertChunked(ctx, tx, `INSERT INTO trace_table_rows (project, digest, val, size_bytes) VALUES `,
		` ON CONFLICT (project, digest) DO NOTHING`, len(rows), func(i int) []any {
			return []any{proj, rows[i].digest, bytesStr(rows[i].val), len(rows[i].val)}
		})
}

// insertChunked runs head (?, ?, ...), (...) tail with the n rows' values
// (row(i), all of one length), tableChunk rows per statement.
func (s *Service) insertChunked(ctx context.Context, tx *sql.Tx, head, tail string, n int, row func(i int) []any) error {
	for start := 0; start < n; start += tableChunk {
		var sb strings.Builder
		sb.WriteString(head)
		var args []any
		for i := start; i < min(start+tableChunk, n); i++ {
			vals := row(i)
			if i > start {
				sb.WriteString(", ")
			}
			sb.WriteString("(?" + strings.Repeat(", ?", len(vals)-1) + ")")
			args = append(args, vals...)
		}
		sb.WriteString(tail)
		if _, err := tx.ExecContext(ctx, s.d.dyn(sb.String()), args...); err != nil {
			return err
		}
	}
	return nil
}

// insertTable records table digest as the rows rowDigests in order, unless
// the project has it already. Every row must be stored.
func (s *Service) insertTable(ctx context.Context, tx *sql.Tx, proj int64, digest string, rowDigests []string) error {
	res, err := tx.ExecContext(ctx, s.d.sql(`INSERT INTO trace_tables (project, digest, row_count, size_bytes, created_at)
		VALUES (?, ?, ?, 0, ?) ON CONFLICT (project, digest) DO NOTHING`), proj, digest, len(rowDigests), s.now().UnixMicro())
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err // the table exists: same digest, same rows
	}
	if err := s.insertChunked(ctx, tx, `INSERT INTO trace_table_members (project, table_digest, idx, row_digest) VALUES `, "",
		len(rowDigests), func(i int) []any { return []any{proj, digest, i, rowDigests[i]} }); err != nil {
		return err
	}
	// the table's storage size: its rows' stored JSON, each occurrence counted
	_, err = tx.ExecContext(ctx, s.d.sql(`UPDATE trace_tables SET size_bytes = (SELECT COALESCE(SUM(r.size_bytes), 0)
		FROM trace_table_members m JOIN trace_table_rows r ON r.project = m.project AND r.digest = m.row_digest
		WHERE m.project = ?1 AND m.table_digest = ?2) WHERE project = ?1 AND digest = ?2`), proj, digest)
	return err
}

// tableRowDigests returns the rows of table digest in order; found=false
// when the project has no such table.
func (s *Service) tableRowDigests(ctx context.Context, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}, proj int64, digest string) ([]string, bool, error) {
	rows, err := q.QueryContext(ctx, s.d.sql(`SELECT t.row_count, m.row_digest FROM trace_tables t
		LEFT JOIN trace_table_members m ON m.project = t.project AND m.table_digest = t.digest
		WHERE t.project = ? AND t.digest = ? ORDER BY m.idx`), proj, digest)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	var out []string
	found := false
	for rows.Next() {
		var n int64
		var d sql.NullString
		if err := rows.Scan(&n, &d); err != nil {
			return nil, false, err
		}
		if !found {
			found = true
			out = make([]string, 0, n)
		}
		if d.Valid {
			out = append(out, d.String)
		}
	}
	return out, found, rows.Err()
}

func (s *Service) handleTableCreateFromDigests(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	var req struct {
		ProjectID      string    `json:"project_id"`
		RowDigests     *[]string `json:"row_digests"`
		ExpectedDigest *string   `json:"expected_digest"`
	}
	if err := decodeAt(body, &req, ""); err != nil {
		return err
	}
	entity, name, err := authorize(p, req.ProjectID, "project_id")
	if err != nil {
		return err
	}
	if req.RowDigests == nil {
		return httpx.Invalid("row_digests", "missing_field", "required: an array of row digests")
	}
	digests := *req.RowDigests
	if len(digests) > s.maxTableRows() {
		return s.tooManyRows("row_digests", len(digests))
	}
	digest := tableDigest(digests)
	if req.ExpectedDigest != nil && *req.ExpectedDigest != digest {
		return httpx.Invalid("expected_digest", "digest_mismatch", "the rows' table digest is %s, not %s", digest, *req.ExpectedDigest)
	}
	ctx := r.Context()
	if err := s.projectTx(ctx, entity, name, func(tx *sql.Tx, proj int64) error {
		if err := s.checkRowsExist(ctx, tx, proj, digests, "row_digests"); err != nil {
			return err
		}
		return s.insertTable(ctx, tx, proj, digest, digests)
	}); err != nil {
		return err
	}
	writeRaw(w, http.StatusOK, "application/json", append(append([]byte(`{"digest": `), appendPyString(nil, digest)...), "}\n"...))
	return nil
}

// checkRowsExist is a 400 naming the first digest (path[i]) of a row the
// project does not have.
func (s *Service) checkRowsExist(ctx context.Context, tx *sql.Tx, proj int64, digests []string, path string) error {
	st := s.d.sql(`SELECT 1 FROM trace_table_rows WHERE project = ? AND digest = ?`)
	seen := make(map[string]bool, len(digests))
	for i, d := range digests {
		if seen[d] {
			continue
		}
		var one int
		err := tx.QueryRowContext(ctx, st, proj, d).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return httpx.Invalid(fmt.Sprintf("%s[%d]", path, i), "not_found", "no row with digest %q in this project", d)
		}
		if err != nil {
			return err
		}
		seen[d] = true
	}
	return nil
}

type tableUpdate struct {
	Append *struct {
		Row json.RawMessage `json:"row"`
	} `json:"append"`
	Pop *struct {
		Index *int64 `json:"index"`
	} `json:"pop"`
	Insert *struct {
		Index *int64          `json:"index"`
		Row   json.RawMessage `json:"row"`
	} `json:"insert"`
}

func (s *Service) handleTableUpdate(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	var req struct {
		ProjectID  string         `json:"project_id"`
		BaseDigest *string        `json:"base_digest"`
		Updates    *[]tableUpdate `json:"updates"`
	}
	if err := decodeAt(body, &req, ""); err != nil {
		return err
	}
	entity, name, err := authorize(p, req.ProjectID, "project_id")
	if err != nil {
		return err
	}
	if req.BaseDigest == nil || *req.BaseDigest == "" {
		return httpx.Invalid("base_digest", "missing_field", "required: the digest of the table to update")
	}
	if req.Updates == nil {
		return httpx.Invalid("updates", "missing_field", "required: an array of {append}, {pop} or {insert} updates")
	}
	// every row parsed before anything is read or written
	newRows := make([]*tableRow, len(*req.Updates))
	for i, u := range *req.Updates {
		path := fmt.Sprintf("updates[%d]", i)
		n := 0
		var raw json.RawMessage
		if u.Append != nil {
			n++
			raw, path = u.Append.Row, path+".append.row"
		}
		if u.Insert != nil {
			n++
			raw, path = u.Insert.Row, path+".insert.row"
			if u.Insert.Index == nil {
				return httpx.Invalid(fmt.Sprintf("updates[%d].insert.index", i), "missing_field", "required: an integer")
			}
		}
		if u.Pop != nil {
			n++
			if u.Pop.Index == nil {
				return httpx.Invalid(path+".pop.index", "missing_field", "required: an integer")
			}
		}
		if n != 1 {
			return httpx.Invalid(path, "invalid_value", "expected exactly one of append, pop or insert")
		}
		if u.Pop == nil {
			row, err := s.parseRow(raw, path)
			if err != nil {
				return err
			}
			newRows[i] = &row
		}
	}
	ctx := r.Context()
	var digest string
	var updated []string
	notFound := httpx.NotFound("table %s not found in project %s/%s", *req.BaseDigest, entity, name)
	err = s.projectTx(ctx, entity, name, func(tx *sql.Tx, proj int64) error {
		digests, found, err := s.tableRowDigests(ctx, tx, proj, *req.BaseDigest)
		if err != nil {
			return err
		}
		if !found {
			return notFound
		}
		var stored []tableRow
		updated = updated[:0]
		for i, u := range *req.Updates {
			switch {
			case u.Append != nil:
				digests = append(digests, newRows[i].digest)
			case u.Insert != nil:
				at := *u.Insert.Index
				if at < 0 || at > int64(len(digests)) {
					return httpx.Invalid(fmt.Sprintf("updates[%d].insert.index", i), "invalid_value",
						"index %d is outside the table's %d rows", at, len(digests))
				}
				digests = append(digests, "")
				copy(digests[at+1:], digests[at:])
				digests[at] = newRows[i].digest
			default:
				at := *u.Pop.Index
				if at < 0 || at >= int64(len(digests)) {
					return httpx.Invalid(fmt.Sprintf("updates[%d].pop.index", i), "invalid_value",
						"index %d is outside the table's %d rows", at, len(digests))
				}
				digests = append(digests[:at], digests[at+1:]...)
			}
			if newRows[i] != nil {
				stored = append(stored, *newRows[i])
				updated = append(updated, newRows[i].digest)
			}
			if len(digests) > s.maxTableRows() {
				return s.tooManyRows(fmt.Sprintf("updates[%d]", i), len(digests))
			}
		}
		if err := s.insertRows(ctx, tx, proj, stored); err != nil {
			return err
		}
		digest = tableDigest(digests)
		return s.insertTable(ctx, tx, proj, digest, digests)
	})
	if err != nil {
		return err
	}
	b := append([]byte(`{"digest": `), appendPyString(nil, digest)...)
	b = append(b, `, "updated_row_digests": `...)
	b = appendStrings(b, updated)
	writeRaw(w, http.StatusOK, "application/json", append(b, "}\n"...))
	return nil
}

func (s *Service) handleTableQuery(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	var req struct {
		tableReq
		Filter *struct {
			RowDigests []string `json:"row_digests"`
		} `json:"filter"`
		Limit  *int64      `json:"limit"`
		Offset *int64      `json:"offset"`
		SortBy []sortField `json:"sort_by"`
	}
	if err := decodeAt(body, &req, ""); err != nil {
		return err
	}
	entity, name, err := req.check(p)
	if err != nil {
		return err
	}
	sorts, err := parseTableSorts(s.d, req.SortBy)
	if err != nil {
		return err
	}
	lim, off, err := limitOffset(req.Limit, req.Offset)
	if err != nil {
		return err
	}
	var rowFilter []string
	if req.Filter != nil && req.Filter.RowDigests != nil {
		rowFilter = req.Filter.RowDigests
		if len(rowFilter) > s.maxTableRows() {
			return s.tooManyRows("filter.row_digests", len(rowFilter))
		}
	}
	ctx := r.Context()
	proj, found, err := s.lookupProject(ctx, s.db, entity, name)
	if err != nil {
		return err
	}
	if !found {
		writeRaw(w, http.StatusOK, "application/json", []byte("{\"rows\": []}\n"))
		return nil
	}
	const cols = `SELECT m.idx, m.row_digest, r.val FROM trace_table_members m
		JOIN trace_table_rows r ON r.project = m.project AND r.digest = m.row_digest
		WHERE m.project = ? AND m.table_digest = ?`
	if len(sorts) > 0 {
		return s.sortedTablePage(w, r, proj, *req.Digest, cols, rowFilter, sorts, lim, off)
	}
	var rows *sql.Rows
	if rowFilter == nil {
		// idx counts 0..n-1, so the offset is a key range: a page costs its
		// own rows however deep it is
		rows, err = s.db.QueryContext(ctx, s.d.sql(cols+` AND m.idx >= ? ORDER BY m.idx LIMIT ?`), proj, *req.Digest, off, lim)
	} else {
		rows, err = s.db.QueryContext(ctx, s.d.dyn(cols+` AND `+s.d.inList("m.row_digest", "?")+` ORDER BY m.idx LIMIT ? OFFSET ?`),
			proj, *req.Digest, s.d.listArg(rowFilter), lim, off)
	}
	if err != nil {
		return err
	}
	defer rows.Close()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 32<<10)
	bw.WriteString(`{"rows": [`)
	var line []byte
	var val sql.RawBytes
	for n := 0; rows.Next(); n++ {
		var idx int64
		var d string
		if err := rows.Scan(&idx, &d, &val); err != nil {
			return fmt.Errorf("%w: %v", httpx.ErrResponseStarted, err)
		}
		line = appendTableRow(line[:0], n, idx, d, val)
		if _, err := bw.Write(line); err != nil {
			return nil // client went away
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%w: %v", httpx.ErrResponseStarted, err)
	}
	bw.WriteString("]}\n")
	_ = bw.Flush()
	return nil
}

// tableReq is what every table read names: the project and the table's digest.
type tableReq struct {
	ProjectID string  `json:"project_id"`
	Digest    *string `json:"digest"`
}

// check authorizes the project and requires the digest.
func (t *tableReq) check(p *auth.Principal) (entity, name string, err error) {
	if entity, name, err = authorize(p, t.ProjectID, "project_id"); err != nil {
		return "", "", err
	}
	if t.Digest == nil || *t.Digest == "" {
		return "", "", httpx.Invalid("digest", "missing_field", "required: the table's digest")
	}
	return entity, name, nil
}

func (s *Service) handleTableQueryStats(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	var req tableReq
	if err := decodeAt(body, &req, ""); err != nil {
		return err
	}
	entity, name, err := req.check(p)
	if err != nil {
		return err
	}
	stats, err := s.tableStats(r.Context(), entity, name, []string{*req.Digest})
	if err != nil {
		return err
	}
	var count int64
	if len(stats) == 1 {
		count = stats[0].count
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]int64{"count": count})
	return nil
}

type tableStat struct {
	digest      string
	count, size int64
}

// tableStats returns the stats of the project's tables among digests, in
// the order asked (missing tables left out).
func (s *Service) tableStats(ctx context.Context, entity, name string, digests []string) ([]tableStat, error) {
	proj, found, err := s.lookupProject(ctx, s.db, entity, name)
	if err != nil || !found || len(digests) == 0 {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, s.d.dyn(`SELECT digest, row_count, size_bytes FROM trace_tables WHERE project = ? AND `+
		s.d.inList("digest", "?")), proj, s.d.listArg(digests))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	by := map[string]tableStat{}
	for rows.Next() {
		var t tableStat
		if err := rows.Scan(&t.digest, &t.count, &t.size); err != nil {
			return nil, err
		}
		by[t.digest] = t
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([]tableStat, 0, len(by))
	for _, d := range digests {
		if t, ok := by[d]; ok {
			out = append(out, t)
			delete(by, d)
		}
	}
	return out, nil
}

func (s *Service) handleTableQueryStatsBatch(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	var req struct {
		ProjectID          string   `json:"project_id"`
		Digests            []string `json:"digests"`
		IncludeStorageSize *bool    `json:"include_storage_size"`
	}
	if err := decodeAt(body, &req, ""); err != nil {
		return err
	}
	entity, name, err := authorize(p, req.ProjectID, "project_id")
	if err != nil {
		return err
	}
	if len(req.Digests) > maxStatsDigests {
		return &httpx.Error{Status: http.StatusRequestEntityTooLarge, Param: "digests", Code: "too_many_digests",
			Message: fmt.Sprintf("digests: at most %d per request, got %d", maxStatsDigests, len(req.Digests))}
	}
	stats, err := s.tableStats(r.Context(), entity, name, req.Digests)
	if err != nil {
		return err
	}
	b := []byte(`{"tables": [`)
	for i, t := range stats {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, `{"digest": `...)
		b = appendPyString(b, t.digest)
		b = append(b, `, "count": `...)
		b = strconv.AppendInt(b, t.count, 10)
		b = append(b, `, "storage_size_bytes": `...)
		if isTrue(req.IncludeStorageSize) {
			b = strconv.AppendInt(b, t.size, 10)
		} else {
			b = append(b, "null"...)
		}
		b = append(b, '}')
	}
	writeRaw(w, http.StatusOK, "application/json", append(b, "]}\n"...))
	return nil
}

// appendTableRow writes one row of a /table/query answer (the n-th).
func appendTableRow(b []byte, n int, idx int64, digest string, val []byte) []byte {
	if n > 0 {
		b = append(b, ", "...)
	}
	b = append(b, `{"digest": `...)
	b = appendPyString(b, digest)
	b = append(b, `, "val": `...)
	b = append(b, val...)
	b = append(b, `, "original_index": `...)
	b = strconv.AppendInt(b, idx, 10)
	return append(b, '}')
}

// ---- sorting a table by its rows' fields ----
//
// A sort is done in Go, over the table's rows read in table order, so both
// databases answer the same order: values compare by kind first (missing or
// null, then false/true, numbers, strings, then arrays and objects by their
// stored JSON text), numbers numerically, strings byte by byte; ties keep
// table order. Only tables of at most maxSortBytes of stored rows are
// sorted (a 400 naming sort_by above it): the rows are held in memory.

const maxSortBytes = 64 << 20

type tableSort struct {
	path []string
	desc bool
}

// parseTableSorts validates sort_by: fields are dot-separated keys into the
// row's value (a leading "val." is the value itself).
func parseTableSorts(d *dialect, sortBy []sortField) ([]tableSort, error) {
	var out []tableSort
	for i, sf := range sortBy {
		path := fmt.Sprintf("sort_by[%d]", i)
		field := strings.TrimPrefix(sf.Field, "val.")
		parts := strings.Split(field, ".")
		if field == "" || len(parts) > 16 || slices.Contains(parts, "") {
			return nil, httpx.Invalid(path+".field", "invalid_value", "expected dot-separated keys of the rows, got %q", sf.Field)
		}
		dir, err := d.direction(sf.Direction, path+".direction")
		if err != nil {
			return nil, err
		}
		out = append(out, tableSort{path: parts, desc: strings.HasPrefix(dir, "DESC")})
	}
	return out, nil
}

// sortKey is a row's value at a sort path, ready to compare.
type sortKey struct {
	kind int // 0 missing/null, 1 bool, 2 number, 3 string, 4 array or object
	num  float64
	str  string // string value, or the JSON text of kind 4
}

func sortKeyOf(val []byte, path []string) sortKey {
	cur := val
	for _, k := range path {
		ms, ok := splitObject(cur)
		if !ok {
			return sortKey{}
		}
		var next []byte
		for _, m := range ms {
			if m.Key == k {
				next = m.Value
			}
		}
		if next == nil {
			return sortKey{}
		}
		cur = next
	}
	switch jsonKindOf(cur) {
	case 'b':
		return sortKey{kind: 1, num: map[bool]float64{false: 0, true: 1}[string(cur) == "true"]}
	case 'n':
		f, _ := strconv.ParseFloat(string(cur), 64)
		return sortKey{kind: 2, num: f}
	case 's':
		var v string
		_ = json.Unmarshal(cur, &v)
		return sortKey{kind: 3, str: v}
	case 'a', 'o':
		return sortKey{kind: 4, str: string(cur)}
	}
	return sortKey{}
}

func compareKeys(a, b sortKey) int {
	if a.kind != b.kind {
		return a.kind - b.kind
	}
	switch a.kind {
	case 1, 2:
		return cmp.Compare(a.num, b.num)
	case 3, 4:
		return strings.Compare(a.str, b.str)
	}
	return 0
}

func (s *Service) sortedTablePage(w http.ResponseWriter, r *http.Request, proj int64, digest, cols string, rowFilter []string,
	sorts []tableSort, lim, off int64) error {
	ctx := r.Context()
	var size int64
	err := s.db.QueryRowContext(ctx, s.d.sql(`SELECT size_bytes FROM trace_tables WHERE project = ? AND digest = ?`), proj, digest).Scan(&size)
	if errors.Is(err, sql.ErrNoRows) {
		writeRaw(w, http.StatusOK, "application/json", []byte("{\"rows\": []}\n"))
		return nil
	}
	if err != nil {
		return err
	}
	if size > maxSortBytes {
		return httpx.Invalid("sort_by", "too_large", "a table is sorted only up to %d bytes of rows; this one has %d (page it in table order instead)", maxSortBytes, size)
	}
	var rows *sql.Rows
	if rowFilter == nil {
		rows, err = s.db.QueryContext(ctx, s.d.sql(cols+` ORDER BY m.idx`), proj, digest)
	} else {
		rows, err = s.db.QueryContext(ctx, s.d.dyn(cols+` AND `+s.d.inList("m.row_digest", "?")+` ORDER BY m.idx`), proj, digest, s.d.listArg(rowFilter))
	}
	if err != nil {
		return err
	}
	defer rows.Close()
	type row struct {
		idx    int64
		digest string
		val    []byte
		keys   []sortKey
	}
	var all []row
	for rows.Next() {
		var x row
		if err := rows.Scan(&x.idx, &x.digest, &x.val); err != nil {
			return err
		}
		x.keys = make([]sortKey, len(sorts))
		for i, so := range sorts {
			x.keys[i] = sortKeyOf(x.val, so.path)
		}
		all = append(all, x)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	slices.SortStableFunc(all, func(a, b row) int {
		for i, so := range sorts {
			if c := compareKeys(a.keys[i], b.keys[i]); c != 0 {
				if so.desc {
					return -c
				}
				return c
			}
		}
		return 0
	})
	start := min(off, int64(len(all)))
	end := start + min(lim, int64(len(all))-start)
	b := []byte(`{"rows": [`)
	for n, x := range all[start:end] {
		b = appendTableRow(b, n, x.idx, x.digest, x.val)
	}
	writeRaw(w, http.StatusOK, "application/json", append(b, "]}\n"...))
	return nil
}
