// Package runs is the training-run API (/v1/training/runs…) of OpenPipe
// ART's serverless client: a run is one LoRA adapter trained by sequenced,
// idempotent, asynchronous operations (forward, forward_backward,
// optim_step, save_weights_for_sampler, save_state, load_state).
//
// State is durable: runs and operations are rows of the store (admitted
// atomically, in sequence, with their learner versions reserved), and
// every learner version is a folder (adapter + optimizer state) written
// before the operation that made it commits. An executor per node runs a
// run's operations strictly in order while it holds the run's lease; its
// in-memory learner (internal/train's, the job trainer's) is rebuilt from
// the committed version plus a replay of the forward_backward operations
// that succeeded since, so a restart or another node loses no admitted
// operation and never applies a learner version twice.
package runs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"flywheel/internal/auth"
	"flywheel/internal/basemodels"
	"flywheel/internal/checkpoints"
	"flywheel/internal/engine"
	"flywheel/internal/httpx"
	"flywheel/internal/store"
)

// Store is what the service persists through: runs and operations, and
// the models a run publishes to.
type Store interface {
	store.Runs
	store.Models
	// ModelTraining reports whether a training job of the model runs
	// (a run does not publish into a model a job is about to publish to).
	ModelTraining(ctx context.Context, modelID string) (bool, error)
}

// Config configures the service.
type Config struct {
	Store       Store
	Models      *engine.Registry
	ModelsDir   string
	Layout      store.Layout
	Checkpoints *checkpoints.Manager
	// NodeID names this node's leases (default: a random id).
	NodeID string
	// Shared says other nodes use the same store: leases are then left to
	// expire instead of being cleared at start-up.
	Shared bool
	// LeaseTTL is how long a run's lease outlives its last renewal (30 s).
	LeaseTTL time.Duration
	Logger   *slog.Logger
}

// Service serves the routes and executes the operations.
type Service struct {
	cfg  Config
	wake chan struct{}

	mu       sync.Mutex
	sessions map[string]*session // by run id; only the executor goroutine touches a session

	// checked holds the batches checked at admission on this node, by
	// operation id, so the executor does not decode them again.
	checked  sync.Map     // string → *checkedForward
	nchecked atomic.Int64 // entries of checked, at most maxChecked

	stop chan struct{}
	done chan struct{}
}

// maxChecked bounds the batches kept between admission and execution (an
// operation another node executes leaves its entry here until Close).
const maxChecked = 64

// unchecked removes and returns an operation's batch checked at admission.
func (s *Service) unchecked(id string) *checkedForward {
	v, ok := s.checked.LoadAndDelete(id)
	if !ok {
		return nil
	}
	s.nchecked.Add(-1)
	return v.(*checkedForward)
}

// checkedForward is a forward's checked batch and loss.
type checkedForward struct {
	tb           *tokenBatch
	ls           lossSpec
	withLogprobs bool
}

