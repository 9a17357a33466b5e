package api

import (
	"encoding/json"
	"errors"
	"hash/fnv"
	"io"
	"net/http"
	"strings"

	"flywheel/internal/basemodels"
	"flywheel/internal/checkpoints"
	"flywheel/internal/httpx"
	"flywheel/internal/names"
	"flywheel/internal/store"
)

func (s *Server) registerModels() {
	s.openai.Route("POST /v1/preview/models", s.createModel)
	s.openai.Route("GET /v1/preview/models", s.listModels)
	s.openai.Route("GET /v1/preview/models/{model_id}", s.getModel)
	s.openai.Route("DELETE /v1/preview/models/{model_id}", s.deleteModel)
	s.openai.Route("GET /v1/preview/models/{model_id}/checkpoints", s.listCheckpoints)
	s.openai.Route("DELETE /v1/preview/models/{model_id}/checkpoints", s.deleteCheckpoints)
	s.openai.Route("POST /v1/preview/models/{model_id}/log", s.logModel)
}

func modelJSON(m store.TrainedModel) map[string]any {
	return map[string]any{
		"id": m.ID, "object": "model", "entity": m.Entity, "project": m.Project, "name": m.Name,
		"base_model": m.BaseModel, "run_id": m.RunID, "created_at": store.FormatTime(m.CreatedAt),
		"latest_step": m.LatestStep, "lora": m.LoRA,
	}
}

func checkpointJSON(c store.Checkpoint) any {
	metrics := c.Metrics
	if metrics == nil {
		metrics = map[string]float64{}
	}
	return map[string]any{
		"id": c.ID, "object": "checkpoint", "model_id": c.ModelID, "step": c.Step,
		"metrics": metrics, "created_at": store.FormatTime(c.CreatedAt), "size_bytes": checkpointSize(c.Dir),
	}
}

// visibleModel loads a model the caller may see; another entity's model is
// reported missing, as the contract requires.
func (s *Server) visibleModel(r *http.Request, id, param string) (store.TrainedModel, error) {
	caller, perr := httpx.Principal(r)
	if perr != nil {
		return store.TrainedModel{}, perr
	}
	m, err := s.st.ModelByID(r.Context(), id)
	if err == nil && caller.Member(m.Entity) {
		return m, nil
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return m, err
	}
	e := httpx.NotFound("model %s not found", id)
	e.Param = param
	return m, e
}

// checkName validates an entity, project or model name: non-empty, at most
// 128 characters, without '/', ':' or white space (they delimit model
// references "entity/project/name:stepN"), nor control or invisible
// formatting characters (names.Check).
func checkName(param, v string) error {
	if v == "" {
		return httpx.Invalid(param, "invalid_value", "%s must not be empty", param)
	}
	if len(v) > 128 || strings.ContainsAny(v, "/: \t\r\n") {
		return httpx.Invalid(param, "invalid_value", "%s must be at most 128 characters without '/', ':' or white space", param)
	}
	return checkChars(param, v)
}

// checkChars refuses control, bidirectional-override and other invisible
// characters in a user-chosen name (names.Check), naming the field.
func checkChars(param, v string) error {
	if err := names.Check(v); err != nil {
		return httpx.Invalid(param, "invalid_value", "%s %s", param, err.Error())
	}
	return nil
}

type createModelRequest struct {
	Entity         *string `json:"entity"`
	Project        *string `json:"project"`
	Name           *string `json:"name"`
	BaseModel      *string `json:"base_model"`
	ReturnExisting *bool   `json:"return_existing"`
	LoRA           *struct {
		Rank          *int     `json:"rank"`
		Alpha         *float64 `json:"alpha"`
		TargetModules []string `json:"target_modules"`
		Seed          *int64   `json:"seed"`
	} `json:"lora"`
}

