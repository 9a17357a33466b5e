// Package train runs training on LoRA adapters. It holds no model code:
// the training forward that keeps its activations and the hand-written
// backward are the engine's (engine/net.go, engine/trainpass.go; serving
// runs the same layers), and model.go only binds them to a session. Here:
//
//   - Executor, the jobs.Trainer (this file): it runs an RL or SFT job's
//     config exactly as the job record holds it (jobs.Job.Config, resolved
//     once at submission by package rl), writes the new checkpoint into
//     the job's work folder, and reports through the event sink, its only
//     way back into the queue;
//   - RL: trajectories turned into weighted sequences with rl's advantages
//     (prepare.go), packed into gradient steps (pack.go), trained with
//     rl's loss;
//   - SFT: the data order, the batch size and the learning-rate schedule
//     (sft.go) over the file rl.ReadSFTFile reads;
//   - AdamW with global-norm clipping and its checkpointed state
//     (optim.go);
//   - Learner, the same session driven one call at a time by the
//     training-run API (learner.go, used by internal/runs);
//   - the record of the trajectories a checkpoint was trained on
//     (provenance.go).
package train

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"time"

	"flywheel/internal/engine"
	"flywheel/internal/jobs"
	"flywheel/internal/rl"
	"flywheel/internal/store"
)

// DefaultTokensPerStep is the default packing budget (Options.TokensPerStep).
const DefaultTokensPerStep = 8192

// Options configure the executor.
type Options struct {
	// TokensPerStep is the packing budget: the most tokens (prompt and
	// completion, summed over packed sequences) in one gradient step.
	TokensPerStep int
	// MaxSeqLen caps sequence length below the model's context (0: the
	// model's max_position_embeddings).
	MaxSeqLen int
	// ActivationBudget bounds saved activations per step in bytes (0:
	// engine.DefaultBudgets'); above it layers are recomputed in the backward.
	ActivationBudget int64
	// Logger receives one line per gradient step (nil: slog.Default()).
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.TokensPerStep <= 0 {
		o.TokensPerStep = DefaultTokensPerStep
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Executor runs RL and SFT jobs; it implements jobs.Trainer. Base models
// come from the shared registry, so weights are loaded once per process and
// shared with inference.
type Executor struct {
	reg  *engine.Registry
	opts Options
}

// New returns an executor over the shared model registry.
func New(reg *engine.Registry, opts Options) *Executor {
	return &Executor{reg: reg, opts: opts.withDefaults()}
}

var _ jobs.Trainer = (*Executor)(nil)

// session is one job's training state: the base model, the adapter being
// trained (aliased by the float32 training model) and the optimizer.
type session struct {
	base   *engine.Model
	ad     *engine.Adapter
	m      *model
	opt    *AdamW
	params []param
	maxLen int
}

func (e *Executor) open(job jobs.Job) (*session, error) {
	base, err := e.reg.Get(job.BaseModel)
	if err != nil {
		return nil, fmt.Errorf("load base model %s: %w", job.BaseModel, err)
	}
	ad, err := engine.LoadAdapter(job.FromDir, base.Config)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint %d: %w", job.FromStep, err)
	}
	opt, err := LoadAdamW(job.FromDir)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint %d: %w", job.FromStep, err)
	}
	m, err := newModel(base, ad, e.opts.ActivationBudget)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint %d: %w", job.FromStep, err)
	}
	s := &session{base: base, ad: ad, m: m, opt: opt, params: adapterParams(m)}
	s.maxLen = base.Config.MaxPositionEmbeddings
	if e.opts.MaxSeqLen > 0 && (s.maxLen <= 0 || e.opts.MaxSeqLen < s.maxLen) {
		s.maxLen = e.opts.MaxSeqLen
	}
	return s, nil
}

// save writes the adapter and optimizer state into dir (the job's OutDir).
func (s *session) save(dir, baseModel string) error {
	if err := s.ad.Save(dir, baseModel); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	if err := s.opt.Save(dir); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	return nil
}

// Train implements jobs.Trainer. A panic inside training becomes the job's
// error rather than taking the server down.
func (e *Executor) Train(ctx context.Context, job jobs.Job, emit func(jobs.Event) error) (res jobs.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			e.opts.Logger.Error("train: panic", "job", job.ID, "panic", p, "stack", string(debug.Stack()))
			res, err = jobs.Result{}, fmt.Errorf("internal error in the trainer: %v", p)
		}
	}()
	if job.OutDir == "" {
		return jobs.Result{}, errors.New("no output folder for the checkpoint")
	}
	if job.Config.Kind != job.Kind {
		return jobs.Result{}, fmt.Errorf("the job's config is for kind %q, the job is %q", job.Config.Kind, job.Kind)
	}
	switch job.Kind {
	case store.KindRL:
		return e.trainRL(ctx, job, emit)
	case store.KindSFT:
		return e.trainSFT(ctx, job, emit)
	}
	return jobs.Result{}, fmt.Errorf("unknown job kind %q", job.Kind)
}

