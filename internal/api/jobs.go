package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"flywheel/internal/auth"
	"flywheel/internal/httpx"
	"flywheel/internal/jobs"
	"flywheel/internal/rl"
	"flywheel/internal/store"
)

func (s *Server) registerJobs() {
	s.openai.Route("POST /v1/preview/training-jobs", s.createRLJob)
	s.openai.Route("POST /v1/preview/sft-training-jobs", s.createSFTJob)
	s.openai.Route("GET /v1/preview/training-jobs/{job_id}", s.getJob)
	s.openai.Route("GET /v1/preview/training-jobs/{job_id}/events", s.listEvents)
	s.openai.Route("POST /v1/preview/training-jobs/{job_id}/cancel", s.cancelJob)
}

// readValidateRL reads an RL training-job body and validates it while it
// is arriving: validation runs on a second goroutine, a megabyte behind the
// read at most (see rl.ValidateStream), so reading, validating and writing
// the request file (sink) overlap on the available cores. The body buffer
// is the only per-byte allocation. A body of unknown length is read first
// and validated after.
func readValidateRL(r *http.Request, sink func([]byte)) ([]byte, rl.Summary, error) {
	if r.ContentLength <= 0 {
		body, err := httpx.ReadBody(r, sink)
		if err != nil {
			return nil, rl.Summary{}, err
		}
		req, err := rl.Validate(body)
		return body, req, err
	}
	// The start arrives into a growing buffer (httpx.GrowBody); validation streams
	// over the rest, in the buffer of the announced size.
	buf, off, err := httpx.GrowBody(r.Body, r.ContentLength, sink)
	if err != nil {
		return nil, rl.Summary{}, err
	}
	arrived := make(chan int, len(buf)/httpx.FlushEvery+3) // never blocks the reader
	arrived <- off
	type result struct {
		req   rl.Summary
		err   error
		panic any // re-raised on the handler's goroutine, where middleware recovers it
	}
	validated := make(chan result, 1)
	go func() {
		var res result
		defer func() {
			res.panic = recover()
			validated <- res
		}()
		res.req, res.err = rl.ValidateStream(buf, arrived)
	}()
	rerr := httpx.FillBody(r.Body, buf, off, func(from, to int) {
		sink(buf[from:to])
		arrived <- to
	})
	close(arrived)
	v := <-validated // never leave the validator running on buf
	if v.panic != nil {
		panic(v.panic)
	}
	if rerr != nil {
		return nil, rl.Summary{}, rerr
	}
	return buf, v.req, v.err
}

func jobJSON(j store.Job) map[string]any {
	out := map[string]any{
		"id": j.ID, "object": "training_job", "model_id": j.ModelID, "kind": j.Kind, "status": j.Status,
		"created_at": store.FormatTime(j.CreatedAt), "training_start": timePtr(j.TrainingStart),
		"training_end": timePtr(j.TrainingEnd), "error_message": nil, "from_step": j.FromStep, "to_step": j.ToStep,
		"experimental_config": rawOrEmpty(j.ExperimentalConfig), "metrics": j.Metrics,
	}
	if j.ErrorMessage != "" {
		out["error_message"] = j.ErrorMessage
	}
	if j.Kind == store.KindSFT {
		out["config"] = rawOrEmpty(j.Config)
		out["training_data_url"] = j.FileID
	}
	if j.Metrics == nil {
		out["metrics"] = map[string]any{}
	}
	return out
}

func rawOrEmpty(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("{}")
	}
	return b
}

func timePtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return store.FormatTime(*t)
}

// jobQuota refuses a job request of a user who has MaxQueuedJobsPerUser
// jobs QUEUED already: 429 with retry-after (checked before the body is read;
// concurrent requests of one user may pass it together, by at most their
// number).
func (s *Server) jobQuota(w http.ResponseWriter, r *http.Request, caller *auth.Principal) error {
	if s.cfg.MaxQueuedJobsPerUser < 0 {
		return nil
	}
	n, err := s.st.QueuedJobs(r.Context(), caller.UserID)
	if err != nil {
		return err
	}
	if n >= s.cfg.MaxQueuedJobsPerUser {
		w.Header().Set("Retry-After", "30")
		return &httpx.Error{Status: http.StatusTooManyRequests, Code: "rate_limit_exceeded",
			Message: fmt.Sprintf("you have %d training jobs queued, the most allowed (--max-queued-jobs-per-user); retry when one starts", n)}
	}
	return nil
}

func (s *Server) createRLJob(w http.ResponseWriter, r *http.Request) error {
	caller, perr := httpx.Principal(r)
	if perr != nil {
		return perr
	}
	if err := s.jobQuota(w, r, caller); err != nil {
		return err
	}
	pending, err := s.q.Prepare()
	if err != nil {
		return err
	}
	defer pending.Discard() // a no-op once submitted
	body, req, err := readValidateRL(r, pending.Write)
	if err != nil {
		return err
	}
	m, err := s.visibleModel(r, req.ModelID, "model_id")
	if err != nil {
		return err
	}
	jc, err := rl.ResolveJob(store.KindRL, m.BaseModel, pending.ID(), req.ExperimentalConfig, nil)
	if err != nil {
		return err
	}
	j, err := pending.Submit(r.Context(), store.Job{ModelID: m.ID, Kind: store.KindRL, ExperimentalConfig: jc.ExperimentalConfig, CreatedBy: caller.UserID})
	if err != nil {
		return err
	}
	s.log.Info("training job queued", "job_id", j.ID, "model_id", m.ID, "kind", j.Kind,
		"groups", req.Groups, "trajectories", req.Trajectories, "bytes", len(body))
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"id": j.ID, "status": j.Status})
	return nil
}