// New returns the service; Start runs its executor.
func New(cfg Config) *Service {
	if cfg.NodeID == "" {
		cfg.NodeID = "runs-" + store.NewID()
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Service{cfg: cfg, wake: make(chan struct{}, 1), sessions: map[string]*session{}}
}

// fingerprint identifies a request's content (its bytes as sent): the
// client's retries send the same bytes.
func fingerprint(body []byte) string {
	h := sha256.Sum256(body)
	return hex.EncodeToString(h[:])
}

// errorFor maps store errors to the wire: this package's domain-to-HTTP
// mapping, applied by the handler adapter to every route's error
// (httpx.GroupMux.MapErrors).
func errorFor(err error) error {
	var se *store.SequenceError
	switch {
	case errors.As(err, &se):
		return &httpx.Error{Status: http.StatusConflict, Message: se.Error(), Param: "sequence_id", Code: "invalid_sequence_id"}
	case errors.Is(err, store.ErrRequestReplayed):
		return &httpx.Error{Status: http.StatusConflict, Message: "request_id was already used with different content", Param: "request_id", Code: "request_id_reused"}
	case errors.Is(err, store.ErrRunNotOpen):
		return &httpx.Error{Status: http.StatusConflict, Message: err.Error(), Param: "run_id", Code: "run_not_open"}
	case errors.Is(err, store.ErrNotFound):
		return httpx.NotFound("%s", err.Error())
	case errors.Is(err, store.ErrConflict):
		return &httpx.Error{Status: http.StatusConflict, Message: err.Error(), Code: "conflict"}
	}
	return err
}

// checkSpec checks a run's spec against the base models.
func (s *Service) checkSpec(sp *Spec) error {
	if sp == nil {
		return missing("spec")
	}
	if sp.BaseModel == "" {
		return missing("spec.base_model")
	}
	if _, err := basemodels.Dir(s.cfg.ModelsDir, sp.BaseModel); err != nil {
		avail, _ := basemodels.List(s.cfg.ModelsDir)
		return &httpx.Error{Status: http.StatusBadRequest, Param: "spec.base_model", Code: "model_not_found",
			Message: fmt.Sprintf("unknown base model %q; available: %s", sp.BaseModel, strings.Join(avail, ", "))}
	}
	if sp.Dtype != "bfloat16" {
		return invalid("spec.dtype", "dtype must be bfloat16, got %q", sp.Dtype)
	}
	if sp.LoRARank < 1 || sp.LoRARank > 1024 {
		return invalid("spec.lora_rank", "lora_rank must be in 1..1024, got %d", sp.LoRARank)
	}
	if len(sp.LoRATargetModules) == 0 || len(sp.LoRATargetModules) > maxTargetMods {
		return invalid("spec.lora_target_modules", "lora_target_modules must list 1 to %d modules", maxTargetMods)
	}
	seen := map[string]bool{}
	for i, m := range sp.LoRATargetModules {
		if seen[m] {
			return invalid(fmt.Sprintf("spec.lora_target_modules[%d]", i), "module %q is listed twice", m)
		}
		seen[m] = true
	}
	if err := sp.loraConfig().Validate(); err != nil {
		return invalid("spec.lora_target_modules", "%s", err.Error())
	}
	return nil
}

// loraConfig is the adapter shape of a spec: alpha = 2·rank (the client
// does not send alpha; the engine's default ratio).
func (sp *Spec) loraConfig() engine.LoRAConfig {
	return engine.LoRAConfig{Rank: sp.LoRARank, Alpha: float64(2 * sp.LoRARank), TargetModules: sp.LoRATargetModules}
}

// Resolve finds or creates a run (POST /v1/training/runs:resolve).
func (s *Service) Resolve(ctx context.Context, p *auth.Principal, body []byte) (store.TrainingRun, error) {
	var req ResolveRequest
	if err := httpx.UnmarshalJSON(body, &req); err != nil {
		return store.TrainingRun{}, err
	}
	if err := checkIdentifier("request_id", req.RequestID); err != nil {
		return store.TrainingRun{}, err
	}
	if req.RunName != nil {
		if err := checkIdentifier("run_name", *req.RunName); err != nil {
			return store.TrainingRun{}, err
		}
	}
	if err := s.checkSpec(req.Spec); err != nil {
		return store.TrainingRun{}, err
	}
	if req.InitialState != nil {
		if err := req.InitialState.Source.check("initial_state.source"); err != nil {
			return store.TrainingRun{}, err
		}
		if _, err := s.resolveSource(ctx, p, req.InitialState.Source, "initial_state.source", req.Spec); err != nil {
			return store.TrainingRun{}, err
		}
	}
	spec, err := json.Marshal(req.Spec)
	if err != nil {
		return store.TrainingRun{}, err
	}
	var init json.RawMessage
	if req.InitialState != nil {
		if init, err = json.Marshal(req.InitialState); err != nil {
			return store.TrainingRun{}, err
		}
	}
	run, err := s.cfg.Store.ResolveRun(ctx, store.TrainingRun{Entity: p.PersonalEntity, CreatedBy: p.UserID,
		RequestID: req.RequestID, Fingerprint: fingerprint(body), RunName: req.RunName, Spec: spec, InitialState: init})
	if err != nil {
		if errors.Is(err, store.ErrConflict) {
			return run, &httpx.Error{Status: http.StatusConflict, Param: "run_name", Code: "run_name_conflict", Message: err.Error()}
		}
		return run, errorFor(err)
	}
	return run, nil
}

// runOf loads a run the caller may see (404 otherwise, as for a missing one).
func (s *Service) runOf(ctx context.Context, p *auth.Principal, id string) (store.TrainingRun, error) {
	run, err := s.cfg.Store.TrainingRunByID(ctx, id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return run, httpx.NotFound("training run %s not found", id)
		}
		return run, err
	}
	if !p.Member(run.Entity) {
		return store.TrainingRun{}, httpx.NotFound("training run %s not found", id)
	}
	return run, nil
}

