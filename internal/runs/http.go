package runs

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"flywheel/internal/auth"
	"flywheel/internal/httpx"
	"flywheel/internal/store"
)

// Register mounts the routes (an api.Registrar). Go's patterns cannot
// match a suffix inside a segment ("{run_id}:close"), so the handlers split
// the ":verb" off the last segment themselves.
func (s *Service) Register(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/training/runs:resolve", s.handleResolve)
	mux.HandleFunc("GET /v1/training/runs/{run}", s.handleGetRun)
	mux.HandleFunc("POST /v1/training/runs/{run}", s.handleRunVerb)
	mux.HandleFunc("POST /v1/training/runs/{run}/{kind}", s.handleCommand)
	mux.HandleFunc("GET /v1/training/runs/{run}/operations/{op}", s.handleGetOperation)
	mux.HandleFunc("POST /v1/training/runs/{run}/operations/{op}", s.handleOperationVerb)
	mux.HandleFunc("GET /v1/training/runs/{run}/operations/{op}/result", s.handleResult)
	mux.HandleFunc("POST /v1/training/runs/{run}/operations/{op}/{verb}", s.handleResultVerb)
}

// principalOf is a principal with the rights of a run's entity.
func principalOf(run store.TrainingRun) *auth.Principal {
	return &auth.Principal{PersonalEntity: run.Entity, Entities: []string{run.Entity}}
}

func (s *Service) body(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
}

// runView is a run on the wire.
type runView struct {
	RunID                   string          `json:"run_id"`
	RunName                 *string         `json:"run_name"`
	Spec                    json.RawMessage `json:"spec"`
	Status                  string          `json:"status"`
	NextSequenceID          int             `json:"next_sequence_id"`
	ProjectedLearnerVersion int             `json:"projected_learner_version"`
	CommittedLearnerVersion int             `json:"committed_learner_version"`
}

func viewRun(r store.TrainingRun) runView {
	return runView{RunID: r.ID, RunName: r.RunName, Spec: r.Spec, Status: r.Status, NextSequenceID: r.NextSequence,
		ProjectedLearnerVersion: r.ProjectedVersion, CommittedLearnerVersion: r.CommittedVersion}
}

// opView is an operation on the wire.
type opView struct {
	OperationID     string          `json:"operation_id"`
	RunID           string          `json:"run_id"`
	RequestID       string          `json:"request_id"`
	SequenceID      int             `json:"sequence_id"`
	Kind            string          `json:"kind"`
	Status          string          `json:"status"`
	ParentVersion   int             `json:"learner_parent_version"`
	ReservedVersion *int            `json:"reserved_output_learner_version"`
	AdmittedAt      string          `json:"admitted_at"`
	StartedAt       *string         `json:"started_at"`
	EndedAt         *string         `json:"ended_at"`
	CancelRequested bool            `json:"cancel_requested"`
	EventCursor     int             `json:"latest_event_cursor"`
	ResultSummary   json.RawMessage `json:"result_summary"`
	ResultRef       json.RawMessage `json:"result_ref"`
	Error           *opErrorView    `json:"error"`
}

type opErrorView struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func timeStr(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := store.FormatTime(*t)
	return &s
}

func viewOp(o store.TrainingOperation) opView {
	v := opView{OperationID: o.ID, RunID: o.RunID, RequestID: o.RequestID, SequenceID: o.Sequence, Kind: o.Kind,
		Status: o.Status, ParentVersion: o.ParentVersion, ReservedVersion: o.ReservedVersion,
		AdmittedAt: store.FormatTime(o.AdmittedAt), StartedAt: timeStr(o.StartedAt), EndedAt: timeStr(o.EndedAt),
		CancelRequested: o.CancelRequested, EventCursor: o.EventCursor, ResultSummary: json.RawMessage("null"),
		ResultRef: json.RawMessage("null")}
	if o.Status == store.OpSucceeded && o.Result != nil {
		v.ResultSummary = o.Result
	}
	if o.Status == store.OpFailed || o.Status == store.OpCancelled {
		code := o.ErrorCode
		if o.Status == store.OpCancelled {
			code, o.ErrorMessage = "cancelled", "the operation was cancelled before it ran"
		}
		v.Error = &opErrorView{Code: code, Message: o.ErrorMessage}
	}
	return v
}