func (s *Server) createModel(w http.ResponseWriter, r *http.Request) error {
	caller, perr := httpx.Principal(r)
	if perr != nil {
		return perr
	}
	var req createModelRequest
	if err := httpx.DecodeJSON(r, &req); err != nil {
		return err
	}
	p := caller
	entity := p.PersonalEntity
	if req.Entity != nil {
		entity = *req.Entity
		if err := checkName("entity", entity); err != nil {
			return err
		}
		if !p.Member(entity) {
			e := httpx.NotFound("entity %q not found", entity)
			e.Param = "entity"
			return e
		}
	}
	for _, f := range []struct {
		param string
		v     *string
	}{{"project", req.Project}, {"name", req.Name}} {
		if f.v == nil {
			return httpx.Invalid(f.param, "missing_field", "%s is required", f.param)
		}
		if err := checkName(f.param, *f.v); err != nil {
			return err
		}
	}
	if req.BaseModel == nil || *req.BaseModel == "" {
		return httpx.Invalid("base_model", "missing_field", "base_model is required")
	}
	ctx := r.Context()
	returnExisting := req.ReturnExisting != nil && *req.ReturnExisting
	if existing, err := s.st.ModelByName(ctx, entity, *req.Project, *req.Name); err == nil {
		if returnExisting {
			httpx.WriteJSON(w, http.StatusOK, modelJSON(existing))
			return nil
		}
		return &httpx.Error{Status: http.StatusConflict, Param: "name", Code: "model_exists",
			Message: "a model named " + entity + "/" + *req.Project + "/" + *req.Name + " already exists; pass return_existing to reuse it"}
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	baseDir, err := basemodels.Dir(s.cfg.ModelsDir, *req.BaseModel)
	if err != nil {
		if !errors.Is(err, basemodels.ErrNotFound) {
			return err
		}
		avail, _ := basemodels.List(s.cfg.ModelsDir)
		return httpx.Invalid("base_model", "unknown_base_model", "base model %q is not in the models dir (available: %s)", *req.BaseModel, strings.Join(avail, ", "))
	}
	lora := defaultLoRA()
	if req.LoRA != nil {
		if req.LoRA.Rank != nil {
			lora.Rank = *req.LoRA.Rank
		}
		if req.LoRA.Alpha != nil {
			lora.Alpha = *req.LoRA.Alpha
		}
		if req.LoRA.TargetModules != nil {
			lora.TargetModules = req.LoRA.TargetModules
		}
		if err := validateLoRA(lora); err != nil {
			return httpx.Invalid("lora", "invalid_value", "%s", err.Error())
		}
		if req.LoRA.Seed != nil && *req.LoRA.Seed < 0 {
			return httpx.Invalid("lora.seed", "invalid_value", "lora.seed must be a non-negative integer")
		}
	}

	m := store.TrainedModel{ID: store.NewID(), Entity: entity, Project: *req.Project, Name: *req.Name,
		BaseModel: *req.BaseModel, LoRA: lora, CreatedBy: p.UserID}
	// The untrained adapter's A comes from a seed: the request's lora.seed
	// (a reproducible run: the same seed, the same step 0), else one derived
	// from the new model's id.
	h := fnv.New64a()
	io.WriteString(h, m.ID)
	seed := h.Sum64()
	if req.LoRA != nil && req.LoRA.Seed != nil {
		seed = uint64(*req.LoRA.Seed)
	}
	created, err := s.ck.Create(ctx, m, func(dir string) error {
		return writeInitialAdapter(baseDir, m.BaseModel, lora, seed, dir)
	})
	if err != nil {
		var ae *checkpoints.AdapterError
		if errors.As(err, &ae) {
			s.log.Error("create step-0 adapter", "model_id", m.ID, "base_model", m.BaseModel, "err", ae.Err)
			msg := strings.ReplaceAll(ae.Err.Error(), baseDir, "<base model folder>")
			return httpx.Invalid("base_model", "unsupported_base_model", "cannot make an adapter for base model %q: %s", m.BaseModel, msg)
		}
		if errors.Is(err, store.ErrConflict) { // lost a race with a concurrent create
			if existing, gerr := s.st.ModelByName(ctx, entity, *req.Project, *req.Name); gerr == nil && returnExisting {
				httpx.WriteJSON(w, http.StatusOK, modelJSON(existing))
				return nil
			}
			return &httpx.Error{Status: http.StatusConflict, Param: "name", Code: "model_exists",
				Message: "a model named " + entity + "/" + *req.Project + "/" + *req.Name + " already exists"}
		}
		return err
	}
	s.log.Info("model created", "model_id", created.ID, "entity", entity, "project", created.Project, "name", created.Name, "base_model", created.BaseModel)
	httpx.WriteJSON(w, http.StatusOK, modelJSON(created))
	return nil
}

func (s *Server) listModels(w http.ResponseWriter, r *http.Request) error {
	caller, perr := httpx.Principal(r)
	if perr != nil {
		return perr
	}
	page, err := parsePage(r, contractPage)
	if err != nil {
		return err
	}
	models, more, err := s.st.ListModelsPage(r.Context(), caller.Entities, page)
	if err != nil {
		return err
	}
	writeList(w, models, func(m store.TrainedModel) string { return m.ID }, func(m store.TrainedModel) any { return modelJSON(m) }, more)
	return nil
}

func (s *Server) getModel(w http.ResponseWriter, r *http.Request) error {
	m, err := s.visibleModel(r, r.PathValue("model_id"), "model_id")
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, modelJSON(m))
	return nil
}

