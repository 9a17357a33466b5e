package jobs_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"flywheel/internal/checkpoints"
	"flywheel/internal/jobs"
	"flywheel/internal/pgtest"
	"flywheel/internal/store"
)

// stalledStore is the store as a stalled node sees it: its renewals report
// success but renew nothing, as for a node paused past its lease (a long
// pause, SIGSTOP) that resumes unaware.
type stalledStore struct{ store.Database }

func (stalledStore) RenewLease(context.Context, store.Lease, time.Duration) error { return nil }

// quietTrainer emits training_started, waits for release (or ctx), then
// writes its checkpoint without emitting anything more: only the publish
// can stop a run that lost its lease meanwhile.
type quietTrainer struct{ release, returned chan struct{} }

func (q quietTrainer) Train(ctx context.Context, j jobs.Job, emit func(jobs.Event) error) (jobs.Result, error) {
	defer close(q.returned)
	if err := emit(jobs.Event{Type: "training_started", Data: map[string]any{"num_sequences": 1}}); err != nil {
		return jobs.Result{}, err
	}
	select {
	case <-q.release:
	case <-ctx.Done():
		return jobs.Result{}, ctx.Err()
	}
	return jobs.Result{}, os.WriteFile(filepath.Join(j.OutDir, "adapter_model.safetensors"), []byte("stale"), 0o644)
}

// node is a queue over st named name, with a lease of lease, logging to w.
func (f *fixture) node(st jobs.Store, tr jobs.Trainer, name string, w io.Writer, lease time.Duration) *jobs.Queue {
	log := slog.New(slog.NewTextHandler(w, nil))
	return jobs.New(st, jobs.Config{DataDir: f.dataDir, ModelsDir: f.dataDir, Workers: 1, Trainer: tr, NodeID: name,
		LeaseTimeout: lease, PollInterval: 20 * time.Millisecond, Shared: f.st.Shared(),
		Checkpoints: checkpoints.New(f.st, f.layout, log, f.st.Shared()), Logger: log})
}

func (f *fixture) waitLease(t *testing.T, id, owner string) store.Job {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		j, err := f.st.JobByID(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.Status == store.StatusRunning && j.LeaseOwner == owner {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: %s leased by %q, want RUNNING by %s", id, j.Status, j.LeaseOwner, owner)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (f *fixture) waitEvents(t *testing.T, id string, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if evs, _, _ := f.st.ListEvents(context.Background(), id, store.Page{}); len(evs) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s has fewer than %d events", id, n)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test together.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A node that stalls past its lease loses the job to another node; when it
// resumes and finishes training, its publish is refused: the job yields
// exactly one new step, the other node's, with that run's events only.
// (PostgreSQL: an SQLite database has one node.)
func TestStalledNodeCannotPublish(t *testing.T) {
	f := openFixture(t, pgtest.DSN(t))
	ctx := context.Background()
	m := f.model(t, "m")
	stalled := quietTrainer{release: make(chan struct{}), returned: make(chan struct{})}
	var alog syncBuffer
	a := f.node(stalledStore{f.st}, stalled, "node-a", &alog, 300*time.Millisecond)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	id := submit(t, a, m)
	f.waitLease(t, id, "node-a")
	f.waitEvents(t, id, 1) // training_started: the trainer runs

	b := f.node(f.st, &recTrainer{}, "node-b", io.Discard, 300*time.Millisecond)
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown(ctx)
	waitAll(t, f.st, []string{id}, store.StatusCompleted)
	close(stalled.release) // node a resumes, its output ready to publish
	<-stalled.returned
	// Its run ends by discarding its work folder.
	work := f.layout.WorkDir(m, id+".1")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(work); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("node a's run did not end")
		}
	}
	if err := a.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(alog.String(), "lease lost before its checkpoint was published") {
		t.Errorf("node a's log:\n%s", alog.String())
	}

	j, _ := f.st.JobByID(ctx, id)
	if j.LeaseOwner != "node-b" || j.Attempt != 2 || *j.ToStep != 1 {
		t.Errorf("job %+v", j)
	}
	cks, _, _ := f.st.ListCheckpoints(ctx, m, store.Page{Limit: -1})
	if len(cks) != 2 || cks[1].Step != 1 {
		t.Fatalf("checkpoints %+v", cks)
	}
	if b, err := os.ReadFile(filepath.Join(cks[1].Dir, "adapter_model.safetensors")); err != nil || string(b) != "weights" {
		t.Errorf("step 1 holds %q (%v), want node b's weights", b, err)
	}
	entries, _ := os.ReadDir(f.layout.ModelDir(m))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, ","); got != "step-0,step-1" {
		t.Errorf("model folder: %s", got)
	}
	evs, _, _ := f.st.ListEvents(ctx, id, store.Page{Limit: 100})
	var types []string
	for _, e := range evs {
		types = append(types, string(e.Type))
	}
	if got := strings.Join(types, ","); got != "training_started,gradient_step,training_ended" {
		t.Errorf("events %s", got)
	}
}

// A job cancelled through another node stops on the node running it
// within a renewal, and nothing of the run follows the cancel.
func TestCancelOnAnotherNodeStopsTheRun(t *testing.T) { each(t, testCancelOnAnotherNodeStopsTheRun) }