func (s *Service) handleResolve(w http.ResponseWriter, r *http.Request) {
	body, err := s.body(w, r)
	if err != nil {
		httpx.WriteOpenAIError(w, err)
		return
	}
	run, err := s.Resolve(r.Context(), principal(r), body)
	if err != nil {
		httpx.WriteOpenAIError(w, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, viewRun(run))
}

func (s *Service) handleGetRun(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("run")
	if strings.Contains(id, ":") {
		httpx.WriteOpenAIError(w, httpx.NotFound("no route GET %s", r.URL.Path))
		return
	}
	run, err := s.runOf(r.Context(), principal(r), id)
	if err != nil {
		httpx.WriteOpenAIError(w, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, viewRun(run))
}

// handleRunVerb is POST /v1/training/runs/{run_id}:close.
func (s *Service) handleRunVerb(w http.ResponseWriter, r *http.Request) {
	id, verb, _ := strings.Cut(r.PathValue("run"), ":")
	if verb != "close" {
		httpx.WriteOpenAIError(w, httpx.NotFound("no route POST %s", r.URL.Path))
		return
	}
	run, err := s.runOf(r.Context(), principal(r), id)
	if err != nil {
		httpx.WriteOpenAIError(w, err)
		return
	}
	body, err := s.body(w, r)
	if err != nil {
		httpx.WriteOpenAIError(w, err)
		return
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		var req RequestIDOnly
		if err := httpx.UnmarshalJSON(body, &req); err != nil {
			httpx.WriteOpenAIError(w, err)
			return
		}
	}
	run, err = s.cfg.Store.CloseRun(r.Context(), run.ID)
	if err != nil {
		httpx.WriteOpenAIError(w, errorFor(err))
		return
	}
	httpx.WriteJSON(w, http.StatusOK, viewRun(run))
}

func (s *Service) handleCommand(w http.ResponseWriter, r *http.Request) {
	kind := r.PathValue("kind")
	switch kind {
	case KindForward, KindForwardBackward, KindOptimStep, KindSaveState, KindLoadState, KindSaveSampler:
	default:
		httpx.WriteOpenAIError(w, httpx.NotFound("unknown training-run command %q", kind))
		return
	}
	body, err := s.body(w, r)
	if err != nil {
		httpx.WriteOpenAIError(w, err)
		return
	}
	op, err := s.Submit(r.Context(), principal(r), r.PathValue("run"), kind, body)
	if err != nil {
		httpx.WriteOpenAIError(w, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, viewOp(op))
}

// operation loads an operation of a run the caller may see.
func (s *Service) operation(r *http.Request, opID string) (store.TrainingOperation, error) {
	run, err := s.runOf(r.Context(), principal(r), r.PathValue("run"))
	if err != nil {
		return store.TrainingOperation{}, err
	}
	op, err := s.cfg.Store.TrainingOperationByID(r.Context(), run.ID, opID)
	if err != nil {
		return op, errorFor(err)
	}
	return op, nil
}

func (s *Service) handleGetOperation(w http.ResponseWriter, r *http.Request) {
	op, err := s.operation(r, r.PathValue("op"))
	if err != nil {
		httpx.WriteOpenAIError(w, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, viewOp(op))
}

// handleOperationVerb is POST …/operations/{op}:cancel.
func (s *Service) handleOperationVerb(w http.ResponseWriter, r *http.Request) {
	id, verb, _ := strings.Cut(r.PathValue("op"), ":")
	if verb != "cancel" {
		httpx.WriteOpenAIError(w, httpx.NotFound("no route POST %s", r.URL.Path))
		return
	}
	op, err := s.operation(r, id)
	if err != nil {
		httpx.WriteOpenAIError(w, err)
		return
	}
	op, err = s.cfg.Store.CancelOperation(r.Context(), op.RunID, op.ID)
	if err != nil {
		httpx.WriteOpenAIError(w, errorFor(err))
		return
	}
	httpx.WriteJSON(w, http.StatusOK, viewOp(op))
}

func (s *Service) handleResult(w http.ResponseWriter, r *http.Request) {
	op, err := s.operation(r, r.PathValue("op"))
	if err != nil {
		httpx.WriteOpenAIError(w, err)
		return
	}
	switch {
	case op.ResultReleased:
		httpx.WriteOpenAIError(w, &httpx.Error{Status: http.StatusGone, Code: "result_released", Message: "the operation's result was released"})
	case op.Status != store.OpSucceeded || op.Result == nil:
		httpx.WriteOpenAIError(w, &httpx.Error{Status: http.StatusConflict, Code: "no_result", Message: "the operation is " + op.Status + " and has no result"})
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(op.Result)
	}
}

// handleResultVerb is POST …/operations/{op}/result:release.
func (s *Service) handleResultVerb(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("verb") != "result:release" {
		httpx.WriteOpenAIError(w, httpx.NotFound("no route POST %s", r.URL.Path))
		return
	}
	body, err := s.body(w, r)
	if err != nil {
		httpx.WriteOpenAIError(w, err)
		return
	}
	var req RequestIDOnly
	if err := httpx.UnmarshalJSON(body, &req); err != nil {
		httpx.WriteOpenAIError(w, err)
		return
	}
	if err := checkIdentifier("request_id", req.RequestID); err != nil {
		httpx.WriteOpenAIError(w, err)
		return
	}
	op, err := s.operation(r, r.PathValue("op"))
	if err != nil {
		httpx.WriteOpenAIError(w, err)
		return
	}
	if _, err := s.cfg.Store.ReleaseResult(r.Context(), op.RunID, op.ID); err != nil {
		httpx.WriteOpenAIError(w, errorFor(err))
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"operation_id": op.ID, "request_id": req.RequestID, "released": true})
}
