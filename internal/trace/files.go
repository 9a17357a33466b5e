package trace

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"flywheel/internal/auth"
	"flywheel/internal/httpx"
)

// The file store: bytes per project, addressed by Digest(bytes)
// (/file/create, /file/content). The Weave SDKs save an op's code here and
// reference it from the op object by digest (which they compute themselves).

// maxFormFieldBytes bounds the non-file fields of a /file/create form.
const maxFormFieldBytes = 4 << 10

// handleFileCreate serves POST /file/create: multipart/form-data with the
// fields project_id and file (its filename is not kept: the content is what
// is addressed). The form is read part by part; the file is bounded by
// Options.MaxFileBytes (413 naming the field).
func (s *Service) handleFileCreate(w http.ResponseWriter, r *http.Request) error {
	p, err := httpx.Principal(r)
	if err != nil {
		return err
	}
	digest, err := s.fileCreate(w, r, p)
	if err != nil {
		return err
	}
	buf := append([]byte(`{"digest": `), appendPyString(nil, digest)...)
	writeRaw(w, http.StatusOK, "application/json", append(buf, "}\n"...))
	return nil
}

func (s *Service) fileCreate(w http.ResponseWriter, r *http.Request, p *auth.Principal) (string, error) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		return "", httpx.Invalid("", "invalid_content_type", "expected a multipart/form-data body with the fields project_id and file")
	}
	limit := s.maxFileBytes()
	// the whole form: the file, the small fields and the multipart framing
	r.Body = http.MaxBytesReader(w, r.Body, limit+64<<10)
	mr, err := r.MultipartReader()
	if err != nil {
		return "", httpx.Invalid("", "invalid_multipart", "malformed multipart body: %s", err.Error())
	}
	var projectID *string
	var content []byte
	haveFile := false
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", multipartErr(err, limit)
		}
		switch part.FormName() {
		case "project_id":
			b, err := io.ReadAll(io.LimitReader(part, maxFormFieldBytes+1))
			if err != nil {
				return "", multipartErr(err, limit)
			}
			if len(b) > maxFormFieldBytes {
				return "", httpx.Invalid("project_id", "invalid_value", "longer than %d bytes", maxFormFieldBytes)
			}
			v := string(b)
			projectID = &v
		case "file":
			var buf bytes.Buffer
			n, err := buf.ReadFrom(io.LimitReader(part, limit+1))
			if err != nil {
				return "", multipartErr(err, limit)
			}
			if n > limit {
				return "", &httpx.Error{Status: http.StatusRequestEntityTooLarge, Param: "file", Code: "file_too_large",
					Message: fmt.Sprintf("the file exceeds the limit of %d bytes", limit)}
			}
			content, haveFile = buf.Bytes(), true
		default:
			if _, err := io.Copy(io.Discard, part); err != nil {
				return "", multipartErr(err, limit)
			}
		}
		part.Close()
	}
	if projectID == nil {
		return "", httpx.Invalid("project_id", "missing_field", "required: a form field with the project id entity/project")
	}
	entity, name, err := authorize(p, *projectID, "project_id")
	if err != nil {
		return "", err
	}
	if !haveFile {
		return "", httpx.Invalid("file", "missing_field", "required: a form file field")
	}
	digest := Digest(content)
	if err := s.createFile(r.Context(), entity, name, digest, content); err != nil {
		return "", err
	}
	return digest, nil
}

func multipartErr(err error, limit int64) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return &httpx.Error{Status: http.StatusRequestEntityTooLarge, Param: "file", Code: "file_too_large",
			Message: fmt.Sprintf("the form exceeds the file limit of %d bytes", limit)}
	}
	return httpx.Invalid("", "invalid_multipart", "malformed multipart body: %s", err.Error())
}

// createFile stores content under (project, digest) unless it is there.
func (s *Service) createFile(ctx context.Context, entity, name, digest string, content []byte) error {
	return s.projectTx(ctx, entity, name, func(tx *sql.Tx, proj int64) error {
		_, err := tx.ExecContext(ctx, s.d.sql(`INSERT INTO trace_files (project, digest, size_bytes, content, created_at)
			VALUES (?, ?, ?, ?, ?) ON CONFLICT (project, digest) DO NOTHING`),
			proj, digest, len(content), content, s.now().UnixMicro())
		return err
	})
}

// handleFileContent serves POST /file/content {project_id, digest}: the
// bytes, as application/octet-stream; 404 when the project has no such file.
func (s *Service) handleFileContent(w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) error {
	var req struct {
		ProjectID string  `json:"project_id"`
		Digest    *string `json:"digest"`
	}
	if err := decodeAt(body, &req, ""); err != nil {
		return err
	}
	entity, name, err := authorize(p, req.ProjectID, "project_id")
	if err != nil {
		return err
	}
	if req.Digest == nil || strings.TrimSpace(*req.Digest) == "" {
		return httpx.Invalid("digest", "missing_field", "required: the file's digest")
	}
	notFound := httpx.NotFound("file %s not found in project %s/%s", *req.Digest, entity, name)
	ctx := r.Context()
	proj, found, err := s.lookupProject(ctx, s.db, entity, name)
	if err != nil {
		return err
	}
	if !found {
		return notFound
	}
	var content []byte
	err = s.db.QueryRowContext(ctx, s.d.sql(`SELECT content FROM trace_files WHERE project = ? AND digest = ?`), proj, *req.Digest).Scan(&content)
	if errors.Is(err, sql.ErrNoRows) {
		return notFound
	}
	if err != nil {
		return err
	}
	writeRaw(w, http.StatusOK, "application/octet-stream", content)
	return nil
}
