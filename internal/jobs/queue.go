// Package jobs runs training jobs: a durable queue kept in the store, and
// workers that execute each job through a Trainer.
//
// Jobs of one model run strictly one at a time in submission order; jobs of
// different models run in parallel up to a worker count. The queue state
// lives in the database, so a restart loses nothing: jobs found RUNNING at
// start-up (the process died mid-job) are re-queued and their partial
// output discarded. Each successful job turns the model's latest checkpoint
// N into checkpoint N+1, published by the checkpoints package.
//
// Several nodes may share one database (PostgreSQL): each claim is a lease
// that the running node renews; when a node dies its lease expires and
// another node claims the job again. Every write of a run is fenced by its
// lease, so a run that lost it changes nothing, and a job yields exactly
// one new step however many nodes ran it.
package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"flywheel/internal/atomicfile"
	"flywheel/internal/checkpoints"
	"flywheel/internal/rl"
	"flywheel/internal/store"
)

// Job is what a Trainer receives: the job, its model and where to read and
// write checkpoints.
type Job struct {
	ID, ModelID                string
	Kind                       store.JobKind
	Entity, Project, ModelName string
	BaseModel                  string // base model id = path relative to models dir
	BaseModelDir               string // absolute path of the base model folder
	FromStep                   int    // step of the latest checkpoint when the job starts
	FromDir                    string // that checkpoint's folder (adapter_config.json, adapter_model.safetensors, optimizer.safetensors when present)
	// OutDir is an empty work folder; the trainer writes the new checkpoint
	// (PEFT adapter + optimizer state) here; after success it is published
	// (renamed into place) as checkpoint FromStep+1.
	OutDir string
	// Config is the job's config as its record shows it (resolved when the
	// job was submitted, rl.RecordedJob): the trainer runs exactly this.
	Config   rl.JobConfig
	Request  json.RawMessage // the stored, validated request body as the client sent it (RL: the trajectories)
	DataFile string          // SFT: absolute path of the uploaded JSONL file ("" for RL)
}

// Event is a job event emitted by a trainer (store.EventTrainingStarted,
// store.EventGradientStep); the store appends the job's final event.
type Event struct {
	Type store.EventType
	Data map[string]any
}

// Result is what a successful training run reports.
type Result struct {
	// Metrics are job-level metrics, stored on the job record ("metrics")
	// and, where numeric, on the new checkpoint's metrics.
	Metrics map[string]any
}

// Trainer executes training jobs.
type Trainer interface {
	// Train runs job.Config: it emits store.EventTrainingStarted (its
	// data.num_sequences, the wire's name, is the number of gradient steps
	// the job will take) and one store.EventGradientStep per step through
	// emit, and returns when the checkpoint is written to job.OutDir. ctx
	// is cancelled on job cancel or shutdown; the trainer returns ctx.Err()
	// between steps. emit is the trainer's only way back into the queue.
	Train(ctx context.Context, job Job, emit func(Event) error) (Result, error)
}

// Store is the persistence the queue needs.
type Store interface {
	store.Jobs
	ModelByID(ctx context.Context, id string) (store.TrainedModel, error)
	LatestCheckpoint(ctx context.Context, modelID string) (store.Checkpoint, error)
	FileByID(ctx context.Context, id string) (store.File, error)
}

// Config configures a Queue.
type Config struct {
	DataDir   string // absolute; request bodies live under it (see store.Layout)
	ModelsDir string // absolute; base models live under it
	// Workers is how many jobs run in parallel (across models); 0 (or
	// negative) means none: an API-only node that queues jobs for other
	// nodes to run. Zero means the same as `flywheel serve --workers 0`
	// (and as a River client without queues); DefaultWorkers is the CLI's
	// default.
	Workers int
	// NodeID names this node in the leases it takes (default: host name,
	// process id and a random suffix).
	NodeID string
	// LeaseTimeout is how long a claim holds a job without renewal: the
	// running node renews it every third of it, and a node that stops (it
	// died) loses the job to another node after it. Default
	// DefaultLeaseTimeout.
	LeaseTimeout time.Duration
	// Shared says that other nodes use the same database and data dir:
	// start-up sweeps then leave recent files alone (another node may be
	// writing them).
	Shared bool
	// Checkpoints prepares work folders, publishes new checkpoints and
	// sweeps leftovers at Start (required).
	Checkpoints *checkpoints.Manager
	// Trainer runs the jobs. When nil every job fails with a clear error
	// saying that training is unavailable in this build.
	Trainer Trainer
	Logger  *slog.Logger
	// PollInterval is how often the dispatcher looks for work without being
	// notified (a safety net, and how a job whose node died is found); default
	// 2s.
	PollInterval time.Duration
}