func (s *Server) createSFTJob(w http.ResponseWriter, r *http.Request) error {
	caller, perr := httpx.Principal(r)
	if perr != nil {
		return perr
	}
	if err := s.jobQuota(w, r, caller); err != nil {
		return err
	}
	pending, err := s.q.Prepare()
	if err != nil {
		return err
	}
	defer pending.Discard()
	body, err := httpx.ReadBody(r, pending.Write)
	if err != nil {
		return err
	}
	req, err := rl.ParseSFTRequest(body)
	if err != nil {
		return err
	}
	m, err := s.visibleModel(r, req.ModelID, "model_id")
	if err != nil {
		return err
	}
	jc, err := rl.ResolveJob(store.KindSFT, m.BaseModel, pending.ID(), req.ExperimentalConfig, req.Config)
	if err != nil {
		return err
	}
	fileID := strings.TrimPrefix(req.TrainingDataURL, "file://")
	var f store.File
	if strings.HasPrefix(fileID, wandbPrefix) {
		f, err = s.resolveArtifactFile(r, fileID, "training_data_url")
	} else if f, err = s.st.FileByID(r.Context(), fileID); err == nil && f.Purpose == wandbArtifactPurpose {
		err = store.ErrNotFound // an artifact's file is named by its artifact URL
	}
	if err != nil && strings.HasPrefix(fileID, wandbPrefix) {
		return err
	}
	if err != nil || (f.UserID != caller.UserID && f.Purpose != wandbArtifactPurpose) {
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return httpx.Invalid("training_data_url", "unknown_file", "training_data_url %q is not a file you uploaded (POST /v1/files)", req.TrainingDataURL)
	}
	if f.Purpose != "fine-tune" { // fine-tune files were checked line by line at upload
		if err := checkJSONL(f.Path, "training_data_url"); err != nil {
			return err
		}
	}
	j, err := pending.Submit(r.Context(), store.Job{ModelID: m.ID, Kind: store.KindSFT, FileID: f.ID, Config: jc.Config,
		ExperimentalConfig: jc.ExperimentalConfig, CreatedBy: caller.UserID})
	if err != nil {
		return err
	}
	s.log.Info("training job queued", "job_id", j.ID, "model_id", m.ID, "kind", j.Kind, "file_id", f.ID)
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"id": j.ID, "status": j.Status})
	return nil
}

// visibleJob loads a job whose model the caller may see.
func (s *Server) visibleJob(r *http.Request) (store.Job, error) {
	caller, perr := httpx.Principal(r)
	if perr != nil {
		return store.Job{}, perr
	}
	id := r.PathValue("job_id")
	j, err := s.st.JobByID(r.Context(), id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return j, httpx.NotFound("training job %s not found", id)
		}
		return j, err
	}
	m, err := s.st.ModelByID(r.Context(), j.ModelID)
	if err != nil || !caller.Member(m.Entity) {
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return j, err
		}
		return j, httpx.NotFound("training job %s not found", id)
	}
	return j, nil
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) error {
	j, err := s.visibleJob(r)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, jobJSON(j))
	return nil
}

func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) error {
	j, err := s.visibleJob(r)
	if err != nil {
		return err
	}
	page, err := parsePage(r, pageRules{limit: 20, maxLimit: 100})
	if err != nil {
		return err
	}
	events, more, err := s.st.ListEvents(r.Context(), j.ID, page)
	if err != nil {
		return err
	}
	writeList(w, events, func(e store.Event) string { return e.ID }, eventJSON, more)
	return nil
}

// eventJSON is a job event on the wire (the job's event list and the
// model-wide lists of the dashboard).
func eventJSON(e store.Event) any {
	return map[string]any{"id": e.ID, "object": "training_job.event", "job_id": e.JobID, "type": e.Type,
		"data": e.Data, "created_at": store.FormatTime(e.CreatedAt)}
}

func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request) error {
	j, err := s.visibleJob(r)
	if err != nil {
		return err
	}
	if err := s.q.Cancel(r.Context(), j.ID); err != nil {
		if errors.Is(err, jobs.ErrNotCancellable) {
			cur, _ := s.st.JobByID(r.Context(), j.ID)
			return &httpx.Error{Status: http.StatusConflict, Code: "job_not_cancellable",
				Message: fmt.Sprintf("training job %s is already %s", j.ID, cur.Status)}
		}
		return err
	}
	j, err = s.st.JobByID(r.Context(), j.ID)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, jobJSON(j))
	return nil
}
