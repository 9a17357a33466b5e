package jobs_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"flywheel/internal/checkpoints"
	"flywheel/internal/jobs"
	"flywheel/internal/pgtest"
	"flywheel/internal/store"
)

// writer trains at once: it emits training_started and writes its string
// as the new checkpoint's adapter.
type writer string

func (w writer) Train(ctx context.Context, j jobs.Job, emit func(jobs.Event) error) (jobs.Result, error) {
	if err := emit(jobs.Event{Type: store.EventTrainingStarted, Data: map[string]any{"num_sequences": 1}}); err != nil {
		return jobs.Result{}, err
	}
	return jobs.Result{Metrics: map[string]any{"loss": 1.0}}, os.WriteFile(filepath.Join(j.OutDir, checkpoints.AdapterFile), []byte(w), 0o644)
}

// completion is one call of LeaseTx.Complete as a commitStore sees it.
type completion struct {
	n  int           // from 1
	tx store.LeaseTx // the store's own, still open
	l  store.Lease
}

// completeFunc stands in for the store's LeaseTx.Complete.
type completeFunc func(ctx context.Context, c completion, ck store.Checkpoint, metrics map[string]any) (store.Checkpoint, error)

// commitStore is the store of a node whose database misbehaves as a job's
// new checkpoint is recorded: each completion goes through complete.
type commitStore struct {
	store.Database
	complete completeFunc

	mu    sync.Mutex
	calls int
}

func (s *commitStore) LockLease(ctx context.Context, l store.Lease) (store.LeaseTx, error) {
	tx, err := s.Database.LockLease(ctx, l)
	if err != nil {
		return nil, err
	}
	return commitTx{LeaseTx: tx, s: s, l: l}, nil
}

// completions is how many completions were attempted.
func (s *commitStore) completions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

type commitTx struct {
	store.LeaseTx
	s *commitStore
	l store.Lease
}

func (t commitTx) Complete(ctx context.Context, ck store.Checkpoint, metrics map[string]any) (store.Checkpoint, error) {
	t.s.mu.Lock()
	t.s.calls++
	n := t.s.calls
	t.s.mu.Unlock()
	return t.s.complete(ctx, completion{n: n, tx: t.LeaseTx, l: t.l}, ck, metrics)
}

// errConnLost is how the store answers when the database restarts under a
// statement: the connection is closed mid-reply.
var errConnLost = fmt.Errorf("complete job: commit: %w", io.ErrUnexpectedEOF)

// runOne runs one job of a new model on a node over st, with trainer tr,
// until it ends (its run included), and returns the model and the job.
func (f *fixture) runOne(t *testing.T, st jobs.Store, tr jobs.Trainer, logTo io.Writer) (string, store.Job) {
	t.Helper()
	ctx := context.Background()
	m := f.model(t, "m")
	q := f.node(st, tr, "node-a", logTo, jobs.DefaultLeaseTimeout)
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	id := submit(t, q, m)
	f.waitEnded(t, id)
	if err := q.Shutdown(ctx); err != nil { // waits for the run to end
		t.Fatal(err)
	}
	j, err := f.st.JobByID(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return m, j
}

// waitEnded waits until job id has ended.
func (f *fixture) waitEnded(t *testing.T, id string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if j, err := f.st.JobByID(context.Background(), id); err == nil && j.Status.Ended() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s did not end", id)
		}
	}
}