// DefaultWorkers is the number of jobs a node runs in parallel unless told
// otherwise (`flywheel serve --workers`).
const DefaultWorkers = 2

// DefaultLeaseTimeout is the default Config.LeaseTimeout.
const DefaultLeaseTimeout = 30 * time.Second

// Waker is implemented by stores shared by several nodes (store.Postgres):
// the channel receives when a job may have become runnable anywhere.
type Waker interface {
	JobWakeups() <-chan struct{}
}

var (
	errCancelled = errors.New("job cancelled")
	errShutdown  = errors.New("server shutting down")
)

// ErrNotCancellable is returned by Cancel for a job that already ended.
var ErrNotCancellable = errors.New("job already ended")

// Queue is the job queue and its workers.
type Queue struct {
	st     Store
	cfg    Config
	layout store.Layout
	log    *slog.Logger

	wake chan struct{}
	stop chan struct{}
	done chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	running map[string]*run // by job id
	busy    map[string]bool // model ids with a worker in flight
	closing bool
	started bool
}

type run struct {
	modelID string
	cancel  context.CancelCauseFunc
	mu      sync.Mutex // serialises event writes with cancellation
	ended   bool       // the job record was ended by Cancel
	// leased is when the call that last extended the lease (the claim, a
	// renewal) began: the lease holds for at least LeaseTimeout from then,
	// whatever the database's clock. renew writes it; complete reads it
	// once renewals stopped.
	leased time.Time
}