// stepResult is what one gradient step reports.
type stepResult struct {
	Loss, GradNorm, Entropy float64
	NumClipped, NumRows     int
	NumTokens               int
	Seconds                 float64
	// Phases is the step's time in forward, loss + backward, and
	// clipping + optimizer (seconds).
	Phases [3]float64
}

// runStep does forward, loss, backward, clipping and the AdamW update of
// one packed batch. lossFn maps the rows' current logprobs to the loss and
// its gradient.
func (s *session) runStep(sb *stepBatch, lr float64, lossFn func(newLP []float64) (rl.Stats, []float64)) (stepResult, error) {
	t0 := time.Now()
	s.m.zeroGrads()
	p, err := s.m.forward(sb.b)
	if err != nil {
		return stepResult{}, err
	}
	t1 := time.Now()
	st, g := lossFn(p.LogProb)
	if !isFinite(st.Loss) {
		return stepResult{}, &DivergedError{What: fmt.Sprintf("the loss is %v", st.Loss)}
	}
	p.Backward(g)
	t2 := time.Now()
	gn := clipGradNorm(s.params, 1.0)
	if !isFinite(gn) {
		return stepResult{}, &DivergedError{What: fmt.Sprintf("the gradient norm is %v", gn)}
	}
	s.opt.update(s.params, lr)
	if name, ok := nonFiniteParam(s.params); !ok {
		return stepResult{}, &DivergedError{What: "weight " + name + " is not finite after the update"}
	}
	var ent float64
	for _, e := range p.Entropy {
		ent += e
	}
	if len(p.Entropy) > 0 {
		ent /= float64(len(p.Entropy))
	}
	return stepResult{Loss: st.Loss, GradNorm: gn, Entropy: ent, NumClipped: st.NumClipped,
		NumRows: len(sb.b.Rows), NumTokens: sb.ntoken, Seconds: time.Since(t0).Seconds(),
		Phases: [3]float64{t1.Sub(t0).Seconds(), t2.Sub(t1).Seconds(), time.Since(t2).Seconds()}}, nil
}

// DivergedError fails a job whose training diverged: a non-finite loss,
// gradient norm or updated weight. Nothing of the run is saved: the job
// fails and the model keeps its latest checkpoint.
type DivergedError struct {
	What string // "the loss is NaN", ...
	Step int    // the gradient step (1-based), set by the caller
}

func (e *DivergedError) Error() string {
	return fmt.Sprintf("training diverged at gradient step %d: %s; no checkpoint was saved (lower the learning rate)", e.Step, e.What)
}

// withStep sets the gradient step (1-based) of a *DivergedError.
func withStep(err error, step int) error {
	var de *DivergedError
	if errors.As(err, &de) {
		de.Step = step
	}
	return err
}

func isFinite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// nonFiniteParam reports the first parameter holding a NaN or an infinity
// (ok false), checked after each update: a step that overflows the weights
// would otherwise be saved and served.
func nonFiniteParam(ps []param) (string, bool) {
	for _, p := range ps {
		for _, w := range p.W {
			if w-w != 0 { // NaN or ±Inf
				return p.Name, false
			}
		}
	}
	return "", true
}

// startedEvent is a job's training_started event: data.num_sequences is
// the number of gradient steps the job will take (api.md, rl.md: the name
// is the wire's, and ART counts its gradient_step events against it; the
// job's metrics call the same count num_gradient_steps), with extra fields
// beside it.
func startedEvent(steps int, extra map[string]any) jobs.Event {
	data := map[string]any{"num_sequences": steps}
	for k, v := range extra {
		data[k] = v
	}
	return jobs.Event{Type: store.EventTrainingStarted, Data: data}
}

func stepEvent(i int, r stepResult, lr float64, opt *AdamW) jobs.Event {
	tps := 0.0
	if r.Seconds > 0 {
		tps = float64(r.NumTokens) / r.Seconds
	}
	frac := 0.0
	if r.NumRows > 0 {
		frac = float64(r.NumClipped) / float64(r.NumRows)
	}
	return jobs.Event{Type: store.EventGradientStep, Data: map[string]any{
		"gradient_step": i + 1, "optimizer_step": opt.Step,
		"loss": finite(r.Loss), "policy_loss": finite(r.Loss), "grad_norm": finite(r.GradNorm),
		"learning_rate": lr, "num_tokens": r.NumTokens, "num_trainable_tokens": r.NumRows,
		"tokens_per_second": tps, "entropy": finite(r.Entropy), "frac_clipped": frac,
	}}
}

