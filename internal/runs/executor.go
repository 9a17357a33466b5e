package runs

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"flywheel/internal/checkpoints"
	"flywheel/internal/engine"
	"flywheel/internal/store"
	"flywheel/internal/train"
)

// session is a run's learner in memory: learner version `version` plus the
// gradients of the forward_backward operations `contrib`, every operation
// up to sequence lastSeq applied.
type session struct {
	learner *train.Learner
	version int
	lastSeq int
	contrib []string
}

// maxSessions bounds the learners kept in memory; an evicted one is
// rebuilt from its folder when its run next runs.
const maxSessions = 8

// Start runs the executor until ctx ends or Close.
func (s *Service) Start(ctx context.Context) error {
	if !s.cfg.Shared {
		// One node: every lease belongs to a dead process.
		if err := s.cfg.Store.ClearRunLeases(ctx); err != nil {
			return err
		}
	}
	s.sweep()
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go s.loop()
	return nil
}

// sweep removes the work folders of learner versions that a crash left
// (on a shared data dir only old ones: another node may be writing).
func (s *Service) sweep() {
	runs, err := store.ListDir(s.cfg.Layout.RunsDir())
	if err != nil {
		return
	}
	for _, r := range runs {
		if !r.IsDir() {
			continue
		}
		removed, err := store.Sweep(s.cfg.Layout.RunDir(r.Name()), s.cfg.Shared, store.IsWork)
		for _, name := range removed {
			s.cfg.Logger.Info("runs: removed a learner version interrupted by a restart", "run", r.Name(), "folder", name)
		}
		if err != nil {
			s.cfg.Logger.Warn("runs: remove an interrupted learner version", "run", r.Name(), "err", err)
		}
	}
}

// Close stops the executor after the operation in progress.
func (s *Service) Close() {
	if s.stop == nil {
		return
	}
	close(s.stop)
	<-s.done
	s.stop = nil
	s.mu.Lock()
	ids := make([]string, 0, len(s.sessions))
	for id := range s.sessions {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.drop(id) // another node may take the run over at once
	}
}

func (s *Service) loop() {
	defer close(s.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	poll := time.NewTicker(250 * time.Millisecond)
	defer poll.Stop()
	renew := time.NewTicker(s.cfg.LeaseTTL / 3)
	defer renew.Stop()
	for {
		ids, err := s.cfg.Store.RunsWithPendingOperations(ctx, s.cfg.NodeID, 64)
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("runs: list pending runs", "err", err)
		}
		for _, id := range ids {
			if ctx.Err() != nil {
				return
			}
			s.drive(ctx, id)
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-poll.C:
		case <-renew.C:
			if err := s.cfg.Store.RenewRunLeases(ctx, s.cfg.NodeID, s.cfg.LeaseTTL); err != nil && ctx.Err() == nil {
				s.cfg.Logger.Warn("runs: renew leases", "err", err)
			}
		}
	}
}

// drive executes a run's pending operations in order while holding its lease.
func (s *Service) drive(ctx context.Context, runID string) {
	ok, err := s.cfg.Store.AcquireRunLease(ctx, runID, s.cfg.NodeID, s.cfg.LeaseTTL)
	if err != nil || !ok {
		s.drop(runID)
		return
	}
	// The lease is kept while the run's learner stays in memory (renewed by
	// the loop): the next operation needs no new claim. drop gives it back.
	stopRenew := make(chan struct{})
	defer close(stopRenew)
	go func() {
		t := time.NewTicker(s.cfg.LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-stopRenew:
				return
			case <-t.C:
				_ = s.cfg.Store.RenewRunLeases(ctx, s.cfg.NodeID, s.cfg.LeaseTTL)
			}
		}
	}()
	for ctx.Err() == nil {
		op, ok, err := s.cfg.Store.NextPendingOperation(ctx, runID)
		if err != nil || !ok {
			if !s.cached(runID) {
				_ = s.cfg.Store.ReleaseRunLease(context.WithoutCancel(ctx), runID, s.cfg.NodeID)
			}
			return
		}
		run, err := s.cfg.Store.TrainingRunByID(ctx, runID)
		if err != nil {
			return
		}
		if err := s.execute(ctx, run, op); err != nil {
			if ctx.Err() == nil {
				s.cfg.Logger.Warn("runs: operation not recorded", "run", runID, "operation", op.ID, "err", err)
			}
			s.drop(runID)
			return
		}
	}
}