// New returns a queue; call Start to run it.
func New(st Store, cfg Config) *Queue {
	cfg.Workers = max(cfg.Workers, 0)
	if cfg.LeaseTimeout <= 0 {
		cfg.LeaseTimeout = DefaultLeaseTimeout
	}
	if cfg.NodeID == "" {
		cfg.NodeID = DefaultNodeID()
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Queue{
		st: st, cfg: cfg, layout: store.Layout{DataDir: cfg.DataDir}, log: cfg.Logger,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		running: map[string]*run{}, busy: map[string]bool{},
	}
}

// Workers returns the configured worker count (0 on an API-only node).
func (q *Queue) Workers() int { return q.cfg.Workers }

// NodeID is the name of this node in its leases.
func (q *Queue) NodeID() string { return q.cfg.NodeID }

// DefaultNodeID names a node by its host, process id and a random suffix:
// unique among live processes, so a restarted node never takes its
// predecessor's leases for its own.
func DefaultNodeID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "node"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Start re-queues jobs left RUNNING by a previous process, sweeps what
// crashed runs left (work folders and unrecorded checkpoint folders, request
// bodies no job needs) and starts the dispatcher. Call it before the HTTP
// server serves: the sweep takes every work folder for a leftover.
func (q *Queue) Start(ctx context.Context) error {
	ids, err := q.st.RequeueRunning(ctx)
	if err != nil {
		return fmt.Errorf("re-queue interrupted jobs: %w", err)
	}
	for _, id := range ids {
		q.log.Info("re-queued job interrupted by a restart or a node's death", "job_id", id)
	}
	if err := q.cfg.Checkpoints.Sweep(ctx); err != nil {
		q.log.Warn("sweep of checkpoint leftovers", "err", err) // garbage only; the next start retries
	}
	q.sweepRequests(ctx)
	q.mu.Lock()
	q.started = true
	q.mu.Unlock()
	go q.dispatchLoop()
	return nil
}

// sweepRequests removes stored request bodies that no queued job needs:
// bodies of jobs that ended, however recent (a node killed between
// recording a job's end and removing its body, or one that could not
// learn the end: see dropRequestOnceEnded), and, on a data dir of one
// node or once older than store.SharedSweepAge, partial writes cut short
// by a crash and bodies of jobs deleted with their model (on a shared
// data dir a recent body without a job may be another node's submission
// in progress). It runs before the HTTP server starts.
func (q *Queue) sweepRequests(ctx context.Context) {
	dir := q.layout.RequestsDir()
	_, err := store.Sweep(dir, false, func(name string) bool {
		if id, ok := strings.CutSuffix(name, ".json"); ok {
			j, err := q.st.JobByID(ctx, id)
			if err == nil {
				return j.Status.Ended()
			}
			if !errors.Is(err, store.ErrNotFound) {
				return false
			}
		}
		return !q.cfg.Shared || store.OldFile(filepath.Join(dir, name))
	})
	if err != nil {
		q.log.Warn("jobs: sweeping request bodies", "err", err)
	}
}

// Notify wakes the dispatcher (after a job was submitted).
func (q *Queue) Notify() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Pending is a job whose request body is being written to disk while the
// HTTP layer still reads and validates it, so that large payloads are not
// read, checked and written one after the other. Call Submit or Discard.
type Pending struct {
	q     *Queue
	id    string
	f     *atomicfile.File
	ch    chan []byte
	done  chan error
	n     int64
	ended bool
}

// Prepare starts a pending job: its request file is open and written in the
// background as Write hands it slices of the body.
func (q *Queue) Prepare() (*Pending, error) {
	id := store.NewID()
	f, err := atomicfile.Create(q.layout.RequestPath(id), store.FileMode)
	if err != nil {
		return nil, fmt.Errorf("store request: %w", err)
	}
	p := &Pending{q: q, id: id, f: f, ch: make(chan []byte, 256), done: make(chan error, 1)}
	go func() {
		var werr error
		for b := range p.ch {
			if werr == nil {
				_, werr = f.Write(b)
			}
		}
		p.done <- werr
	}()
	return p, nil
}

// ID is the id the job will have once submitted.
func (p *Pending) ID() string { return p.id }

// Write queues b (which must not change afterwards) for the request file.
func (p *Pending) Write(b []byte) {
	if len(b) > 0 {
		p.n += int64(len(b))
		p.ch <- b
	}
}

func (p *Pending) finish() error {
	if p.ended {
		return errors.New("pending job already submitted or discarded")
	}
	p.ended = true
	close(p.ch)
	return <-p.done
}

// Discard drops the pending job and its file.
func (p *Pending) Discard() {
	if !p.ended {
		p.finish()
		p.f.Abort()
	}
}

// Submit waits for the request file, publishes it, and queues the job. j
// needs ModelID, Kind, and for SFT FileID; ExperimentalConfig and Config
// are stored as given. The file is not flushed to disk: like
// the job's row (the database runs with synchronous=NORMAL) it survives a
// crash of the process, not necessarily a power loss.
func (p *Pending) Submit(ctx context.Context, j store.Job) (store.Job, error) {
	if err := p.finish(); err != nil {
		p.f.Abort()
		return j, fmt.Errorf("store request: %w", err)
	}
	j.ID = p.id
	j.RequestPath = p.q.layout.RequestPath(p.id)
	j.RequestBytes = p.n
	if err := p.f.CommitUnsynced(); err != nil {
		return j, fmt.Errorf("store request: %w", err)
	}
	j, err := p.q.st.CreateJob(ctx, j)
	if err != nil {
		os.Remove(j.RequestPath)
		return j, err
	}
	p.q.Notify()
	return j, nil
}

// Cancel cancels a QUEUED or RUNNING job: it becomes CANCELLED at once (with
// a training_failed event saying so) and a running trainer is stopped; no
// checkpoint is added. ErrNotCancellable when the job already ended.
func (q *Queue) Cancel(ctx context.Context, id string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	r := q.running[id]
	if r != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
	}
	err := q.st.FinishJob(ctx, id, store.StatusCancelled, "the job was cancelled")
	if errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("%w: %w", ErrNotCancellable, err)
	}
	if err != nil {
		return err
	}
	if r != nil {
		r.ended = true
		r.cancel(errCancelled)
	} else if j, err := q.st.JobByID(ctx, id); err == nil {
		os.Remove(j.RequestPath) // a queued job's request is no longer needed
	}
	return nil
}

