package api

// The OpenAI Files routes beyond upload and retrieve: list, content and
// delete, in OpenAI's shapes. A file belongs to the user whose key uploaded
// it; anyone else's file answers 404, as a missing one does.

import (
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"

	"flywheel/internal/httpx"
	"flywheel/internal/store"
)

func (s *Server) registerFileRoutes() {
	s.openai.Route("GET /v1/files", s.listFiles)
	s.openai.Route("GET /v1/files/{file_id}/content", s.fileContent)
	s.openai.Route("DELETE /v1/files/{file_id}", s.deleteFile)
}

// filePurposes are the purposes OpenAI accepts on upload. Only "fine-tune"
// files are used here (SFT data, checked line by line); the others are
// stored as they are.
var filePurposes = map[string]bool{
	"fine-tune": true, "assistants": true, "batch": true, "vision": true, "user_data": true, "evals": true,
}

// checkPurpose validates an upload's purpose ("" = fine-tune, the default).
func checkPurpose(purpose string) error {
	if purpose == "" || filePurposes[purpose] {
		return nil
	}
	return httpx.Invalid("purpose", "invalid_value",
		"purpose must be one of \"fine-tune\", \"assistants\", \"batch\", \"vision\", \"user_data\", \"evals\"; got %q", purpose)
}

// visibleFile loads a file of the caller's; any other is 404.
func (s *Server) visibleFile(r *http.Request) (store.File, error) {
	caller, perr := httpx.Principal(r)
	if perr != nil {
		return store.File{}, perr
	}
	id := r.PathValue("file_id")
	f, err := s.st.FileByID(r.Context(), id)
	if err == nil && f.UserID == caller.UserID {
		return f, nil
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return f, err
	}
	e := httpx.NotFound("No such File object: %s", id)
	e.Param = "id"
	return f, e
}

// listFiles is GET /v1/files?purpose&after&limit&order, OpenAI's cursor
// list: newest first by default, limit 1..10000 (default 10000).
func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) error {
	caller, perr := httpx.Principal(r)
	if perr != nil {
		return perr
	}
	page, err := parsePage(r, filesPage)
	if err != nil {
		return err
	}
	files, more, err := s.st.ListFiles(r.Context(), caller.UserID, r.URL.Query().Get("purpose"), page)
	if err != nil {
		return err
	}
	writeList(w, files, func(f store.File) string { return f.ID }, func(f store.File) any { return fileJSON(f) }, more)
	return nil
}

// fileContent is GET /v1/files/{id}/content: the bytes as uploaded.
func (s *Server) fileContent(w http.ResponseWriter, r *http.Request) error {
	f, err := s.visibleFile(r)
	if err != nil {
		return err
	}
	fh, err := os.Open(f.Path)
	if errors.Is(err, os.ErrNotExist) {
		return httpx.NotFound("the content of file %s is gone", f.ID)
	}
	if err != nil {
		return err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
	w.WriteHeader(http.StatusOK)
	_, err = io.Copy(w, fh)
	if err != nil {
		s.log.Warn("files: sending content", "file", f.ID, "err", err)
	}
	return nil
}

// deleteFile is DELETE /v1/files/{id}: the record, then the bytes. An SFT
// job still queued on the file fails when it starts, saying the file is gone.
func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request) error {
	f, err := s.visibleFile(r)
	if err != nil {
		return err
	}
	if err := s.st.DeleteFile(r.Context(), f.ID); err != nil {
		return err
	}
	if err := os.Remove(f.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("files: removing bytes", "file", f.ID, "err", err)
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"id": f.ID, "object": "file", "deleted": true})
	return nil
}