// published checks the model's recorded steps, the adapter each step's
// folder holds, and that its folder holds nothing else (no work folder).
func (f *fixture) published(t *testing.T, modelID string, adapters ...string) {
	t.Helper()
	cks, _, err := f.st.ListCheckpoints(context.Background(), modelID, store.Page{Limit: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(cks) != len(adapters)+1 {
		t.Fatalf("%d checkpoints, want %d", len(cks), len(adapters)+1)
	}
	want := []string{"step-0"}
	for i, a := range adapters {
		ck := cks[i+1]
		if ck.Step != i+1 || ck.Dir != f.layout.CheckpointDir(modelID, i+1) {
			t.Errorf("checkpoint %+v, want step %d", ck, i+1)
		}
		if b, err := os.ReadFile(filepath.Join(ck.Dir, checkpoints.AdapterFile)); err != nil || string(b) != a {
			t.Errorf("step %d holds %q (%v), want %q", ck.Step, b, err, a)
		}
		want = append(want, fmt.Sprintf("step-%d", i+1))
	}
	entries, _ := os.ReadDir(f.layout.ModelDir(modelID))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, ","); got != strings.Join(want, ",") {
		t.Errorf("model folder holds %s, want %s", got, strings.Join(want, ","))
	}
}

// events checks the job's event types.
func (f *fixture) events(t *testing.T, id string, want ...store.EventType) {
	t.Helper()
	evs, _, err := f.st.ListEvents(context.Background(), id, store.Page{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, string(e.Type))
	}
	var w []string
	for _, e := range want {
		w = append(w, string(e))
	}
	if strings.Join(got, ",") != strings.Join(w, ",") {
		t.Errorf("events %v, want %v", got, w)
	}
}

// completedOnce checks that job j of model m ended COMPLETED to step 1,
// published once (its step holding adapter, one end event), after n
// completions, and that its request body went.
func (f *fixture) completedOnce(t *testing.T, st *commitStore, m string, j store.Job, n int, adapter string) {
	t.Helper()
	if j.Status != store.StatusCompleted || *j.ToStep != 1 || j.Attempt != 1 {
		t.Fatalf("job %s (%s) to step %v attempt %d, want COMPLETED to step 1 in attempt 1", j.Status, j.ErrorMessage, j.ToStep, j.Attempt)
	}
	if got := st.completions(); got != n {
		t.Errorf("%d completions, want %d", got, n)
	}
	f.published(t, m, adapter)
	f.events(t, j.ID, store.EventTrainingStarted, store.EventTrainingEnded)
	f.requestGone(t, j.ID)
}

// requestGone checks that the ended job's request body was removed.
func (f *fixture) requestGone(t *testing.T, id string) {
	t.Helper()
	if _, err := os.Stat(f.layout.RequestPath(id)); !os.IsNotExist(err) {
		t.Errorf("request body of the ended job: %v", err)
	}
}

// A completion whose commit fails as the database restarts (nothing
// committed, the connection lost) is retried: the job ends COMPLETED with
// its one new step readable, not FAILED with its training thrown away (the
// chaos soak's 7 FAILED jobs of 7,595).
func TestTransientCommitFailureIsRetried(t *testing.T) { each(t, testTransientCommitFailureIsRetried) }

func testTransientCommitFailureIsRetried(t *testing.T, f *fixture) {
	st := &commitStore{Database: f.st, complete: func(ctx context.Context, c completion, ck store.Checkpoint, m map[string]any) (store.Checkpoint, error) {
		if c.n == 1 {
			c.tx.Rollback()
			return ck, errConnLost
		}
		return c.tx.Complete(ctx, ck, m)
	}}
	var log syncBuffer
	m, j := f.runOne(t, st, writer("trained"), &log)
	f.completedOnce(t, st, m, j, 2, "trained")
	if !strings.Contains(log.String(), "saving the new checkpoint failed; retrying") {
		t.Errorf("no retry in the log:\n%s", log.String())
	}
}

// A commit that goes through while its answer is lost (the database
// restarting as it answers) is not recorded again: the retry finds the
// job no longer under its lease, reads it back COMPLETED by this run, and
// the step's folder stays with its row.
func TestLostAnswerToACommitIsRecordedOnce(t *testing.T) {
	each(t, testLostAnswerToACommitIsRecordedOnce)
}

func testLostAnswerToACommitIsRecordedOnce(t *testing.T, f *fixture) {
	st := &commitStore{Database: f.st, complete: func(ctx context.Context, c completion, ck store.Checkpoint, m map[string]any) (store.Checkpoint, error) {
		if _, err := c.tx.Complete(ctx, ck, m); err != nil {
			return ck, err
		}
		if c.n == 1 {
			return ck, errConnLost
		}
		return ck, nil
	}}
	m, j := f.runOne(t, st, writer("trained"), io.Discard)
	f.completedOnce(t, st, m, j, 1, "trained") // the committed step not recorded again
}

// A completion the database refuses (here a real constraint violation:
// the step recorded as one the model has) fails the job at once, as
// before: no retry, no step, the folder taken back.
func TestPermanentCommitFailureFails(t *testing.T) { each(t, testPermanentCommitFailureFails) }

func testPermanentCommitFailureFails(t *testing.T, f *fixture) {
	st := &commitStore{Database: f.st, complete: func(ctx context.Context, c completion, ck store.Checkpoint, m map[string]any) (store.Checkpoint, error) {
		ck.Step = 0
		return c.tx.Complete(ctx, ck, m)
	}}
	m, j := f.runOne(t, st, writer("trained"), io.Discard)
	if j.Status != store.StatusFailed || j.ErrorMessage != "saving the new checkpoint failed" {
		t.Fatalf("job %s (%q), want FAILED saying the new checkpoint could not be saved", j.Status, j.ErrorMessage)
	}
	if n := st.completions(); n != 1 {
		t.Errorf("%d completions, want 1", n)
	}
	f.published(t, m)
	f.events(t, j.ID, store.EventTrainingStarted, store.EventTrainingFailed)
	f.requestGone(t, j.ID)
}

// A job cancelled (on another node) while its run waits to retry a failed
// commit is not completed: the retry finds the lease lost and discards the
// output. The folder it left published without a row is stale: the
// model's next job publishes the same step over it.
func TestLeaseLostWhileRetryingDiscards(t *testing.T) { each(t, testLeaseLostWhileRetryingDiscards) }

func testLeaseLostWhileRetryingDiscards(t *testing.T, f *fixture) {
	ctx := context.Background()
	st := &commitStore{Database: f.st, complete: func(ctx context.Context, c completion, ck store.Checkpoint, m map[string]any) (store.Checkpoint, error) {
		if c.n > 1 {
			return c.tx.Complete(ctx, ck, m)
		}
		c.tx.Rollback()
		// What another node's API does meanwhile: end the job.
		if err := f.st.FinishJob(ctx, c.l.JobID, store.StatusCancelled, "the job was cancelled"); err != nil {
			t.Error(err)
		}
		return ck, errConnLost
	}}
	var log syncBuffer
	m, j := f.runOne(t, st, writer("trained"), &log)
	if j.Status != store.StatusCancelled {
		t.Fatalf("job %s, want CANCELLED", j.Status)
	}
	if n := st.completions(); n != 1 {
		t.Errorf("%d completions, want 1", n)
	}
	if !strings.Contains(log.String(), "lease lost before its checkpoint was published") {
		t.Errorf("node a's log:\n%s", log.String())
	}
	f.events(t, j.ID, store.EventTrainingStarted, store.EventTrainingFailed)
	f.requestGone(t, j.ID)

	q := f.node(f.st, writer("next"), "node-b", io.Discard, jobs.DefaultLeaseTimeout)
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	next := submit(t, q, m)
	waitAll(t, f.st, []string{next}, store.StatusCompleted)
	if err := q.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	f.published(t, m, "next")
}

// A database that fails every commit until the lease's end: the run gives
// up as one whose lease was lost and keeps the request body; the job, still
// RUNNING, is reclaimed once its lease expired and completed once, by the
// node that reclaimed it.
func TestCommitFailingPastTheLeaseIsReclaimed(t *testing.T) {
	each(t, testCommitFailingPastTheLeaseIsReclaimed)
}

func testCommitFailingPastTheLeaseIsReclaimed(t *testing.T, f *fixture) {
	m := f.model(t, "m")
	st := &commitStore{Database: f.st, complete: func(ctx context.Context, c completion, ck store.Checkpoint, m map[string]any) (store.Checkpoint, error) {
		c.tx.Rollback()
		return ck, errConnLost
	}}
	id := f.reclaimedAfter(t, m, st, writer("a"), "the store failed until the lease's end", writer("b"))
	f.published(t, m, "b")
	f.events(t, id, store.EventTrainingStarted, store.EventTrainingEnded)
}

// On PostgreSQL, the real failure: the server ends the completing
// transaction's connection (as a restart does) after the lease check and
// the folder's rename, before the commit. The store reports it as
// transient, and the retry completes the job.
func TestCommitOnAConnectionTheServerEnded(t *testing.T) {
	f := openFixture(t, pgtest.DSN(t))
	st := &commitStore{Database: f.st, complete: func(ctx context.Context, c completion, ck store.Checkpoint, m map[string]any) (store.Checkpoint, error) {
		if c.n == 1 {
			if k := pgtest.KillTransactions(t, f.st.DB()); k != 1 {
				t.Errorf("the server ended %d connections in a transaction, want 1", k)
			}
		}
		return c.tx.Complete(ctx, ck, m)
	}}
	m, j := f.runOne(t, st, writer("trained"), io.Discard)
	f.completedOnce(t, st, m, j, 2, "trained")
}

// eventStore is the store of a node whose database restarts as the
// trainer's first event is appended: the append's answer is lost, after
// its commit went through (committed) or before.
type eventStore struct {
	store.Database
	committed bool

	mu    sync.Mutex
	calls int
}

func (s *eventStore) AppendEvent(ctx context.Context, l store.Lease, id string, typ store.EventType, data any) (store.Event, error) {
	s.mu.Lock()
	s.calls++
	n := s.calls
	s.mu.Unlock()
	if n > 1 {
		return s.Database.AppendEvent(ctx, l, id, typ, data)
	}
	if s.committed {
		if _, err := s.Database.AppendEvent(ctx, l, id, typ, data); err != nil {
			return store.Event{}, err
		}
	}
	return store.Event{}, errConnLost
}

// A training event whose append fails transiently (the database
// restarting) is retried: the job completes, and its log holds the event
// once — also when the failed append had committed.
func TestEventAppendRetried(t *testing.T) {
	each(t, func(t *testing.T, f *fixture) { testEventAppendRetried(t, f, false) })
}

func TestEventAppendCommittedRetried(t *testing.T) {
	each(t, func(t *testing.T, f *fixture) { testEventAppendRetried(t, f, true) })
}

func testEventAppendRetried(t *testing.T, f *fixture, committed bool) {
	st := &eventStore{Database: f.st, committed: committed}
	var log syncBuffer
	m, j := f.runOne(t, st, writer("trained"), &log)
	if j.Status != store.StatusCompleted || j.Attempt != 1 {
		t.Fatalf("job %s (%s) in attempt %d, want COMPLETED in attempt 1", j.Status, j.ErrorMessage, j.Attempt)
	}
	if st.calls != 2 {
		t.Errorf("%d appends, want 2 (the failed one, its retry)", st.calls)
	}
	f.published(t, m, "trained")
	f.events(t, j.ID, store.EventTrainingStarted, store.EventTrainingEnded)
	if !strings.Contains(log.String(), "recording a training event failed; retrying") {
		t.Errorf("no retry in the log:\n%s", log.String())
	}
}

// downStore is a commitStore whose database goes down for a while once
// down is called: job reads and lease locks fail as on a closed
// connection until then.
type downStore struct {
	*commitStore
	mu    sync.Mutex
	until time.Time
}

func (s *downStore) down(d time.Duration) {
	s.mu.Lock()
	s.until = time.Now().Add(d)
	s.mu.Unlock()
}

func (s *downStore) isDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Now().Before(s.until)
}