// Shutdown stops dispatching, stops running trainers and re-queues their
// jobs, and waits for the workers until ctx ends. Jobs it could not wait for
// are re-queued at the next start.
func (q *Queue) Shutdown(ctx context.Context) error {
	q.mu.Lock()
	if q.closing {
		q.mu.Unlock()
		return nil
	}
	q.closing = true
	started := q.started
	for _, r := range q.running {
		r.cancel(errShutdown)
	}
	q.mu.Unlock()
	close(q.stop)
	if started {
		<-q.done
	}
	waited := make(chan struct{})
	go func() { q.wg.Wait(); close(waited) }()
	select {
	case <-waited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for running jobs: %w", ctx.Err())
	}
}

func (q *Queue) dispatchLoop() {
	defer close(q.done)
	if q.cfg.Workers == 0 {
		return // API-only: other nodes run the jobs
	}
	t := time.NewTicker(q.cfg.PollInterval)
	defer t.Stop()
	var remote <-chan struct{} // nil (never ready) on a store of one node
	if w, ok := q.st.(Waker); ok {
		remote = w.JobWakeups()
	}
	for {
		q.dispatch()
		select {
		case <-q.stop:
			return
		case <-q.wake:
		case <-remote:
		case <-t.C:
		}
	}
}

// dispatch starts runnable jobs while workers are free.
func (q *Queue) dispatch() {
	for {
		q.mu.Lock()
		if q.closing || len(q.running) >= q.cfg.Workers {
			q.mu.Unlock()
			return
		}
		skip := make([]string, 0, len(q.busy))
		for m := range q.busy {
			skip = append(skip, m)
		}
		claimed := time.Now()
		j, ok, err := q.st.ClaimNext(context.Background(), q.cfg.NodeID, q.cfg.LeaseTimeout, skip)
		if err != nil || !ok {
			q.mu.Unlock()
			if err != nil {
				q.log.Error("claim job", "err", err)
			}
			return
		}
		ctx, cancel := context.WithCancelCause(context.Background())
		r := &run{modelID: j.ModelID, cancel: cancel, leased: claimed}
		q.running[j.ID] = r
		q.busy[j.ModelID] = true
		q.wg.Add(1)
		q.mu.Unlock()
		go q.execute(ctx, j, r)
	}
}

func (q *Queue) execute(ctx context.Context, j store.Job, r *run) {
	defer q.wg.Done()
	defer func() {
		r.cancel(nil)
		q.mu.Lock()
		delete(q.running, j.ID)
		delete(q.busy, j.ModelID)
		q.mu.Unlock()
		q.Notify()
	}()
	log := q.log.With("job_id", j.ID, "model_id", j.ModelID, "kind", j.Kind, "attempt", j.Attempt)
	log.Info("job started")
	start := time.Now()
	lease := j.Lease()
	work := workName(j)
	defer q.cfg.Checkpoints.Discard(j.ModelID, work) // a no-op after a successful publish
	rctx, stopRenewing := context.WithCancel(ctx)
	renewed := make(chan struct{})
	go func() { defer close(renewed); q.renew(rctx, lease, r) }()
	defer func() { stopRenewing(); <-renewed }()

	res, err := q.trainRecovered(ctx, j, r)
	cause := context.Cause(ctx)
	r.mu.Lock()
	if r.ended { // cancelled here, whatever the renewal saw first
		cause = errCancelled
	}
	r.mu.Unlock()
	bg := context.Background()
	// The request body goes once the job's end is recorded; it stays for
	// the node that runs the job next when this run's end could not be
	// recorded (the lease lost, a shutdown, the database unreachable: the
	// job is still RUNNING and is reclaimed when the lease expires).
	keepRequest := errors.Is(cause, errShutdown) || errors.Is(cause, store.ErrLeaseLost)
	defer func() {
		if keepRequest && !errors.Is(cause, errShutdown) {
			switch _, ended, answered := q.ended(j.ID); {
			case ended:
				keepRequest = false // recorded after all: the commit went through, its answer was lost
			case !answered:
				q.dropRequestOnceEnded(j.ID, j.RequestPath)
			}
		}
		if !keepRequest {
			os.Remove(j.RequestPath)
		}
	}()
	switch {
	case errors.Is(cause, errCancelled):
		log.Info("job cancelled", "duration", time.Since(start))
	case errors.Is(cause, store.ErrLeaseLost):
		// Cancelled on another node, or this node stalled past the lease
		// timeout and another node runs the job now: nothing of this run
		// may be recorded.
		log.Warn("job's lease lost; output discarded", "duration", time.Since(start))
	case errors.Is(cause, errShutdown):
		if rerr := q.st.Requeue(bg, lease); rerr != nil {
			log.Error("re-queue on shutdown", "err", rerr)
		} else {
			log.Info("job re-queued on shutdown")
		}
	case err != nil:
		log.Warn("job failed", "err", err, "duration", time.Since(start))
		keepRequest = !q.fail(bg, lease, r, err.Error())
	default:
		// The publish holds the job's row from its lease check to its
		// commit, so no other node can take the job meanwhile: renewals,
		// which would wait on that row, stop here.
		stopRenewing()
		<-renewed
		err := q.complete(bg, j, res, r)
		switch {
		case errors.Is(err, store.ErrLeaseLost):
			log.Warn("job's lease lost before its checkpoint was published; output discarded", "err", err)
			keepRequest = true
		case err != nil:
			log.Error("job failed while saving its checkpoint", "err", err)
			keepRequest = !q.fail(bg, lease, r, "saving the new checkpoint failed")
		default:
			log.Info("job completed", "to_step", *j.FromStep+1, "duration", time.Since(start))
		}
	}
}

