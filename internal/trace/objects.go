package trace

import (
	"bufio"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"flywheel/internal/auth"
	"flywheel/internal/httpx"
)

// The object store: versioned, content-addressed JSON values per project
// (/obj/create, /obj/read, /objs/query), as the Weave SDKs write them (an op
// is an object whose val points at its code, a file).

// Default bounds of the object and file store (Options.MaxObjectBytes,
// Options.MaxFileBytes).
const (
	DefaultMaxObjectBytes = 16 << 20
	DefaultMaxFileBytes   = 32 << 20
	maxObjectIDLen        = 128
)

// Digest computes a Weave content digest: SHA-256 of data, base64url
// without padding, with '-' written as 'X' and '_' as 'Y' (so a digest is
// alphanumeric). Files are digested over their bytes; objects over
// json.dumps(val, sort_keys=True) (see objectDigest).
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	b := make([]byte, base64.RawURLEncoding.EncodedLen(len(sum)))
	base64.RawURLEncoding.Encode(b, sum[:])
	for i, c := range b {
		switch c {
		case '-':
			b[i] = 'X'
		case '_':
			b[i] = 'Y'
		}
	}
	return string(b)
}

// objectDigest is the digest of a JSON value as Weave computes it for
// /obj/create: Digest of the text Python's json.dumps(val, sort_keys=True)
// writes (separators ", " and ": ", non-ASCII as \uXXXX, keys sorted).
func objectDigest(val []byte) (string, error) {
	sorted, err := canonicalSorted(val)
	if err != nil {
		return "", err
	}
	return Digest(sorted), nil
}

// validObjectID reports whether id is a valid object id: 1 to 128
// characters, each a letter, a digit, '_', '.' or '-' (the charset Weave
// accepts; it keeps refs weave:///entity/project/object/<id>:<digest>
// parseable).
func validObjectID(id string) bool {
	if id == "" || utf8.RuneCountInString(id) > maxObjectIDLen || !utf8.ValidString(id) {
		return false
	}
	for _, r := range id {
		if r != '_' && r != '.' && r != '-' && !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			return false
		}
	}
	return true
}

// objectKind is Weave's get_kind: "op" when the value's type is Op (its
// _type, or weave_type.type when both are present), else "object".
func objectKind(val []byte) string {
	ms, ok := splitObject(val)
	if !ok {
		return "object"
	}
	var typ, weaveType []byte
	for _, m := range ms {
		switch m.Key {
		case "_type":
			typ = m.Value
		case "weave_type":
			weaveType = m.Value
		}
	}
	if typ == nil {
		return "object"
	}
	if weaveType != nil {
		if wt, ok := splitObject(weaveType); ok {
			for _, m := range wt {
				if m.Key == "type" {
					return kindOf(m.Value)
				}
			}
		}
		return "object"
	}
	return kindOf(typ)
}

func kindOf(v []byte) string {
	if string(v) == `"Op"` {
		return "op"
	}
	return "object"
}

// objectClasses is Weave's get_object_classes: for a value with _bases
// ending in [..., "Object" or "BaseObject", "BaseModel"], its leaf class
// (_class_name) and its base class (the class right below Object or
// BaseObject, or the leaf itself).
func objectClasses(val []byte) (leaf, base *string) {
	ms, ok := splitObject(val)
	if !ok {
		return nil, nil
	}
	var bases []string
	var className *string
	for _, m := range ms {
		switch m.Key {
		case "_bases":
			if err := json.Unmarshal(m.Value, &bases); err != nil {
				return nil, nil
			}
		case "_class_name":
			var s string
			if json.Unmarshal(m.Value, &s) == nil {
				className = &s
			}
		}
	}
	n := len(bases)
	if n < 2 || bases[n-1] != "BaseModel" || (bases[n-2] != "Object" && bases[n-2] != "BaseObject") || className == nil {
		return nil, nil
	}
	leaf, base = className, className
	if n > 2 {
		b := bases[n-3]
		base = &b
	}
	return leaf, base
}

type objCreateReq struct {
	Obj *struct {
		ProjectID          string          `json:"project_id"`
		ObjectID           *string         `json:"object_id"`
		Val                json.RawMessage `json:"val"`
		BuiltinObjectClass *string         `json:"builtin_object_class"`
		SetBaseObjectClass *string         `json:"set_base_object_class"`
	} `json:"obj"`
}

func (s *Service) maxObjectBytes() int {
	if s.opts.MaxObjectBytes > 0 {
		return s.opts.MaxObjectBytes
	}
	return DefaultMaxObjectBytes
}

func (s *Service) maxFileBytes() int64 {
	if s.opts.MaxFileBytes > 0 {
		return s.opts.MaxFileBytes
	}
	return DefaultMaxFileBytes
}

