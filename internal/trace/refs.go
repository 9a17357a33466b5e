package trace

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"flywheel/internal/auth"
	"flywheel/internal/httpx"
)

// Refs: /refs/read_batch resolves Weave refs
// weave:///entity/project/object/name:digest (or .../op/...), followed by
// edges /attr/<name>, /key/<key>, /index/<i> into the value and /id/<row
// digest> into a table the value refers to; a string along the way that is
// itself a ref is followed. /obj/delete soft-deletes object versions.

const (
	maxRefsPerBatch = 1000
	maxRefEdges     = 64
	// maxRefHops bounds the refs followed while resolving one ref (a value
	// may refer to objects that refer to others).
	maxRefHops = 64
	// maxObjDeleteDigests is Weave's bound on one /obj/delete.
	maxObjDeleteDigests = 100
)

// parsedRef is a ref split into its parts.
type parsedRef struct {
	entity, project, kind, name, digest string
	edges                               []string // pairs: edge kind, argument (unescaped)
}

// parseRef parses an external Weave ref.
func parseRef(ref string) (*parsedRef, bool) {
	rest, ok := strings.CutPrefix(ref, "weave:///")
	if !ok {
		return nil, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) < 4 {
		return nil, false
	}
	r := &parsedRef{entity: parts[0], project: parts[1], kind: parts[2]}
	switch r.kind {
	case "object", "op":
		nd := parts[3]
		i := strings.LastIndexByte(nd, ':')
		if i <= 0 || i == len(nd)-1 {
			return nil, false
		}
		r.name, r.digest = nd[:i], nd[i+1:]
	case "table":
		r.digest = parts[3]
	default:
		return nil, false // calls are not values
	}
	extra := parts[4:]
	if len(extra)%2 != 0 || len(extra)/2 > maxRefEdges {
		return nil, false
	}
	for i := range extra {
		v, err := url.PathUnescape(extra[i])
		if err != nil {
			return nil, false
		}
		extra[i] = v
	}
	r.edges = extra
	return r, true
}

func (s *Service) handleRefsReadBatch(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	var req struct {
		Refs *[]string `json:"refs"`
	}
	if err := decodeAt(body, &req, ""); err != nil {
		return err
	}
	if req.Refs == nil {
		return httpx.Invalid("refs", "missing_field", "required: an array of weave:/// refs")
	}
	if len(*req.Refs) > maxRefsPerBatch {
		return &httpx.Error{Status: http.StatusRequestEntityTooLarge, Param: "refs", Code: "too_many_refs",
			Message: fmt.Sprintf("refs: at most %d per request, got %d", maxRefsPerBatch, len(*req.Refs))}
	}
	b := []byte(`{"vals": [`)
	for i, ref := range *req.Refs {
		path := fmt.Sprintf("refs[%d]", i)
		pr, ok := parseRef(ref)
		if !ok {
			return httpx.Invalid(path, "invalid_value", "invalid ref %q: expected weave:///entity/project/object/name:digest with edges in pairs", ref)
		}
		hops := 0
		val, err := s.resolveRef(r.Context(), p, pr, path, &hops)
		if err != nil {
			return err
		}
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, val...)
	}
	writeRaw(w, http.StatusOK, "application/json", append(b, "]}\n"...))
	return nil
}