// ended reports whether job id has ended (COMPLETED, FAILED, CANCELLED, or
// deleted with its model, which reads as a zero Job) and how its record
// shows it. A run that could not tell whether its end was recorded asks: a
// commit can go through while its answer is lost (the database restarting
// as it answers; the chaos soak found a job FAILED with its request body
// left so). It retries for up to a lease timeout; a store that stays
// unreachable that long answers neither ended nor answered.
func (q *Queue) ended(id string) (j store.Job, ended, answered bool) {
	ctx, cancel := context.WithTimeout(context.Background(), q.cfg.LeaseTimeout)
	defer cancel()
	for {
		j, err := q.st.JobByID(ctx, id)
		switch {
		case err == nil:
			return j, j.Status.Ended(), true
		case errors.Is(err, store.ErrNotFound):
			return store.Job{}, true, true
		}
		select {
		case <-ctx.Done():
			return store.Job{}, false, false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// dropRequestOnceEnded keeps asking, in the background, whether job id has
// ended after its run could not tell (ended: the store stayed unreachable
// for a lease timeout), and removes its request body at path once the
// store answers that it has. The run's end may have been recorded with its
// answer lost (the chaos soak found a job COMPLETED with its body left so,
// a PostgreSQL restart outlasting the 3 s lease); a job that has not ended
// keeps its body for the run that ends it. It stops at Shutdown, leaving
// the body to the start-up sweep, which removes an ended job's body
// whatever its age.
func (q *Queue) dropRequestOnceEnded(id, path string) {
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		for wait := 100 * time.Millisecond; ; wait = min(2*wait, q.cfg.LeaseTimeout) {
			select {
			case <-q.stop:
				return
			case <-time.After(wait):
			}
			ctx, cancel := context.WithTimeout(context.Background(), q.cfg.LeaseTimeout)
			j, err := q.st.JobByID(ctx, id)
			cancel()
			switch {
			case errors.Is(err, store.ErrNotFound) || err == nil && j.Status.Ended():
				os.Remove(path)
				return
			case err == nil:
				return
			}
		}
	}()
}

// workName names a run's work folder: one per claim, so a run that lost
// its lease and the run that took the job over never share one.
func workName(j store.Job) string { return fmt.Sprintf("%s.%d", j.ID, j.Attempt) }

// renew renews the run's lease every third of the lease timeout until ctx
// ends. When the lease is lost (the job was cancelled, possibly on another
// node, or claimed again after this node stalled), or no renewal succeeded
// for a whole timeout, the run is cancelled with store.ErrLeaseLost: past its
// expiry another node may run the job.
func (q *Queue) renew(ctx context.Context, l store.Lease, r *run) {
	t := time.NewTicker(q.cfg.LeaseTimeout / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, q.cfg.LeaseTimeout/3)
		err := q.st.RenewLease(rctx, l, q.cfg.LeaseTimeout)
		cancel()
		switch {
		case err == nil:
			r.leased = start
		case errors.Is(err, store.ErrLeaseLost) || time.Since(r.leased) >= q.cfg.LeaseTimeout:
			if ctx.Err() == nil {
				q.log.Warn("lease lost; stopping the run", "job_id", l.JobID, "attempt", l.Attempt, "err", err)
			}
			r.cancel(store.ErrLeaseLost)
			return
		default:
			q.log.Warn("renew lease", "job_id", l.JobID, "err", err)
		}
	}
}

// fail records the run's job FAILED and reports whether the job's end is
// recorded (by this or by a cancel); false leaves it to the next claim.
func (q *Queue) fail(ctx context.Context, l store.Lease, r *run, msg string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return true
	}
	err := q.st.FailJob(ctx, l, q.clientMessage(msg))
	switch {
	case errors.Is(err, store.ErrLeaseLost):
		q.log.Warn("job's lease lost; its failure is not recorded", "job_id", l.JobID, "err", err)
		return false
	case err != nil:
		q.log.Error("record job failure; the job runs again once its lease expires", "job_id", l.JobID, "err", err)
		return false
	}
	return true
}