func (s *Service) handleObjCreate(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	var req objCreateReq
	if err := decodeAt(body, &req, ""); err != nil {
		return err
	}
	o := req.Obj
	if o == nil {
		return httpx.Invalid("obj", "missing_field", "required: an object {project_id, object_id, val}")
	}
	entity, name, err := authorize(p, o.ProjectID, "obj.project_id")
	if err != nil {
		return err
	}
	if o.ObjectID == nil {
		return httpx.Invalid("obj.object_id", "missing_field", "required: a string")
	}
	if !validObjectID(*o.ObjectID) {
		return httpx.Invalid("obj.object_id", "invalid_value",
			"invalid object id %q: 1 to %d letters, digits, '_', '.' or '-'", *o.ObjectID, maxObjectIDLen)
	}
	if len(o.Val) == 0 {
		return httpx.Invalid("obj.val", "missing_field", "required: any JSON value")
	}
	val, err := Canonicalize(o.Val)
	if err != nil {
		return httpx.Invalid("obj.val", "invalid_json", "%s", err.Error())
	}
	if limit := s.maxObjectBytes(); len(val) > limit {
		return &httpx.Error{Status: http.StatusRequestEntityTooLarge, Param: "obj.val", Code: "object_too_large",
			Message: fmt.Sprintf("the object is %d bytes as stored JSON; the limit is %d bytes", len(val), limit)}
	}
	leaf, base := objectClasses(val)
	if err := checkText(leaf, "obj.val._class_name"); err != nil {
		return err
	}
	if err := checkText(base, "obj.val._bases"); err != nil {
		return err
	}
	class := o.BuiltinObjectClass
	if class == nil {
		class = o.SetBaseObjectClass
	}
	if class != nil {
		// Weave validates the value against its registry of builtin classes
		// and fills in _class_name and _bases; flywheel has no such registry,
		// so it only accepts values that already declare the class.
		if leaf == nil {
			return httpx.Invalid("obj.builtin_object_class", "invalid_value",
				"builtin object class %q: the value must declare it (_class_name and _bases ending in Object or BaseObject, BaseModel)", *class)
		}
		if *leaf != *class {
			return httpx.Invalid("obj.builtin_object_class", "invalid_value",
				"builtin object class %q does not match the value's class %q", *class, *leaf)
		}
	}
	digest, err := objectDigest(val)
	if err != nil {
		return httpx.Invalid("obj.val", "invalid_json", "%s", err.Error())
	}
	if err := s.createObject(r.Context(), entity, name, *o.ObjectID, digest, val, objectKind(val), base, leaf, p.UserID); err != nil {
		return err
	}
	buf := append([]byte(`{"digest": `), appendPyString(nil, digest)...)
	writeRaw(w, http.StatusOK, "application/json", append(buf, "}\n"...))
	return nil
}