func (s *Service) spec(run store.TrainingRun) (*Spec, error) {
	var sp Spec
	if err := json.Unmarshal(run.Spec, &sp); err != nil {
		return nil, fmt.Errorf("run %s: stored spec: %w", run.ID, err)
	}
	return &sp, nil
}

// Submit checks and admits a command of kind on run runID.
func (s *Service) Submit(ctx context.Context, p *auth.Principal, runID, kind string, body []byte) (store.TrainingOperation, error) {
	run, err := s.runOf(ctx, p, runID)
	if err != nil {
		return store.TrainingOperation{}, err
	}
	sp, err := s.spec(run)
	if err != nil {
		return store.TrainingOperation{}, err
	}
	cmd, transition, cf, target, err := s.check(ctx, p, sp, kind, body)
	if err != nil {
		return store.TrainingOperation{}, err
	}
	id := store.NewID()
	if cf != nil && s.nchecked.Add(1) <= maxChecked {
		s.checked.Store(id, cf)
	} else if cf != nil {
		s.nchecked.Add(-1)
	}
	op, err := s.cfg.Store.AdmitOperation(ctx, store.TrainingOperation{ID: id, RunID: run.ID, RequestID: cmd.RequestID,
		Fingerprint: fingerprint(body), Sequence: *cmd.SequenceID, Kind: kind, Body: body, TargetModel: target}, transition)
	if err != nil || op.ID != id {
		s.unchecked(id) // refused, or a replay of an earlier operation
	}
	if err != nil {
		return op, errorFor(err)
	}
	s.Wake()
	return op, nil
}