// absPath matches an absolute path that starts a word of a message.
var absPath = regexp.MustCompile(`(^|[\s"'(=])/[^\s"'(),;]+`)

// clientMessage is a failure message as clients see it (the job's
// error_message and its training_failed event): the server's folders are
// replaced by <models-dir> and <data-dir>, and any other absolute path by
// <path>. The log keeps the message as it was.
func (q *Queue) clientMessage(msg string) string {
	for _, d := range []struct{ dir, name string }{{q.cfg.ModelsDir, "<models-dir>"}, {q.cfg.DataDir, "<data-dir>"}} {
		if d.dir != "" && d.dir != "/" {
			re := regexp.MustCompile(regexp.QuoteMeta(d.dir) + `($|[/\s"'(),;:])`)
			msg = re.ReplaceAllString(msg, d.name+"$1")
		}
	}
	return absPath.ReplaceAllString(msg, "$1<path>")
}

// trainRecovered is train with a panic turned into the job's error: a
// trainer's bug fails its job and leaves the process (and the jobs
// re-queued after a crash) alone.
func (q *Queue) trainRecovered(ctx context.Context, j store.Job, r *run) (res Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			q.log.Error("trainer panic", "job_id", j.ID, "panic", p, "stack", string(debug.Stack()))
			res, err = Result{}, fmt.Errorf("internal error in the trainer: %v", p)
		}
	}()
	return q.train(ctx, j, r)
}

// train prepares the trainer's view of the job and runs it.
func (q *Queue) train(ctx context.Context, j store.Job, r *run) (Result, error) {
	if j.FromStep == nil {
		return Result{}, errors.New("the model has no checkpoint to train from")
	}
	m, err := q.st.ModelByID(ctx, j.ModelID)
	if err != nil {
		return Result{}, fmt.Errorf("model %s not found", j.ModelID)
	}
	from, err := q.st.LatestCheckpoint(ctx, j.ModelID)
	if err != nil || from.Step != *j.FromStep {
		return Result{}, fmt.Errorf("checkpoint step %d of the model is missing", *j.FromStep)
	}
	if q.cfg.Trainer == nil {
		return Result{}, fmt.Errorf("training is not available in this server build: no trainer is configured for base model %q", m.BaseModel)
	}
	req, err := os.ReadFile(j.RequestPath)
	if err != nil {
		return Result{}, errors.New("the stored request of this job is missing; submit the job again")
	}
	cfg, err := q.jobConfig(ctx, j, m.BaseModel, req)
	if err != nil {
		return Result{}, err
	}
	tj := Job{
		ID: j.ID, Kind: j.Kind, ModelID: j.ModelID,
		Entity: m.Entity, Project: m.Project, ModelName: m.Name,
		BaseModel: m.BaseModel, BaseModelDir: filepath.Join(q.cfg.ModelsDir, filepath.FromSlash(m.BaseModel)),
		FromStep: from.Step, FromDir: from.Dir, Config: cfg, Request: req,
	}
	if j.Kind == store.KindSFT {
		f, err := q.st.FileByID(ctx, j.FileID)
		if err != nil {
			return Result{}, fmt.Errorf("training data file %s no longer exists", j.FileID)
		}
		tj.DataFile = f.Path
	}
	if tj.OutDir, err = q.cfg.Checkpoints.WorkDir(j.ModelID, workName(j)); err != nil {
		return Result{}, err
	}
	emit := func(e Event) error {
		if e.Type == "" {
			return errors.New("event without a type")
		}
		return q.appendEvent(ctx, j, r, e)
	}
	return q.cfg.Trainer.Train(ctx, tj, emit)
}