// checkTokens rejects token ids outside the vocabulary (e.g. a
// "token_id:N" from another model).
func checkTokens(seqs []*sequence, vocab int) error {
	for _, s := range seqs {
		for _, id := range s.Tokens {
			if id < 0 || id >= vocab {
				return fmt.Errorf("token id %d is outside the model's vocabulary (size %d): were the completions sampled from this model?", id, vocab)
			}
		}
	}
	return nil
}

func finite(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return f
}

// rlLoss is the loss function of one RL gradient step over the batch
// (rl.Loss), for runStep.
func (sb *stepBatch) rlLoss(cfg rl.Config) func(newLP []float64) (rl.Stats, []float64) {
	return func(newLP []float64) (rl.Stats, []float64) {
		for k := range sb.toks {
			sb.toks[k].New = newLP[k]
		}
		return rl.Loss(cfg, sb.toks)
	}
}

func (e *Executor) trainRL(ctx context.Context, job jobs.Job, emit func(jobs.Event) error) (jobs.Result, error) {
	req, err := rl.ParseRequest(job.Request)
	if err != nil {
		return jobs.Result{}, err
	}
	cfg := job.Config.RL // as the job record shows it
	s, err := e.open(job)
	if err != nil {
		return jobs.Result{}, err
	}
	prep, err := prepareRL(&modelCodec{m: s.base, ctx: ctx}, req.TrajectoryGroups, cfg.ScaleRewards, s.maxLen)
	if err != nil {
		return jobs.Result{}, err
	}
	if err := checkTokens(prep.Seqs, s.base.Config.VocabSize); err != nil {
		return jobs.Result{}, err
	}
	bins := packSequences(prep.Seqs, e.opts.TokensPerStep)
	batches := make([]*stepBatch, len(bins))
	for i, bin := range bins {
		batches[i] = buildBatch(bin)
		rl.Normalize(batches[i].toks, cfg.AdvantageBalance)
	}
	if err := emit(startedEvent(len(batches), nil)); err != nil {
		return jobs.Result{}, err
	}
	if cfg.PrecalculateLogprobs {
		for _, sb := range batches {
			if err := ctx.Err(); err != nil {
				return jobs.Result{}, err
			}
			p, err := s.m.forward(sb.b)
			if err != nil {
				return jobs.Result{}, err
			}
			for i := range sb.toks {
				sb.toks[i].Old = p.LogProb[i]
			}
		}
	}
	var clipped, rows int
	var lossSum, gnSum, entSum float64
	for i, sb := range batches {
		if err := ctx.Err(); err != nil {
			return jobs.Result{}, err
		}
		r, err := s.runStep(sb, cfg.LearningRate, sb.rlLoss(cfg))
		if err != nil {
			return jobs.Result{}, withStep(err, i+1)
		}
		clipped += r.NumClipped
		rows += r.NumRows
		lossSum += r.Loss
		gnSum += r.GradNorm
		entSum += r.Entropy
		e.opts.Logger.Info("train: gradient step", "job", job.ID, "step", i+1, "of", len(batches),
			"loss", r.Loss, "grad_norm", r.GradNorm, "tokens", r.NumTokens, "seconds", r.Seconds)
		if err := emit(stepEvent(i, r, cfg.LearningRate, s.opt)); err != nil {
			return jobs.Result{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return jobs.Result{}, err
	}
	if err := s.save(job.OutDir, job.BaseModel); err != nil {
		return jobs.Result{}, err
	}
	if err := writeTrained(job, req); err != nil {
		return jobs.Result{}, err
	}
	met := map[string]any{
		"reward": prep.Rewards.Mean(), "reward_std_dev": prep.Rewards.StdDev(),
		"num_trajectories": prep.NumTrajectories, "num_skipped_trajectories": prep.NumSkipped,
		"num_trajectories_without_logprobs": prep.NumNoLogprobs, "num_truncated": prep.NumTruncated,
		"num_gradient_steps": len(batches), "num_trainable_tokens": rows, "frac_clipped": 0.0,
	}
	if rows > 0 {
		met["frac_clipped"] = float64(clipped) / float64(rows)
	}
	if n := len(batches); n > 0 {
		met["loss"] = finite(lossSum / float64(n))
		met["grad_norm"] = finite(gnSum / float64(n))
		met["entropy"] = finite(entSum / float64(n))
	}
	return jobs.Result{Metrics: met}, nil
}