// forget drops a run's learner from memory, keeping the lease (the
// executor still runs the run).
func (s *Service) forget(runID string) {
	s.mu.Lock()
	delete(s.sessions, runID)
	s.mu.Unlock()
}

// drop forgets a run's learner and gives its lease back.
func (s *Service) drop(runID string) {
	s.mu.Lock()
	_, had := s.sessions[runID]
	delete(s.sessions, runID)
	s.mu.Unlock()
	if had {
		_ = s.cfg.Store.ReleaseRunLease(context.Background(), runID, s.cfg.NodeID)
	}
}

func (s *Service) cached(runID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[runID] != nil
}

// opError is an operation's failure as the wire shows it.
type opError struct {
	code, msg string
}

func (e *opError) Error() string { return e.msg }

func fail(code, format string, args ...any) *opError {
	return &opError{code: code, msg: fmt.Sprintf(format, args...)}
}

// execute runs one operation and records its end. An error return means
// the end could not be recorded (the lease was lost, the store failed):
// the operation stays pending for whoever holds the lease next.
func (s *Service) execute(ctx context.Context, run store.TrainingRun, op store.TrainingOperation) (err error) {
	op, err = s.cfg.Store.StartOperation(ctx, s.cfg.NodeID, run.ID, op.ID)
	if err != nil {
		return err
	}
	out := store.OperationOutcome{RunID: run.ID, OperationID: op.ID}
	var res any
	func() {
		defer func() {
			if p := recover(); p != nil {
				s.cfg.Logger.Error("runs: panic", "run", run.ID, "operation", op.ID, "panic", p, "stack", string(debug.Stack()))
				err = fail("internal_error", "internal error in the executor")
			}
		}()
		res, err = s.apply(ctx, run, op, &out)
	}()
	if err != nil {
		var oe *opError
		if !errors.As(err, &oe) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var de *train.DivergedError
			if errors.As(err, &de) {
				oe = fail("training_diverged", "%s", err.Error())
			} else {
				s.cfg.Logger.Error("runs: operation failed", "run", run.ID, "operation", op.ID, "err", err)
				oe = fail("execution_failed", "%s", err.Error())
			}
		}
		s.forget(run.ID) // nothing of a failed operation stays applied
		out.Status, out.ErrorCode, out.Message = store.OpFailed, oe.code, oe.msg
		out.FailRun = op.ReservedVersion != nil
		out.CommitVersion, out.Checkpoint, out.Result = nil, nil, nil
		return s.cfg.Store.FinishOperation(context.WithoutCancel(ctx), s.cfg.NodeID, out)
	}
	out.Status = store.OpSucceeded
	if out.Result, err = json.Marshal(res); err != nil {
		return err
	}
	if out.Checkpoint != nil {
		return nil // recorded by publish's record callback
	}
	if err := s.cfg.Store.FinishOperation(context.WithoutCancel(ctx), s.cfg.NodeID, out); err != nil {
		return err
	}
	if out.CommitVersion != nil {
		s.prune(ctx, run.ID, *out.CommitVersion-1)
	}
	return nil
}