func (s *Server) deleteModel(w http.ResponseWriter, r *http.Request) error {
	m, err := s.visibleModel(r, r.PathValue("model_id"), "model_id")
	if err != nil {
		return err
	}
	cks, err := s.ck.DeleteModel(r.Context(), m.ID)
	if errors.Is(err, store.ErrConflict) {
		return &httpx.Error{Status: http.StatusConflict, Code: "job_running",
			Message: "a training job of this model is running; cancel it before deleting the model"}
	}
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"model_id": m.ID, "deleted_checkpoints": len(cks), "deleted_run": false})
	return nil
}

func (s *Server) listCheckpoints(w http.ResponseWriter, r *http.Request) error {
	m, err := s.visibleModel(r, r.PathValue("model_id"), "model_id")
	if err != nil {
		return err
	}
	page, err := parsePage(r, contractPage)
	if err != nil {
		return err
	}
	cks, more, err := s.st.ListCheckpoints(r.Context(), m.ID, page)
	if err != nil {
		return err
	}
	writeList(w, cks, func(c store.Checkpoint) string { return c.ID }, checkpointJSON, more)
	return nil
}

func (s *Server) deleteCheckpoints(w http.ResponseWriter, r *http.Request) error {
	m, err := s.visibleModel(r, r.PathValue("model_id"), "model_id")
	if err != nil {
		return err
	}
	var req struct {
		Steps *[]int `json:"steps"`
	}
	if err := httpx.DecodeJSON(r, &req); err != nil {
		return err
	}
	if req.Steps == nil {
		return httpx.Invalid("steps", "missing_field", "steps is required")
	}
	deleted, notFound, err := s.ck.Delete(r.Context(), m.ID, *req.Steps)
	if errors.Is(err, store.ErrConflict) {
		return &httpx.Error{Status: http.StatusConflict, Param: "steps", Code: "checkpoint_in_use", Message: strings.TrimSuffix(err.Error(), ": "+store.ErrConflict.Error())}
	}
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"deleted_count": len(deleted), "not_found_steps": notFound})
	return nil
}

func (s *Server) logModel(w http.ResponseWriter, r *http.Request) error {
	m, err := s.visibleModel(r, r.PathValue("model_id"), "model_id")
	if err != nil {
		return err
	}
	data, err := httpx.ReadBody(r, nil)
	if err != nil {
		return err
	}
	body, err := decodeGeneric(data)
	if err != nil {
		return err
	}
	split, metrics, err := logMetrics(body)
	if err != nil {
		return err
	}
	if _, err := s.st.LogMetrics(r.Context(), m.ID, split, metrics); err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, json.RawMessage("{}"))
	return nil
}
