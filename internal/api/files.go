package api

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"os"
	"strings"

	"flywheel/internal/atomicfile"
	"flywheel/internal/httpx"
	"flywheel/internal/rl"
	"flywheel/internal/store"
)

func (s *Server) registerFiles() {
	s.openai.Route("POST /v1/files", s.uploadFile)
	s.openai.Route("GET /v1/files/{file_id}", s.getFile)
	s.registerFileRoutes()
}

func fileJSON(f store.File) map[string]any {
	return map[string]any{
		"id": f.ID, "object": "file", "bytes": f.Bytes, "created_at": f.CreatedAt.Unix(),
		"filename": f.Filename, "purpose": f.Purpose, "status": "processed",
	}
}

// uploadFile stores an OpenAI Files-style multipart upload (fields "file"
// and "purpose"). Files for fine-tuning are checked line by line:
// {"messages": [...], "tools": [...]?}.
func (s *Server) uploadFile(w http.ResponseWriter, r *http.Request) error {
	caller, perr := httpx.Principal(r)
	if perr != nil {
		return perr
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct != "multipart/form-data" {
		return httpx.Invalid("file", "invalid_request", "upload the file as multipart/form-data with fields \"file\" and \"purpose\"")
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return httpx.Invalid("file", "invalid_request", "malformed multipart body: %s", err.Error())
	}
	id := "file-" + strings.ReplaceAll(store.NewID(), "-", "")
	dst := s.layout.FilePath(id)
	var f *atomicfile.File // the upload, published at dst once checked
	defer func() {
		if f != nil {
			f.Abort() // a no-op once committed
		}
	}()
	purpose, filename := "", ""
	var size int64 = -1
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return err
			}
			return httpx.Invalid("file", "invalid_request", "malformed multipart body: %s", err.Error())
		}
		switch part.FormName() {
		case "purpose":
			b, err := io.ReadAll(io.LimitReader(part, 256))
			if err != nil {
				return err
			}
			purpose = strings.TrimSpace(string(b))
			if err := checkPurpose(purpose); err != nil { // before a file part is stored
				return err
			}
		case "file":
			filename = part.FileName()
			if err := checkChars("filename", filename); err != nil {
				return err
			}
			if f != nil { // a second file part replaces the first
				f.Abort()
			}
			if f, err = atomicfile.Create(dst, store.FileMode); err != nil {
				return err
			}
			if size, err = io.Copy(f, part); err != nil {
				return err
			}
		}
		part.Close()
	}
	if size < 0 {
		return httpx.Invalid("file", "missing_field", "file is required")
	}
	if size == 0 {
		return httpx.Invalid("file", "invalid_file", "file is empty")
	}
	if purpose == "" {
		purpose = "fine-tune"
	}

	if purpose == "fine-tune" {
		if err := checkJSONL(f.TempName(), "file"); err != nil {
			return err
		}
	}
	if err := f.Commit(); err != nil {
		return err
	}
	rec := store.File{ID: id, UserID: caller.UserID, Filename: filename, Purpose: purpose, Bytes: size, Path: dst}
	if err := s.st.CreateFile(r.Context(), rec); err != nil {
		os.Remove(dst)
		return err
	}
	rec, err = s.st.FileByID(r.Context(), id)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, fileJSON(rec))
	return nil
}

// checkJSONL validates an SFT data file with rl.ReadSFTFile, the reader
// the trainer uses. A bad line is a 400 with param and a message naming the
// line and the field ("line 3: messages[1].role is required").
func checkJSONL(path, param string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	err = rl.ReadSFTFile(f, func(int, rl.SFTExample) error { return nil })
	var he *httpx.Error
	if errors.As(err, &he) {
		return httpx.Invalid(param, he.Code, "%s", he.Message)
	}
	return err
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request) error {
	caller, perr := httpx.Principal(r)
	if perr != nil {
		return perr
	}
	f, err := s.st.FileByID(r.Context(), r.PathValue("file_id"))
	if err != nil || f.UserID != caller.UserID {
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return httpx.NotFound("file %s not found", r.PathValue("file_id"))
	}
	httpx.WriteJSON(w, http.StatusOK, fileJSON(f))
	return nil
}