func testCancelOnAnotherNodeStopsTheRun(t *testing.T, f *fixture) {
	ctx := context.Background()
	m := f.model(t, "m")
	tr := &recTrainer{block: make(chan struct{})}
	a := f.node(f.st, tr, "node-a", io.Discard, 300*time.Millisecond)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown(ctx)
	id := submit(t, a, m)
	f.waitLease(t, id, "node-a")
	f.waitEvents(t, id, 1) // training_started: the trainer runs
	// What another node's API does: end the job in the database.
	if err := f.st.FinishJob(ctx, id, store.StatusCancelled, "the job was cancelled"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		tr.mu.Lock()
		n := len(tr.running)
		tr.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the run did not stop after its job was cancelled elsewhere")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := a.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	evs, _, _ := f.st.ListEvents(ctx, id, store.Page{Limit: 100})
	if len(evs) != 2 || evs[0].Type != "training_started" || evs[1].Type != "training_failed" {
		t.Errorf("events %+v", evs)
	}
	if cks, _, _ := f.st.ListCheckpoints(ctx, m, store.Page{Limit: -1}); len(cks) != 1 {
		t.Errorf("%d checkpoints after a cancel", len(cks))
	}
	if leftovers, _ := filepath.Glob(filepath.Join(f.layout.ModelDir(m), ".tmp-*")); len(leftovers) != 0 {
		t.Errorf("work folders left: %v", leftovers)
	}
}

// An API-only node (Workers 0, as --workers 0) queues jobs and runs none.
func TestAPIOnlyNodeRunsNoJob(t *testing.T) {
	f := newFixture(t)
	m := f.model(t, "m")
	q := f.queue(&recTrainer{}, 0)
	if err := q.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer q.Shutdown(context.Background())
	if q.Workers() != 0 {
		t.Errorf("Workers() = %d", q.Workers())
	}
	id := submit(t, q, m)
	time.Sleep(200 * time.Millisecond) // ten polling intervals
	if j, _ := f.st.JobByID(context.Background(), id); j.Status != store.StatusQueued {
		t.Errorf("an API-only node ran a job: %s", j.Status)
	}
}

// downAtFailStore is the store of a node that loses the database just as
// its run fails: recording the failure errors (connection refused).
type downAtFailStore struct{ store.Database }

func (downAtFailStore) FailJob(context.Context, store.Lease, string) error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
}

// failOnce fails its first run and then trains as next does.
type failOnce struct {
	next  jobs.Trainer
	calls atomic.Int32
}

func (f *failOnce) Train(ctx context.Context, j jobs.Job, emit func(jobs.Event) error) (jobs.Result, error) {
	if f.calls.Add(1) == 1 {
		return jobs.Result{}, errors.New("the trainer failed")
	}
	return f.next.Train(ctx, j, emit)
}

// A run whose end cannot be recorded (the database is down when it fails)
// leaves the job RUNNING with its request body: when the lease expires
// another node runs it from the same request and completes it, once (the
// chaos soak found such jobs FAILED as "the stored request of this job is
// missing").
func TestUnrecordedFailureKeepsTheRequest(t *testing.T) {
	f := newFixture(t)
	m := f.model(t, "m")
	f.reclaimedAfter(t, m, downAtFailStore{f.st}, &failOnce{next: &recTrainer{}}, "record job failure", &recTrainer{})
}

// reclaimedAfter runs a job of model m on node a, over st with trainer ta,
// until a's log says said, and checks that the run left the job RUNNING
// with its request body; then node b, over the database itself with
// trainer tb, reclaims the job and completes it (attempt 2, step 1), and
// its request body goes. It returns the job's id.
func (f *fixture) reclaimedAfter(t *testing.T, m string, st jobs.Store, ta jobs.Trainer, said string, tb jobs.Trainer) string {
	t.Helper()
	ctx := context.Background()
	var alog syncBuffer
	a := f.node(st, ta, "node-a", &alog, 300*time.Millisecond)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	id := submit(t, a, m)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(alog.String(), said); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("node a's log does not say %q:\n%s", said, alog.String())
		}
	}
	if err := a.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(f.layout.RequestPath(id)); err != nil {
		t.Fatalf("the request body of the unrecorded run is gone: %v", err)
	}
	if j, _ := f.st.JobByID(ctx, id); j.Status != store.StatusRunning {
		t.Fatalf("job %s after node a's unrecorded end, want RUNNING", j.Status)
	}
	b := f.node(f.st, tb, "node-b", io.Discard, 300*time.Millisecond)
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitAll(t, f.st, []string{id}, store.StatusCompleted)
	if err := b.Shutdown(ctx); err != nil { // waits for the run's end
		t.Fatal(err)
	}
	j, _ := f.st.JobByID(ctx, id)
	if j.LeaseOwner != "node-b" || j.Attempt != 2 || *j.ToStep != 1 {
		t.Errorf("job %+v", j)
	}
	if _, err := os.Stat(f.layout.RequestPath(id)); !os.IsNotExist(err) {
		t.Errorf("the request body stays after the job completed: %v", err)
	}
	return id
}

// lostAckFailStore is the store of a node whose database restarts just as
// it commits a job's failure: the commit goes through, its answer is lost.
type lostAckFailStore struct{ store.Database }

func (s lostAckFailStore) FailJob(ctx context.Context, l store.Lease, msg string) error {
	if err := s.Database.FailJob(ctx, l, msg); err != nil {
		return err
	}
	return errors.New("unexpected EOF")
}

// A failure recorded while its answer was lost (the chaos soak's 30-minute
// run: a job FAILED with its request body left behind) removes the request
// body all the same: the run reads the job back and finds it ended.
func TestLostAnswerToARecordedFailureRemovesTheRequest(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	m := f.model(t, "m")
	a := f.node(lostAckFailStore{f.st}, &failOnce{next: &recTrainer{}}, "node-a", io.Discard, 300*time.Millisecond)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown(ctx)
	id := submit(t, a, m)
	waitAll(t, f.st, []string{id}, store.StatusFailed)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(f.layout.RequestPath(id)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the request body of the FAILED job stays")
		}
	}
}