// check validates a command's body; it returns its common part, whether
// it is a learner transition (reserves a version), for a forward the
// checked batch, and for a publication the id of the model it goes to.
func (s *Service) check(ctx context.Context, p *auth.Principal, sp *Spec, kind string, body []byte) (command, bool, *checkedForward, string, error) {
	switch kind {
	case KindForward, KindForwardBackward:
		var req ForwardRequest
		if err := httpx.UnmarshalJSON(body, &req); err != nil {
			return command{}, false, nil, "", err
		}
		if err := req.command.check(); err != nil {
			return req.command, false, nil, "", err
		}
		if req.RetainPackedInput {
			return req.command, false, nil, "", invalid("retain_packed_input", "retain_packed_input is not supported: flywheel keeps no packed-input captures")
		}
		tb, ls, err := s.checkForward(&req, sp)
		if err != nil {
			return req.command, false, nil, "", err
		}
		return req.command, false, &checkedForward{tb: tb, ls: ls, withLogprobs: req.ReturnTokenLogprobs == nil || *req.ReturnTokenLogprobs}, "", nil
	case KindOptimStep:
		var req OptimStepRequest
		if err := httpx.UnmarshalJSON(body, &req); err != nil {
			return command{}, false, nil, "", err
		}
		if err := req.command.check(); err != nil {
			return req.command, true, nil, "", err
		}
		_, err := req.Optimizer.stepConfig()
		return req.command, true, nil, "", err
	case KindSaveSampler:
		var req SaveSamplerRequest
		if err := httpx.UnmarshalJSON(body, &req); err != nil {
			return command{}, false, nil, "", err
		}
		if err := req.command.check(); err != nil {
			return req.command, false, nil, "", err
		}
		if err := checkIdentifier("checkpoint_name", req.CheckpointName); err != nil {
			return req.command, false, nil, "", err
		}
		if req.Publication == nil {
			return req.command, false, nil, "", missing("publication")
		}
		if req.Publication.Target != "active" && req.Publication.Target != "saved_generation" {
			return req.command, false, nil, "", invalid("publication.target", "publication.target must be active or saved_generation, got %q", req.Publication.Target)
		}
		if err := checkIdentifier("publication.model_alias", req.Publication.ModelAlias); err != nil {
			return req.command, false, nil, "", err
		}
		m, err := s.modelFor(ctx, p.Entities, sp, req.Publication.ModelAlias)
		return req.command, false, nil, m.ID, err
	case KindSaveState:
		var req SaveStateRequest
		if err := httpx.UnmarshalJSON(body, &req); err != nil {
			return command{}, false, nil, "", err
		}
		if err := req.command.check(); err != nil {
			return req.command, false, nil, "", err
		}
		return req.command, false, nil, "", checkIdentifier("checkpoint_name", req.CheckpointName)
	case KindLoadState:
		var req LoadStateRequest
		if err := httpx.UnmarshalJSON(body, &req); err != nil {
			return command{}, false, nil, "", err
		}
		if err := req.command.check(); err != nil {
			return req.command, true, nil, "", err
		}
		if err := req.Source.check("source"); err != nil {
			return req.command, true, nil, "", err
		}
		_, err := s.resolveSource(ctx, p, req.Source, "source", sp)
		return req.command, true, nil, "", err
	}
	return command{}, false, nil, "", httpx.NotFound("unknown training-run command %q", kind)
}

// checkForward checks a forward's loss and batch against the run's model.
func (s *Service) checkForward(req *ForwardRequest, sp *Spec) (*tokenBatch, lossSpec, error) {
	ls, err := req.Loss.check()
	if err != nil {
		return nil, ls, err
	}
	base, err := s.cfg.Models.Get(sp.BaseModel)
	if err != nil {
		return nil, ls, fmt.Errorf("load base model %s: %w", sp.BaseModel, err)
	}
	tb, err := buildBatch(req.Batch, &ls, base.Config)
	return tb, ls, err
}

// modelFor is the registered model a run publishes to: the model named
// alias (the client sends its model's name) on the run's base model, in
// one of the caller's entities.
func (s *Service) modelFor(ctx context.Context, entities []string, sp *Spec, alias string) (store.TrainedModel, error) {
	ms, err := s.cfg.Store.ListModels(ctx, entities)
	if err != nil {
		return store.TrainedModel{}, err
	}
	var found []store.TrainedModel
	for _, m := range ms {
		if m.Name == alias && m.BaseModel == sp.BaseModel {
			found = append(found, m)
		}
	}
	switch len(found) {
	case 0:
		return store.TrainedModel{}, &httpx.Error{Status: http.StatusBadRequest, Param: "publication.model_alias", Code: "model_not_found",
			Message: fmt.Sprintf("no model named %q on base model %s in your entities: register it first (POST /v1/preview/models)", alias, sp.BaseModel)}
	case 1:
		return found[0], nil
	}
	return store.TrainedModel{}, &httpx.Error{Status: http.StatusBadRequest, Param: "publication.model_alias", Code: "ambiguous_model",
		Message: fmt.Sprintf("%d of your models are named %q (in several entities or projects)", len(found), alias)}
}

// source is a resolved checkpoint: a folder with the adapter (and maybe
// optimizer state) and its learner version.
type source struct {
	Dir     string
	Version int
}