// resolveRef returns the value a ref points at (canonical JSON).
func (s *Service) resolveRef(ctx context.Context, p *auth.Principal, pr *parsedRef, path string, hops *int) ([]byte, error) {
	if *hops++; *hops > maxRefHops {
		return nil, httpx.Invalid(path, "invalid_value", "the ref refers through more than %d refs", maxRefHops)
	}
	if _, _, err := authorize(p, pr.entity+"/"+pr.project, path); err != nil {
		return nil, err
	}
	notFound := func(what string) error {
		return httpx.NotFound("%s: %s not found in project %s/%s", path, what, pr.entity, pr.project)
	}
	proj, found, err := s.lookupProject(ctx, s.db, pr.entity, pr.project)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, notFound("the ref's project")
	}
	var val []byte
	var table string // the digest of the table val is, when it is one
	if pr.kind == "table" {
		table = pr.digest
	} else {
		q := `SELECT val FROM trace_objects WHERE project = ?1 AND object_id = ?2 AND deleted_at IS NULL AND `
		args := []any{proj, pr.name}
		if pr.digest == "latest" {
			q += `version_index = (SELECT MAX(version_index) FROM trace_objects WHERE project = ?1 AND object_id = ?2 AND deleted_at IS NULL)`
		} else {
			q += `digest = ?3`
			args = append(args, pr.digest)
		}
		err := s.db.QueryRowContext(ctx, s.d.sql(q), args...).Scan(&val)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, notFound("object " + pr.name + ":" + pr.digest)
		}
		if err != nil {
			return nil, err
		}
	}
	for i := 0; i < len(pr.edges); i += 2 {
		edge, arg := pr.edges[i], pr.edges[i+1]
		if table == "" {
			if inner, ok := refString(val); ok {
				ipr, ok := parseRef(inner)
				if !ok {
					return nil, notFound("a value at edge " + strconv.Itoa(i/2) + " (an unparseable ref)")
				}
				if ipr.kind == "table" && len(ipr.edges) == 0 {
					if _, _, err := authorize(p, ipr.entity+"/"+ipr.project, path); err != nil {
						return nil, err
					}
					if ipr.entity != pr.entity || ipr.project != pr.project {
						return nil, notFound("table of another project")
					}
					table = ipr.digest
				} else if val, err = s.resolveRef(ctx, p, ipr, path, hops); err != nil {
					return nil, err
				}
			}
		}
		if table != "" {
			if edge != "id" {
				return nil, notFound(fmt.Sprintf("edge %s/%s of a table (tables take id/<row digest>)", edge, arg))
			}
			err := s.db.QueryRowContext(ctx, s.d.sql(`SELECT r.val FROM trace_table_members m
				JOIN trace_table_rows r ON r.project = m.project AND r.digest = m.row_digest
				WHERE m.project = ? AND m.table_digest = ? AND m.row_digest = ? LIMIT 1`), proj, table, arg).Scan(&val)
			if errors.Is(err, sql.ErrNoRows) {
				return nil, notFound("row " + arg + " of table " + table)
			}
			if err != nil {
				return nil, err
			}
			table = ""
			continue
		}
		var next []byte
		switch edge {
		case "attr", "key":
			if ms, ok := splitObject(val); ok {
				for _, m := range ms {
					if m.Key == arg {
						next = m.Value
					}
				}
			}
		case "index":
			var list []json.RawMessage
			n, err := strconv.Atoi(arg)
			if err == nil && json.Unmarshal(val, &list) == nil && n >= 0 && n < len(list) {
				next = list[n]
			}
		}
		if next == nil {
			return nil, notFound(fmt.Sprintf("%s %q", edge, arg))
		}
		val = next
	}
	if table != "" {
		return nil, httpx.Invalid(path, "invalid_value", "a table ref is read with /table/query, not as a value")
	}
	return val, nil
}

// refString returns the string val holds when it is a weave:/// ref.
func refString(val []byte) (string, bool) {
	if len(val) == 0 || val[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(val, &s) != nil || !strings.HasPrefix(s, "weave:///") {
		return "", false
	}
	return s, true
}

func (s *Service) handleObjDelete(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	var req struct {
		ProjectID string    `json:"project_id"`
		ObjectID  *string   `json:"object_id"`
		Digests   *[]string `json:"digests"`
	}
	if err := decodeAt(body, &req, ""); err != nil {
		return err
	}
	entity, name, err := authorize(p, req.ProjectID, "project_id")
	if err != nil {
		return err
	}
	if req.ObjectID == nil || *req.ObjectID == "" {
		return httpx.Invalid("object_id", "missing_field", "required: the object id")
	}
	if req.Digests != nil && len(*req.Digests) > maxObjDeleteDigests {
		return &httpx.Error{Status: http.StatusRequestEntityTooLarge, Param: "digests", Code: "too_many_digests",
			Message: fmt.Sprintf("digests: at most %d per request, got %d", maxObjDeleteDigests, len(*req.Digests))}
	}
	ctx := r.Context()
	notFound := httpx.NotFound("object %s not found in project %s/%s", *req.ObjectID, entity, name)
	proj, found, err := s.lookupProject(ctx, s.db, entity, name)
	if err != nil {
		return err
	}
	if !found {
		return notFound
	}
	q := `UPDATE trace_objects SET deleted_at = ? WHERE project = ? AND object_id = ? AND deleted_at IS NULL`
	args := []any{s.now().UnixMicro(), proj, *req.ObjectID}
	if req.Digests != nil && len(*req.Digests) > 0 {
		q += ` AND ` + s.d.inList("digest", "?")
		args = append(args, s.d.listArg(*req.Digests))
	}
	res, err := s.exec(ctx, q, args...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return notFound
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]int64{"num_deleted": n})
	return nil
}