// learnerFor returns the run's learner ready for operation seq: learner
// version run.CommittedVersion with the gradients of the forward_backward
// operations that succeeded since it.
func (s *Service) learnerFor(ctx context.Context, run store.TrainingRun, sp *Spec, seq int) (*session, error) {
	s.mu.Lock()
	ss := s.sessions[run.ID]
	s.mu.Unlock()
	if ss != nil && ss.version == run.CommittedVersion && ss.lastSeq == seq-1 {
		return ss, nil
	}
	s.forget(run.ID)
	dir := s.cfg.Layout.RunVersionDir(run.ID, run.CommittedVersion)
	if run.CommittedVersion == 0 {
		if _, err := os.Stat(filepath.Join(dir, checkpoints.AdapterFile)); err != nil {
			if err := s.initialVersion(ctx, run, sp); err != nil {
				return nil, err
			}
		}
	}
	l, err := train.OpenLearner(s.cfg.Models, sp.BaseModel, dir, true)
	if err != nil {
		return nil, fmt.Errorf("open learner version %d: %w", run.CommittedVersion, err)
	}
	ss = &session{learner: l, version: run.CommittedVersion, lastSeq: seq - 1}
	ops, err := s.cfg.Store.TrainingOperations(ctx, run.ID, 0, seq)
	if err != nil {
		return nil, err
	}
	since := -1
	for _, o := range ops {
		if o.Status == store.OpSucceeded && o.ReservedVersion != nil && *o.ReservedVersion == run.CommittedVersion {
			since = o.Sequence
		}
	}
	for _, o := range ops {
		if o.Sequence <= since || o.Kind != KindForwardBackward || o.Status != store.OpSucceeded {
			continue
		}
		cf, err := s.checkedOf(o, sp)
		if err != nil {
			return nil, fmt.Errorf("replay operation %s: %w", o.ID, err)
		}
		tb, ls := cf.tb, cf.ls
		if _, _, err := l.ForwardBackward(tb.b, func(lp []float64) (float64, []float64) { return lossAndGrad(ls, tb, lp) }); err != nil {
			return nil, fmt.Errorf("replay operation %s: %w", o.ID, err)
		}
		ss.contrib = append(ss.contrib, o.ID)
	}
	var evict string
	s.mu.Lock()
	if len(s.sessions) >= maxSessions {
		for id := range s.sessions {
			evict = id
			break
		}
	}
	s.sessions[run.ID] = ss
	s.mu.Unlock()
	if evict != "" {
		s.drop(evict)
	}
	return ss, nil
}

// initialVersion writes learner version 0: the initial state's checkpoint,
// else a fresh adapter (B = 0, so the adapted model is the base model)
// seeded by the spec's seed (or the run id).
func (s *Service) initialVersion(ctx context.Context, run store.TrainingRun, sp *Spec) error {
	base, err := s.cfg.Models.Get(sp.BaseModel)
	if err != nil {
		return fmt.Errorf("load base model %s: %w", sp.BaseModel, err)
	}
	var l *train.Learner
	if run.InitialState != nil {
		var st InitialState
		if err := json.Unmarshal(run.InitialState, &st); err != nil {
			return err
		}
		src, err := s.resolveSourceAs(ctx, st.Source, sp)
		if err != nil {
			return err
		}
		if l, err = train.OpenLearner(s.cfg.Models, sp.BaseModel, src.Dir, st.RestoreOptimizer); err != nil {
			return fail("initial_state_unreadable", "the initial state cannot be loaded: %s", err.Error())
		}
	} else {
		seed := uint64(0)
		if sp.Seed != nil {
			seed = uint64(*sp.Seed)
		} else {
			h := fnv.New64a()
			h.Write([]byte(run.ID))
			seed = h.Sum64()
		}
		ad, err := engine.NewAdapter(base.Config, sp.loraConfig(), seed)
		if err != nil {
			return err
		}
		if l, err = train.NewLearner(s.cfg.Models, sp.BaseModel, ad, nil); err != nil {
			return err
		}
	}
	return s.saveVersion(run.ID, 0, l)
}

// resolveSourceAs resolves a checkpoint source at execution (the caller's
// rights to it were checked at admission).
func (s *Service) resolveSourceAs(ctx context.Context, src *CheckpointSource, sp *Spec) (source, error) {
	got, err := s.resolveSource(ctx, nil, src, "source", sp)
	if err != nil {
		return got, fail("checkpoint_not_found", "%s", err.Error())
	}
	return got, nil
}

// saveVersion writes learner version v of a run: a work folder renamed
// into place (replacing what a crash may have left at that name: a
// version's folder is complete before its operation commits, and an
// uncommitted one is redone the same).
func (s *Service) saveVersion(runID string, v int, l *train.Learner) error {
	work := s.cfg.Layout.RunWorkDir(runID, v, s.cfg.NodeID)
	if err := store.EmptyDir(work); err != nil {
		return err
	}
	if err := l.Save(work); err != nil {
		_ = os.RemoveAll(work)
		return err
	}
	return store.PublishDir(work, s.cfg.Layout.RunVersionDir(runID, v))
}