func (s *downStore) JobByID(ctx context.Context, id string) (store.Job, error) {
	if s.isDown() {
		return store.Job{}, errConnLost
	}
	return s.commitStore.JobByID(ctx, id)
}

func (s *downStore) LockLease(ctx context.Context, l store.Lease) (store.LeaseTx, error) {
	if s.isDown() {
		return nil, errConnLost
	}
	return s.commitStore.LockLease(ctx, l)
}

// A commit that goes through with its answer lost, the database then
// staying down longer than the lease (a PostgreSQL restart outlasting the
// chaos soak's 3 s lease; the soak found a job COMPLETED with its request
// body left so): the run cannot learn that its job ended, and the node
// removes the body once the database answers again — while it keeps
// running, not only at its next start.
func TestLostAnswerWithTheDatabaseDownPastTheLease(t *testing.T) {
	each(t, testLostAnswerWithTheDatabaseDownPastTheLease)
}

func testLostAnswerWithTheDatabaseDownPastTheLease(t *testing.T, f *fixture) {
	ctx := context.Background()
	m := f.model(t, "m")
	st := &downStore{}
	st.commitStore = &commitStore{Database: f.st, complete: func(ctx context.Context, c completion, ck store.Checkpoint, m map[string]any) (store.Checkpoint, error) {
		if _, err := c.tx.Complete(ctx, ck, m); err != nil {
			return ck, err
		}
		st.down(1500 * time.Millisecond) // past two lease timeouts of asking
		return ck, errConnLost
	}}
	var log syncBuffer
	q := f.node(st, writer("trained"), "node-a", &log, 300*time.Millisecond)
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer q.Shutdown(ctx)
	id := submit(t, q, m)
	f.waitEnded(t, id)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(f.layout.RequestPath(id)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the request body of the COMPLETED job stays on the running node; its log:\n%s", log.String())
		}
	}
	if st.isDown() {
		t.Error("the body went while the database was down")
	}
	j, err := f.st.JobByID(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	f.completedOnce(t, st.commitStore, m, j, 1, "trained")
}