// appendEvent records the training run's event e under the run's lease. A
// transient failure of the store (the database restarting) is retried as
// complete's are, with a bounded backoff for at most a lease's time, under
// one event id (store.AppendEvent), so that an append whose commit
// went through while its answer was lost is not written twice; the run's
// lock is held through each attempt, not between them.
func (q *Queue) appendEvent(ctx context.Context, j store.Job, r *run, e Event) error {
	id, wait := store.NewID(), commitRetryFirst
	giveUp := time.Now().Add(q.cfg.LeaseTimeout)
	for {
		err := func() error {
			r.mu.Lock()
			defer r.mu.Unlock()
			if err := ctx.Err(); err != nil {
				return err
			}
			_, err := q.st.AppendEvent(context.Background(), j.Lease(), id, e.Type, e.Data)
			return err
		}()
		if errors.Is(err, store.ErrLeaseLost) {
			r.cancel(store.ErrLeaseLost)
		}
		if err == nil || !store.Transient(err) || time.Now().Add(wait).After(giveUp) {
			return err
		}
		q.log.Warn("recording a training event failed; retrying", "job_id", j.ID, "event", e.Type, "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, commitRetryMost)
	}
}

// jobConfig is the config the job's record shows, which its trainer runs
// (rl.RecordedJob). A record an older version wrote holds no resolved
// config (rl.ErrUnresolved: it left an SFT job's default learning rate
// null and resolved the config again when the job ran): its config is
// resolved here from the stored request by the rule submission uses
// (rl.ResolveJob), recorded on the job under the run's lease, then run,
// so that its record too shows what ran.
func (q *Queue) jobConfig(ctx context.Context, j store.Job, baseModel string, req []byte) (rl.JobConfig, error) {
	cfg, err := rl.RecordedJob(j.Kind, j.ExperimentalConfig, j.Config)
	if !errors.Is(err, rl.ErrUnresolved) {
		return cfg, err
	}
	exp, sftCfg, perr := rl.SentConfig(j.Kind, req)
	if perr != nil {
		return cfg, fmt.Errorf("%w; reading the stored request: %w", err, perr)
	}
	if cfg, err = rl.ResolveJob(j.Kind, baseModel, j.ID, exp, sftCfg); err != nil {
		return cfg, fmt.Errorf("resolving the config of a job submitted by an older version: %w", err)
	}
	if err := q.st.RecordJobConfig(ctx, j.Lease(), cfg.ExperimentalConfig, cfg.Config); err != nil {
		return cfg, err
	}
	q.log.Info("job submitted by an older version: its config was resolved at claim and recorded", "job_id", j.ID)
	return cfg, nil
}

// Backoff between attempts at recording a job's new checkpoint that failed
// transiently: doubling from the first to the most, within the lease.
const (
	commitRetryFirst = 100 * time.Millisecond
	commitRetryMost  = 2 * time.Second
)

// complete publishes the work folder as the model's next checkpoint and, in
// one transaction, records it and marks the job COMPLETED. The run's lock is
// held through each attempt (not between them: a cancel waits on it while
// holding the queue's), so a cancel on this node either ends the job before
// (and the output is discarded) or finds it completed; the fence is the run's
// lease, whose row stays locked from the check (LockLease, before the
// folder is renamed) to the commit, so no other node claims the job and
// publishes its step meanwhile. The queue calls checkpoints and the store in
// turn; neither calls back.
//
// A transient failure of the store (store.Transient: the database
// restarting, a deadlock) is retried with a bounded backoff while the lease
// lasts, so that a database restart does not throw the training away. The
// step's folder stays published between attempts: the next attempt's
// LockLease says whether the failed one committed after all (its answer
// lost), for then the job is no longer RUNNING under this lease; the job
// is read back (ended) and, COMPLETED under this run's lease, the publish
// stands: a step is never recorded twice. At the lease's end the run gives up as
// one whose lease was lost. ErrLeaseLost when the lease was lost: the output
// is discarded, and a folder left published without its row is stale (the
// next publish of the step replaces it, the start-up sweep removes it).
// Other errors fail at once.
func (q *Queue) complete(ctx context.Context, j store.Job, res Result, r *run) error {
	ck := store.Checkpoint{ModelID: j.ModelID, Step: *j.FromStep + 1, Metrics: map[string]float64{}}
	for k, v := range res.Metrics {
		if f, ok := number(v); ok {
			ck.Metrics[k] = f
		}
	}
	jobMetrics := map[string]any{}
	for k, v := range res.Metrics {
		if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
			continue // not representable in JSON
		}
		jobMetrics[k] = v
	}
	leaseEnd := r.leased.Add(q.cfg.LeaseTimeout) // no renewal since renewals stopped
	wait := commitRetryFirst
	for try := 1; ; try++ {
		r.mu.Lock()
		if r.ended && ck.Dir == "" {
			r.mu.Unlock()
			return nil // cancelled at the last moment: the output is discarded
		}
		// Once published, a cancel is the lease lost: the attempt finds it.
		err := q.commit(ctx, j, &ck, jobMetrics)
		r.mu.Unlock()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, store.ErrLeaseLost):
			return q.lostAfterPublish(j, ck, err)
		case !store.Transient(err):
			return err
		case time.Until(leaseEnd) < wait:
			return q.lostAfterPublish(j, ck, fmt.Errorf("the store failed until the lease's end (%w): %w", store.ErrLeaseLost, err))
		}
		q.log.Warn("saving the new checkpoint failed; retrying", "job_id", j.ID, "try", try, "retry_in", wait, "err", err)
		time.Sleep(wait)
		wait = min(2*wait, commitRetryMost)
	}
}