// apply executes op and returns its result (out receives the version to
// commit and, for a publication, is recorded by apply itself).
func (s *Service) apply(ctx context.Context, run store.TrainingRun, op store.TrainingOperation, out *store.OperationOutcome) (any, error) {
	sp, err := s.spec(run)
	if err != nil {
		return nil, err
	}
	if run.Status == store.RunFailed {
		return nil, fail("run_failed", "the run failed")
	}
	if op.ParentVersion != run.CommittedVersion {
		return nil, fail("learner_version_mismatch", "the operation was admitted on learner version %d, the run is at %d", op.ParentVersion, run.CommittedVersion)
	}
	switch op.Kind {
	case KindForward, KindForwardBackward:
		cf, err := s.checkedOf(op, sp)
		if err != nil {
			return nil, err
		}
		tb, ls := cf.tb, cf.ls
		ss, err := s.learnerFor(ctx, run, sp, op.Sequence)
		if err != nil {
			return nil, err
		}
		var lp []float64
		var L float64
		if op.Kind == KindForward {
			if lp, err = ss.learner.Forward(tb.b); err != nil {
				return nil, err
			}
		} else {
			if lp, L, err = ss.learner.ForwardBackward(tb.b, func(lp []float64) (float64, []float64) { return lossAndGrad(ls, tb, lp) }); err != nil {
				return nil, err
			}
			ss.contrib = append(ss.contrib, op.ID)
		}
		ss.lastSeq = op.Sequence
		return forwardResult(op, tb, ls, lp, L, cf.withLogprobs), nil
	case KindOptimStep:
		var req OptimStepRequest
		if err := json.Unmarshal(op.Body, &req); err != nil {
			return nil, err
		}
		h, err := req.Optimizer.stepConfig()
		if err != nil {
			return nil, fail("invalid_optimizer", "%s", err.Error())
		}
		ss, err := s.learnerFor(ctx, run, sp, op.Sequence)
		if err != nil {
			return nil, err
		}
		if len(ss.contrib) == 0 {
			return nil, fail("no_gradients", "no forward_backward succeeded since learner version %d: nothing to step on", ss.version)
		}
		gn, err := ss.learner.Step(train.StepConfig{LearningRate: h.LR, Beta1: h.Beta1, Beta2: h.Beta2, Eps: h.Eps,
			WeightDecay: h.WeightDecay, GradClipNorm: h.GradClip})
		if err != nil {
			return nil, err
		}
		v := *op.ReservedVersion
		if err := s.saveVersion(run.ID, v, ss.learner); err != nil {
			return nil, err
		}
		out.CommitVersion = &v
		contrib := ss.contrib
		ss.version, ss.lastSeq, ss.contrib = v, op.Sequence, nil
		return map[string]any{"operation_id": op.ID, "kind": op.Kind,
			"metrics":                    map[string]float64{"grad_norm": gn, "learning_rate": h.LR},
			"contributing_operation_ids": contrib,
			"checkpoint":                 checkpointRef(run.ID, v), "learner_version": v}, nil
	case KindSaveState:
		s.touch(run.ID, op.Sequence)
		v := op.ParentVersion
		if err := s.ensureVersion(ctx, run, sp, v); err != nil {
			return nil, err
		}
		return map[string]any{"operation_id": op.ID, "kind": op.Kind, "metrics": map[string]float64{},
			"checkpoint": checkpointRef(run.ID, v),
			"archive": map[string]any{"checkpoint_id": checkpointID(run.ID, v), "learner_version": v,
				"components": []string{"weights", "optimizer"}, "wandb_artifact": fmt.Sprintf("%s/training-runs/%s:v%d", run.Entity, run.ID, v)}}, nil
	case KindLoadState:
		var req LoadStateRequest
		if err := json.Unmarshal(op.Body, &req); err != nil {
			return nil, err
		}
		src, err := s.resolveSourceAs(ctx, req.Source, sp)
		if err != nil {
			return nil, err
		}
		l, err := train.OpenLearner(s.cfg.Models, sp.BaseModel, src.Dir, req.RestoreOptimizer)
		if err != nil {
			return nil, fail("checkpoint_unreadable", "the checkpoint cannot be loaded: %s", err.Error())
		}
		v := *op.ReservedVersion
		if err := s.saveVersion(run.ID, v, l); err != nil {
			return nil, err
		}
		out.CommitVersion = &v
		s.forget(run.ID) // the next operation opens version v
		return map[string]any{"operation_id": op.ID, "kind": op.Kind, "metrics": map[string]float64{},
			"checkpoint": checkpointRef(run.ID, v), "optimizer_restored": req.RestoreOptimizer}, nil
	case KindSaveSampler:
		var req SaveSamplerRequest
		if err := json.Unmarshal(op.Body, &req); err != nil {
			return nil, err
		}
		s.touch(run.ID, op.Sequence)
		return s.publish(ctx, run, sp, op, &req, out)
	}
	return nil, fail("unknown_kind", "unknown operation kind %q", op.Kind)
}