// createObject stores a version of object_id unless one with the same
// digest exists (creating the same value again changes nothing, except
// that a deleted version is restored, with its version index).
func (s *Service) createObject(ctx context.Context, entity, name, objectID, digest string, val []byte, kind string,
	base, leaf *string, userID string) error {
	return s.projectTx(ctx, entity, name, func(tx *sql.Tx, proj int64) error {
		if s.d.postgres {
			// Two nodes adding versions of one object at once would both take
			// MAX + 1; the lock (until commit) makes the second wait and see
			// the first's version.
			if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`,
				objectLockClass, strconv.FormatInt(proj, 10)+"/"+objectID); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, s.d.sql(`INSERT INTO trace_objects (project, object_id, digest, version_index, kind,
				base_object_class, leaf_object_class, val, size_bytes, created_by, created_at)
			SELECT ?1, ?2, ?3, COALESCE(MAX(version_index) + 1, 0), ?4, ?5, ?6, ?7, ?8, ?9, ?10
			FROM trace_objects WHERE project = ?1 AND object_id = ?2
			ON CONFLICT (project, object_id, digest) DO UPDATE SET deleted_at = NULL
			WHERE trace_objects.deleted_at IS NOT NULL`),
			proj, objectID, digest, kind, nullStr(base), nullStr(leaf), bytesStr(val), len(val), userID, s.now().UnixMicro())
		return err
	})
}

// objectLockClass is the first key of the PostgreSQL advisory locks taken
// per object while a version is added ("obj" in ASCII).
const objectLockClass int32 = 0x6f626a

// projectTx runs fn in a write transaction (inTx) with the id of project
// entity/name, creating the project.
func (s *Service) projectTx(ctx context.Context, entity, name string, fn func(tx *sql.Tx, proj int64) error) error {
	var proj int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		if proj, err = s.ensureProject(ctx, tx, entity, name); err != nil {
			return err
		}
		return fn(tx, proj)
	})
	if err != nil {
		return err
	}
	s.rememberProject(entity, name, proj)
	return nil
}

// objRow is one object version as read.
type objRow struct {
	objectID, digest, kind string
	versionIndex           int64
	base, leaf, createdBy  sql.NullString
	val                    []byte
	size                   int64
	createdAt              int64
	deletedAt              sql.NullInt64
	isLatest               bool
}

// objColumns selects an objRow from trace_objects o; ?1 is the project and
// ?2 whether val is left out (metadata_only).
const objColumns = `o.object_id, o.digest, o.version_index, o.kind, o.base_object_class, o.leaf_object_class,
	CASE WHEN ?2 THEN '{}' ELSE o.val END, o.size_bytes, o.created_by, o.created_at, o.deleted_at,
	o.version_index = (SELECT MAX(v.version_index) FROM trace_objects v
		WHERE v.project = o.project AND v.object_id = o.object_id AND v.deleted_at IS NULL)`

func scanObj(sc interface{ Scan(...any) error }) (*objRow, error) {
	var o objRow
	if err := sc.Scan(&o.objectID, &o.digest, &o.versionIndex, &o.kind, &o.base, &o.leaf, &o.val, &o.size,
		&o.createdBy, &o.createdAt, &o.deletedAt, &o.isLatest); err != nil {
		return nil, err
	}
	return &o, nil
}

// appendObj writes ObjSchema: every key present, nulls explicit.
func appendObj(b []byte, o *objRow, projectID string, withSize bool) []byte {
	b = append(b, `{"project_id": `...)
	b = appendPyString(b, projectID)
	b = append(b, `, "object_id": `...)
	b = appendPyString(b, o.objectID)
	b = append(b, `, "created_at": `...)
	b = appendTime(b, o.createdAt)
	b = append(b, `, "deleted_at": `...)
	b = appendNullTime(b, o.deletedAt)
	b = append(b, `, "digest": `...)
	b = appendPyString(b, o.digest)
	b = append(b, `, "version_index": `...)
	b = strconv.AppendInt(b, o.versionIndex, 10)
	b = append(b, `, "is_latest": `...)
	if o.isLatest {
		b = append(b, '1')
	} else {
		b = append(b, '0')
	}
	b = append(b, `, "kind": `...)
	b = appendPyString(b, o.kind)
	b = append(b, `, "base_object_class": `...)
	b = appendNullStr(b, o.base)
	b = append(b, `, "leaf_object_class": `...)
	b = appendNullStr(b, o.leaf)
	b = append(b, `, "val": `...)
	b = append(b, o.val...)
	b = append(b, `, "platform_user_id": `...)
	b = appendNullStr(b, o.createdBy)
	b = append(b, `, "size_bytes": `...)
	if withSize {
		b = strconv.AppendInt(b, o.size, 10)
	} else {
		b = append(b, "null"...)
	}
	return append(b, '}')
}

func (s *Service) handleObjRead(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	var req struct {
		ProjectID    string  `json:"project_id"`
		ObjectID     *string `json:"object_id"`
		Digest       *string `json:"digest"`
		MetadataOnly *bool   `json:"metadata_only"`
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
	if req.Digest == nil || *req.Digest == "" {
		return httpx.Invalid("digest", "missing_field", `required: a digest, "latest" or "v<N>"`)
	}
	projectID := entity + "/" + name
	notFound := httpx.NotFound("object %s:%s not found in project %s", *req.ObjectID, *req.Digest, projectID)
	ctx := r.Context()
	proj, found, err := s.lookupProject(ctx, s.db, entity, name)
	if err != nil {
		return err
	}
	if !found {
		return notFound
	}
	q := `SELECT ` + objColumns + ` FROM trace_objects o WHERE o.project = ?1 AND o.object_id = ?3 AND o.deleted_at IS NULL AND `
	args := []any{proj, isTrue(req.MetadataOnly), *req.ObjectID}
	d := *req.Digest
	switch {
	case d == "latest":
		q += `o.version_index = (SELECT MAX(v.version_index) FROM trace_objects v
			WHERE v.project = ?1 AND v.object_id = ?3 AND v.deleted_at IS NULL)`
	case len(d) > 1 && d[0] == 'v' && isDigits(d[1:]):
		n, err := strconv.ParseInt(d[1:], 10, 64)
		if err != nil {
			return notFound
		}
		q += `o.version_index = ?4`
		args = append(args, n)
	default:
		q += `o.digest = ?4`
		args = append(args, d)
	}
	o, err := scanObj(s.db.QueryRowContext(ctx, s.d.sql(q), args...))
	if errors.Is(err, sql.ErrNoRows) {
		return notFound
	}
	if err != nil {
		return err
	}
	buf := append([]byte(`{"obj": `), appendObj(nil, o, projectID, true)...)
	writeRaw(w, http.StatusOK, "application/json", append(buf, "}\n"...))
	return nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

type objsQueryReq struct {
	ProjectID string `json:"project_id"`
	Filter    *struct {
		BaseObjectClasses        []string `json:"base_object_classes"`
		ExcludeBaseObjectClasses []string `json:"exclude_base_object_classes"`
		LeafObjectClasses        []string `json:"leaf_object_classes"`
		ObjectIDs                []string `json:"object_ids"`
		IsOp                     *bool    `json:"is_op"`
		LatestOnly               *bool    `json:"latest_only"`
	} `json:"filter"`
	Limit              *int64      `json:"limit"`
	Offset             *int64      `json:"offset"`
	SortBy             []sortField `json:"sort_by"`
	MetadataOnly       *bool       `json:"metadata_only"`
	IncludeStorageSize *bool       `json:"include_storage_size"`
}

// objSortColumns are the fields /objs/query sorts by (Weave: object_id and
// created_at).
var objSortColumns = map[string]string{"object_id": "o.object_id", "created_at": "o.created_at"}

func buildObjsQuery(d *dialect, req *objsQueryReq, proj int64) (string, []any, error) {
	var sb strings.Builder
	sb.WriteString(`SELECT ` + objColumns + ` FROM trace_objects o WHERE o.project = ?1 AND o.deleted_at IS NULL`)
	args := []any{proj, isTrue(req.MetadataOnly)}
	in := func(col string, vals []string, not bool) {
		args = append(args, d.listArg(vals))
		ph := "?" + strconv.Itoa(len(args))
		if not {
			sb.WriteString(" AND " + d.notInList(col, ph))
		} else {
			sb.WriteString(" AND " + d.inList(col, ph))
		}
	}
	if f := req.Filter; f != nil {
		if f.ObjectIDs != nil {
			in("o.object_id", f.ObjectIDs, false)
		}
		if f.BaseObjectClasses != nil {
			in("o.base_object_class", f.BaseObjectClasses, false)
		}
		if f.ExcludeBaseObjectClasses != nil {
			in("o.base_object_class", f.ExcludeBaseObjectClasses, true)
		}
		if f.LeafObjectClasses != nil {
			in("o.leaf_object_class", f.LeafObjectClasses, false)
		}
		if f.IsOp != nil {
			if *f.IsOp {
				sb.WriteString(` AND o.kind = 'op'`)
			} else {
				sb.WriteString(` AND o.kind != 'op'`)
			}
		}
		if isTrue(f.LatestOnly) {
			sb.WriteString(` AND o.version_index = (SELECT MAX(v.version_index) FROM trace_objects v
				WHERE v.project = o.project AND v.object_id = o.object_id AND v.deleted_at IS NULL)`)
		}
	}
	sb.WriteString(` ORDER BY `)
	for i, sf := range req.SortBy {
		path := fmt.Sprintf("sort_by[%d]", i)
		col, ok := objSortColumns[sf.Field]
		if !ok {
			return "", nil, httpx.Invalid(path+".field", "invalid_value", "cannot sort objects by %q: expected object_id or created_at", sf.Field)
		}
		dir, err := d.direction(sf.Direction, path+".direction")
		if err != nil {
			return "", nil, err
		}
		sb.WriteString(col + " " + dir + ", ")
	}
	sb.WriteString(`o.created_at ASC, o.pk ASC`) // both NOT NULL
	lim, off, err := limitOffset(req.Limit, req.Offset)
	if err != nil {
		return "", nil, err
	}
	args = append(args, lim, off)
	fmt.Fprintf(&sb, ` LIMIT ?%d OFFSET ?%d`, len(args)-1, len(args))
	return d.dyn(sb.String()), args, nil
}

func (s *Service) handleObjsQuery(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	var req objsQueryReq
	if err := decodeAt(body, &req, ""); err != nil {
		return err
	}
	entity, name, err := authorize(p, req.ProjectID, "project_id")
	if err != nil {
		return err
	}
	projectID := entity + "/" + name
	ctx := r.Context()
	proj, found, err := s.lookupProject(ctx, s.db, entity, name)
	if err != nil {
		return err
	}
	q, args, err := buildObjsQuery(s.d, &req, proj)
	if err != nil {
		return err
	}
	if !found {
		writeRaw(w, http.StatusOK, "application/json", []byte("{\"objs\": []}\n"))
		return nil
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 32<<10)
	bw.WriteString(`{"objs": [`)
	withSize := isTrue(req.IncludeStorageSize)
	var line []byte
	for n := 0; rows.Next(); n++ {
		o, err := scanObj(rows)
		if err != nil {
			return fmt.Errorf("%w: %v", httpx.ErrResponseStarted, err)
		}
		line = line[:0]
		if n > 0 {
			line = append(line, ", "...)
		}
		if _, err := bw.Write(appendObj(line, o, projectID, withSize)); err != nil {
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