// commit is one attempt of complete: it takes the fence (LockLease),
// publishes the work folder unless an earlier attempt left it published
// (ck.Dir), and records the step. A transient failure of the record leaves
// the folder published for the next attempt, whose fence tells whether this
// one committed; any other takes it back (Unpublish, under the fence).
func (q *Queue) commit(ctx context.Context, j store.Job, ck *store.Checkpoint, jobMetrics map[string]any) error {
	lt, err := q.st.LockLease(ctx, j.Lease())
	if err != nil {
		return fmt.Errorf("publish step %d: %w", ck.Step, err)
	}
	defer lt.Rollback() // a no-op once Complete committed
	if ck.Dir == "" {
		if ck.Dir, err = q.cfg.Checkpoints.Publish(j.ModelID, workName(j), ck.Step); err != nil {
			return err
		}
	}
	if _, err := lt.Complete(ctx, *ck, jobMetrics); err != nil {
		if store.Transient(err) {
			return err
		}
		dir := ck.Dir
		ck.Dir = ""
		return q.cfg.Checkpoints.Unpublish(j.ModelID, ck.Step, dir, err)
	}
	return nil
}

// lostAfterPublish is complete's answer once the lease is lost or ran out
// (err). When an attempt left the step's folder published, its commit may
// have gone through with its answer lost: the job is read back, and
// COMPLETED under this run's attempt the publish stands (nil).
func (q *Queue) lostAfterPublish(j store.Job, ck store.Checkpoint, err error) error {
	if ck.Dir == "" {
		return err
	}
	if e, ended, _ := q.ended(j.ID); ended && e.Status == store.StatusCompleted && e.Attempt == j.Attempt {
		q.log.Warn("recording the new checkpoint answered an error, but the job is COMPLETED: published", "job_id", j.ID, "step", ck.Step)
		return nil
	}
	q.log.Warn("the new checkpoint's folder is left without its row: stale, replaced by the next publish of the step or swept at start-up",
		"job_id", j.ID, "step", ck.Step, "dir", ck.Dir)
	return err
}

// number converts a numeric metric value to float64; NaN and infinities are
// dropped since JSON cannot carry them.
func number(v any) (float64, bool) {
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case float32:
		f = float64(x)
	case int:
		f = float64(x)
	case int64:
		f = float64(x)
	case int32:
		f = float64(x)
	case json.Number:
		var err error
		if f, err = x.Float64(); err != nil {
			return 0, false
		}
	default:
		return 0, false
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}