// checkedOf is a forward operation's checked batch: the one admission
// checked on this node, else its stored body checked again.
func (s *Service) checkedOf(op store.TrainingOperation, sp *Spec) (*checkedForward, error) {
	if cf := s.unchecked(op.ID); cf != nil {
		return cf, nil
	}
	var req ForwardRequest
	if err := json.Unmarshal(op.Body, &req); err != nil {
		return nil, err
	}
	tb, ls, err := s.checkForward(&req, sp)
	if err != nil {
		return nil, fail("invalid_batch", "%s", err.Error())
	}
	return &checkedForward{tb: tb, ls: ls, withLogprobs: req.ReturnTokenLogprobs == nil || *req.ReturnTokenLogprobs}, nil
}

// prune removes the folder of learner version v, superseded by v+1,
// unless a save_state named it (so a run keeps its committed version and
// its saved ones, not every step). Version 0 stays: a run's replay of its
// initial state never needs it again, but load_state of "<run>/v0" is how
// a client returns to the start.
func (s *Service) prune(ctx context.Context, runID string, v int) {
	if v <= 0 {
		return
	}
	ops, err := s.cfg.Store.TrainingOperations(ctx, runID, 0, math.MaxInt32)
	if err != nil {
		return
	}
	for _, o := range ops {
		if o.Kind == KindSaveState && o.Status == store.OpSucceeded && o.ParentVersion == v {
			return
		}
	}
	if err := os.RemoveAll(s.cfg.Layout.RunVersionDir(runID, v)); err != nil {
		s.cfg.Logger.Warn("runs: remove a superseded learner version", "run", runID, "version", v, "err", err)
	}
}

// touch records that an operation that leaves the learner as it is ran.
func (s *Service) touch(runID string, seq int) {
	s.mu.Lock()
	if ss := s.sessions[runID]; ss != nil && ss.lastSeq == seq-1 {
		ss.lastSeq = seq
	}
	s.mu.Unlock()
}

// ensureVersion makes sure the folder of learner version v exists (version
// 0 is written when first needed).
func (s *Service) ensureVersion(ctx context.Context, run store.TrainingRun, sp *Spec, v int) error {
	if _, err := os.Stat(filepath.Join(s.cfg.Layout.RunVersionDir(run.ID, v), checkpoints.AdapterFile)); err == nil {
		return nil
	}
	if v != 0 {
		return fmt.Errorf("learner version %d of run %s has no folder", v, run.ID)
	}
	return s.initialVersion(ctx, run, sp)
}

