package api

import (
	"bufio"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"

	"flywheel/internal/httpx"
	"flywheel/internal/rl"
	"flywheel/internal/store"
	"flywheel/internal/trace"
)

// The read routes the dashboard (internal/ui) needs beyond the contract:
// jobs across models, a model's per-gradient-step history, and what trained
// a checkpoint. Same auth and tenancy as every /v1 route.
func (s *Server) registerDashboard() {
	s.openai.Route("GET /v1/preview/training-jobs", s.listJobs)
	s.openai.Route("GET /v1/preview/models/{model_id}/events", s.listModelEvents)
	s.openai.Route("GET /v1/preview/models/{model_id}/checkpoints/{step}/trajectories", s.listTrajectories)
}

func (s *Server) lists() (store.Lists, error) {
	l, ok := s.st.(store.Lists)
	if !ok {
		return nil, &httpx.Error{Status: http.StatusNotImplemented, Code: "not_implemented",
			Message: "this store cannot list jobs or a model's events"}
	}
	return l, nil
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) error {
	caller, perr := httpx.Principal(r)
	if perr != nil {
		return perr
	}
	l, err := s.lists()
	if err != nil {
		return err
	}
	page, err := parsePage(r, contractPage)
	if err != nil {
		return err
	}
	modelID := r.URL.Query().Get("model_id")
	if modelID != "" {
		if _, err := s.visibleModel(r, modelID, "model_id"); err != nil {
			return err
		}
	}
	list, more, err := l.ListJobs(r.Context(), caller.Entities, modelID, page)
	if err != nil {
		return err
	}
	writeList(w, list, func(j store.Job) string { return j.ID }, func(j store.Job) any { return jobJSON(j) }, more)
	return nil
}

func (s *Server) listModelEvents(w http.ResponseWriter, r *http.Request) error {
	l, err := s.lists()
	if err != nil {
		return err
	}
	m, err := s.visibleModel(r, r.PathValue("model_id"), "model_id")
	if err != nil {
		return err
	}
	page, err := parsePage(r, contractPage)
	if err != nil {
		return err
	}
	typ := store.EventType(r.URL.Query().Get("type"))
	switch typ {
	case "":
		typ = store.EventGradientStep
	case store.EventTrainingStarted, store.EventGradientStep, store.EventTrainingEnded, store.EventTrainingFailed:
	default:
		return httpx.Invalid("type", "invalid_value", "type must be training_started, gradient_step, training_ended or training_failed")
	}
	events, more, err := l.ListModelEvents(r.Context(), m.ID, typ, page)
	if err != nil {
		return err
	}
	writeList(w, events, func(e store.Event) string { return e.ID }, eventJSON, more)
	return nil
}

// listTrajectories serves a page (offset, limit 1..100) of what the RL job
// that made a checkpoint trained on (rl.TrajectoriesFile), each choice with
// the call that sampled it when the call store has it ("call": null else).
func (s *Server) listTrajectories(w http.ResponseWriter, r *http.Request) error {
	caller, perr := httpx.Principal(r)
	if perr != nil {
		return perr
	}
	m, err := s.visibleModel(r, r.PathValue("model_id"), "model_id")
	if err != nil {
		return err
	}
	step, err := strconv.Atoi(r.PathValue("step"))
	if err != nil || step < 0 {
		return httpx.Invalid("step", "invalid_value", "step must be a non-negative integer")
	}
	offset := 0
	if v := r.URL.Query().Get("offset"); v != "" {
		if offset, err = strconv.Atoi(v); err != nil || offset < 0 {
			return httpx.Invalid("offset", "invalid_value", "offset must be a non-negative integer, got %q", v)
		}
	}
	limit, err := pageLimit(r, contractPage)
	if err != nil {
		return err
	}
	ck, err := s.st.CheckpointByStep(r.Context(), m.ID, step)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return httpx.NotFound("model %s has no step %d", m.ID, step)
		}
		return err
	}
	f, err := os.Open(filepath.Join(ck.Dir, rl.TrajectoriesFile))
	if errors.Is(err, os.ErrNotExist) {
		e := httpx.NotFound("step %d has no recorded trajectories (step 0, an SFT job, or a job from before they were kept)", step)
		e.Code = "no_trajectories"
		return e
	}
	if err != nil {
		return err
	}
	defer f.Close()
	// One trajectory at a time: a page costs its own memory, not the file's
	// (which can be as large as the job's body).
	jobID, page, total, err := rl.ReadTrainedPage(bufio.NewReader(f), offset, limit)
	if err != nil {
		return err
	}
	if page == nil {
		page = []rl.TrainedTrajectory{}
	}
	var fps []string
	for _, t := range page {
		for _, raw := range t.Messages {
			var c struct {
				Choice *rl.TrainedChoice `json:"choice"`
			}
			if json.Unmarshal(raw, &c) == nil && c.Choice != nil && c.Choice.Fingerprint != "" {
				fps = append(fps, c.Choice.Fingerprint)
			}
		}
	}
	links := map[string]trace.ChoiceLink{}
	if s.cfg.Links != nil && len(fps) > 0 {
		if links, err = s.cfg.Links.ChoiceLinks(r.Context(), caller, fps); err != nil {
			return err
		}
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "job_id": jobID, "step": step,
		"total": total, "offset": offset, "data": page, "calls": links, "has_more": offset < total && offset+len(page) < total})
	return nil
}

// checkpointSize is the bytes of a checkpoint folder's files (adapter,
// optimizer state, trajectories); 0 when it cannot be read.
func checkpointSize(dir string) int64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
	}
	return n
}