// resolveSource finds the folder a checkpoint source names, checking the
// caller p may read it (p nil: checked at admission already) and that its
// adapter fits the spec:
// service_checkpoint "<run_id>/v<N>" is learner version N of a run;
// wandb_artifact "entity/project/name:vN" is step N of a registered model.
func (s *Service) resolveSource(ctx context.Context, p *auth.Principal, src *CheckpointSource, param string, sp *Spec) (source, error) {
	var out source
	switch src.Kind {
	case "service_checkpoint":
		runID, v, ok := parseCheckpointID(src.CheckpointID)
		if !ok {
			return out, invalid(param+".checkpoint_id", "checkpoint_id must be <run_id>/v<N> (as results name them), got %q", src.CheckpointID)
		}
		run, err := s.cfg.Store.TrainingRunByID(ctx, runID)
		if err != nil || (p != nil && !p.Member(run.Entity)) || v > run.CommittedVersion {
			return out, &httpx.Error{Status: http.StatusNotFound, Param: param + ".checkpoint_id", Code: "not_found", Message: fmt.Sprintf("checkpoint %s not found", src.CheckpointID)}
		}
		out = source{Dir: s.cfg.Layout.RunVersionDir(runID, v), Version: v}
		if _, err := os.Stat(out.Dir); err != nil {
			return out, &httpx.Error{Status: http.StatusNotFound, Param: param + ".checkpoint_id", Code: "not_found",
				Message: fmt.Sprintf("checkpoint %s is not kept: a run keeps its current version and those save_state named", src.CheckpointID)}
		}
	case "wandb_artifact":
		i := strings.LastIndex(src.Artifact, ":v")
		parts := strings.Split(src.Artifact[:i], "/")
		var step int
		fmt.Sscanf(src.Artifact[i+2:], "%d", &step)
		nf := &httpx.Error{Status: http.StatusNotFound, Param: param + ".artifact", Code: "not_found", Message: fmt.Sprintf("checkpoint %s not found", src.Artifact)}
		if p != nil && !p.Member(parts[0]) {
			return out, nf
		}
		m, err := s.cfg.Store.ModelByName(ctx, parts[0], parts[1], parts[2])
		if err != nil {
			return out, nf
		}
		ck, err := s.cfg.Store.CheckpointByStep(ctx, m.ID, step)
		if err != nil {
			return out, nf
		}
		if m.BaseModel != sp.BaseModel {
			return out, invalid(param+".artifact", "model %s is on base model %s, the run on %s", src.Artifact, m.BaseModel, sp.BaseModel)
		}
		out = source{Dir: ck.Dir, Version: step}
	}
	base, err := s.cfg.Models.Get(sp.BaseModel)
	if err != nil {
		return out, err
	}
	ad, err := engine.LoadAdapter(out.Dir, base.Config)
	if err != nil {
		return out, invalid(param, "the checkpoint's adapter cannot be read: %s", err.Error())
	}
	want := sp.loraConfig()
	if ad.Config.Rank != want.Rank || !sameSet(ad.Config.TargetModules, want.TargetModules) {
		return out, invalid(param, "the checkpoint's adapter (rank %d, %v) differs from the run's spec (rank %d, %v)",
			ad.Config.Rank, ad.Config.TargetModules, want.Rank, want.TargetModules)
	}
	return out, nil
}

func sameSet(a, b []string) bool {
	x, y := append([]string(nil), a...), append([]string(nil), b...)
	sort.Strings(x)
	sort.Strings(y)
	return strings.Join(x, "\x00") == strings.Join(y, "\x00")
}

// checkpointID names learner version v of a run.
func checkpointID(runID string, v int) string { return fmt.Sprintf("%s/v%d", runID, v) }

func parseCheckpointID(id string) (string, int, bool) {
	i := strings.LastIndex(id, "/v")
	if i <= 0 {
		return "", 0, false
	}
	var v int
	if n, err := fmt.Sscanf(id[i+2:], "%d", &v); n != 1 || err != nil || v < 0 || fmt.Sprint(v) != id[i+2:] {
		return "", 0, false
	}
	return id[:i], v, true
}

// Wake tells the executor that work was admitted.
func (s *Service) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}