// publish makes learner version v (the operation's parent) step v of the
// registered model the publication names, through the checkpoint
// lifecycle; the checkpoint row and the operation's success commit in one
// transaction.
func (s *Service) publish(ctx context.Context, run store.TrainingRun, sp *Spec, op store.TrainingOperation, req *SaveSamplerRequest, out *store.OperationOutcome) (any, error) {
	m, err := s.cfg.Store.ModelByID(ctx, op.TargetModel)
	if err != nil {
		return nil, fail("model_not_found", "model %q (%s) was deleted after the publication was admitted", req.Publication.ModelAlias, op.TargetModel)
	}
	v := op.ParentVersion
	if err := s.ensureVersion(ctx, run, sp, v); err != nil {
		return nil, err
	}
	if _, err := s.cfg.Store.CheckpointByStep(ctx, m.ID, v); err == nil {
		return nil, fail("checkpoint_step_exists", "model %s/%s/%s already has step %d: a run publishes learner version N as step N (start the run from that model's checkpoint with initial_state)", m.Entity, m.Project, m.Name, v)
	}
	work, err := s.cfg.Checkpoints.WorkDir(m.ID, op.ID)
	if err != nil {
		return nil, err
	}
	src := s.cfg.Layout.RunVersionDir(run.ID, v)
	for _, name := range []string{checkpoints.AdapterFile, engine.AdapterConfigFile, train.OptimizerFile} {
		if err := copyFile(filepath.Join(src, name), filepath.Join(work, name)); err != nil {
			s.cfg.Checkpoints.Discard(m.ID, op.ID)
			return nil, err
		}
	}
	res := map[string]any{"operation_id": op.ID, "kind": op.Kind, "metrics": map[string]float64{},
		"checkpoint": checkpointRef(run.ID, v), "learner_version": v, "target": req.Publication.Target,
		"model_alias": req.Publication.ModelAlias, "generation_id": fmt.Sprintf("%s/%s/%s:step%d", m.Entity, m.Project, m.Name, v)}
	body, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	fence := func() error {
		if _, err := s.cfg.Store.CheckpointByStep(ctx, m.ID, v); err == nil {
			return fail("checkpoint_step_exists", "model %s already has step %d", m.ID, v)
		}
		if busy, err := s.cfg.Store.ModelTraining(ctx, m.ID); err != nil || busy {
			return fail("model_in_training", "a training job of model %s/%s/%s is running: publish when it has ended", m.Entity, m.Project, m.Name)
		}
		return nil
	}
	ck := &store.Checkpoint{ModelID: m.ID, Step: v}
	err = fence()
	if err == nil {
		ck.Dir, err = s.cfg.Checkpoints.Publish(m.ID, op.ID, v)
		if err == nil {
			o := *out
			o.Status, o.Result, o.Checkpoint = store.OpSucceeded, body, ck
			if err = s.cfg.Store.FinishOperation(context.WithoutCancel(ctx), s.cfg.NodeID, o); err != nil {
				err = s.cfg.Checkpoints.Unpublish(m.ID, v, ck.Dir, err)
			}
		}
	}
	if err != nil {
		s.cfg.Checkpoints.Discard(m.ID, op.ID)
		var oe *opError
		if errors.As(err, &oe) {
			return nil, oe
		}
		if errors.Is(err, store.ErrConflict) {
			return nil, fail("checkpoint_step_exists", "model %s already has step %d", m.ID, v)
		}
		if errors.Is(err, store.ErrLeaseLost) {
			return nil, err
		}
		return nil, err
	}
	out.Checkpoint = ck
	return res, nil
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && filepath.Base(src) == train.OptimizerFile {
			return nil
		}
		return err
	}
	return os.WriteFile(dst, b, 0o600)
}

func checkpointRef(runID string, v int) map[string]any {
	return map[string]any{"checkpoint_id": checkpointID(runID, v), "learner_version": v}
}

// forwardResult is a forward's or forward_backward's result summary.
func forwardResult(op store.TrainingOperation, tb *tokenBatch, ls lossSpec, lp []float64, L float64, withLogprobs bool) map[string]any {
	maxLen := 0
	for _, n := range tb.lens {
		maxLen = max(maxLen, n)
	}
	n := len(tb.lens)
	res := map[string]any{"operation_id": op.ID, "kind": op.Kind, "metrics": map[string]float64{},
		"packing": map[string]int{"packed_sequence_length": maxLen, "packed_sequences": n, "target_packed_sequences": n,
			"logical_tokens": tb.tokens, "physical_tokens": len(tb.b.Tokens), "packed_capacity_tokens": n * maxLen,
			"padding_tokens": n*maxLen - len(tb.b.Tokens)},
	}
	if withLogprobs {
		var out []map[string]any
		row := 0
		for m, id := range tb.ids {
			T, K := tb.lens[m], tb.widths[m]
			buf := make([]byte, 4*T*K)
			for i := 0; i < T*K; i++ {
				binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(float32(lp[row+i])))
			}
			row += T * K
			out = append(out, map[string]any{"matrix_id": id, "shape": []int{T, K}, "data": base64.StdEncoding.EncodeToString(buf)})
		}
		res["token_logprobs"] = out
	}
	if op.Kind == KindForwardBackward {
		value := 0.0
		if tb.accepted > 0 {
			value = L / float64(tb.accepted)
		}
		res["training"] = map[string]any{"accepted_trainable_tokens": tb.accepted, "policy_token_counts": tb.policyCounts()}
		res["loss"] = map[string]any{"contract_id": ls.contractID(), "value": value, "reduction": "mean_active_token"}
		res["produced_gradient"] = tb.accepted > 0
	}
	return res
}
