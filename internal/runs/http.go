package runs

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"flywheel/internal/httpx"
	"flywheel/internal/store"
)

// Register mounts the routes (an api.Registrar). Go's patterns cannot
// match a suffix inside a segment ("{run_id}:close"), so the handlers split
// the ":verb" off the last segment themselves.
func (s *Service) Register(rt *httpx.Routes) {
	mux := rt.In(httpx.OpenAIAPI).MapErrors(errorFor)
	mux.Route("POST /v1/training/runs:resolve", s.resolve)
	mux.Route("GET /v1/training/runs/{run}", s.getRun)
	mux.Route("POST /v1/training/runs/{run}", s.runVerb)
	mux.Route("POST /v1/training/runs/{run}/{kind}", s.command)
	mux.Route("GET /v1/training/runs/{run}/operations/{op}", s.getOperation)
	mux.Route("POST /v1/training/runs/{run}/operations/{op}", s.operationVerb)
	mux.Route("GET /v1/training/runs/{run}/operations/{op}/result", s.result)
	mux.Route("POST /v1/training/runs/{run}/operations/{op}/{verb}", s.resultVerb)
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

func noRoute(r *http.Request) error {
	return httpx.NotFound("no route %s %s", r.Method, r.URL.Path)
}

func (s *Service) resolve(w http.ResponseWriter, r *http.Request) error {
	caller, perr := httpx.Principal(r)
	if perr != nil {
		return perr
	}
	body, err := httpx.ReadBody(r, nil)
	if err != nil {
		return err
	}
	run, err := s.Resolve(r.Context(), caller, body)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, viewRun(run))
	return nil
}

func (s *Service) getRun(w http.ResponseWriter, r *http.Request) error {
	caller, perr := httpx.Principal(r)
	if perr != nil {
		return perr
	}
	id := r.PathValue("run")
	if strings.Contains(id, ":") {
		return noRoute(r)
	}
	run, err := s.runOf(r.Context(), caller, id)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, viewRun(run))
	return nil
}

// runVerb is POST /v1/training/runs/{run_id}:close {request_id}.
func (s *Service) runVerb(w http.ResponseWriter, r *http.Request) error {
	caller, perr := httpx.Principal(r)
	if perr != nil {
		return perr
	}
	id, verb, _ := strings.Cut(r.PathValue("run"), ":")
	if verb != "close" {
		return noRoute(r)
	}
	run, err := s.runOf(r.Context(), caller, id)
	if err != nil {
		return err
	}
	body, err := httpx.ReadBody(r, nil)
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		var req RequestIDOnly
		if err := httpx.UnmarshalJSON(body, &req); err != nil {
			return err
		}
	}
	if run, err = s.cfg.Store.CloseRun(r.Context(), run.ID); err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, viewRun(run))
	return nil
}

func (s *Service) command(w http.ResponseWriter, r *http.Request) error {
	caller, perr := httpx.Principal(r)
	if perr != nil {
		return perr
	}
	kind := r.PathValue("kind")
	switch kind {
	case KindForward, KindForwardBackward, KindOptimStep, KindSaveState, KindLoadState, KindSaveSampler:
	default:
		return httpx.NotFound("unknown training-run command %q", kind)
	}
	body, err := httpx.ReadBody(r, nil)
	if err != nil {
		return err
	}
	op, err := s.Submit(r.Context(), caller, r.PathValue("run"), kind, body)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, viewOp(op))
	return nil
}

// operation loads an operation of a run the caller may see.
func (s *Service) operation(r *http.Request, opID string) (store.TrainingOperation, error) {
	caller, perr := httpx.Principal(r)
	if perr != nil {
		return store.TrainingOperation{}, perr
	}
	run, err := s.runOf(r.Context(), caller, r.PathValue("run"))
	if err != nil {
		return store.TrainingOperation{}, err
	}
	op, err := s.cfg.Store.TrainingOperationByID(r.Context(), run.ID, opID)
	if err != nil {
		return op, err
	}
	return op, nil
}

func (s *Service) getOperation(w http.ResponseWriter, r *http.Request) error {
	op, err := s.operation(r, r.PathValue("op"))
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, viewOp(op))
	return nil
}

// operationVerb is POST …/operations/{op}:cancel.
func (s *Service) operationVerb(w http.ResponseWriter, r *http.Request) error {
	id, verb, _ := strings.Cut(r.PathValue("op"), ":")
	if verb != "cancel" {
		return noRoute(r)
	}
	op, err := s.operation(r, id)
	if err != nil {
		return err
	}
	if op, err = s.cfg.Store.CancelOperation(r.Context(), op.RunID, op.ID); err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, viewOp(op))
	return nil
}

func (s *Service) result(w http.ResponseWriter, r *http.Request) error {
	op, err := s.operation(r, r.PathValue("op"))
	if err != nil {
		return err
	}
	switch {
	case op.ResultReleased:
		return &httpx.Error{Status: http.StatusGone, Code: "result_released", Message: "the operation's result was released"}
	case op.Status != store.OpSucceeded || op.Result == nil:
		return &httpx.Error{Status: http.StatusConflict, Code: "no_result", Message: "the operation is " + op.Status + " and has no result"}
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(op.Result) // stored as the JSON it is answered as
	return nil
}

// resultVerb is POST …/operations/{op}/result:release {request_id}.
func (s *Service) resultVerb(w http.ResponseWriter, r *http.Request) error {
	if r.PathValue("verb") != "result:release" {
		return noRoute(r)
	}
	body, err := httpx.ReadBody(r, nil)
	if err != nil {
		return err
	}
	var req RequestIDOnly
	if err := httpx.UnmarshalJSON(body, &req); err != nil {
		return err
	}
	if err := checkIdentifier("request_id", req.RequestID); err != nil {
		return err
	}
	op, err := s.operation(r, r.PathValue("op"))
	if err != nil {
		return err
	}
	if _, err := s.cfg.Store.ReleaseResult(r.Context(), op.RunID, op.ID); err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"operation_id": op.ID, "request_id": req.RequestID, "released": true})
	return nil
}
