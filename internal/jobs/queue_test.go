package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"flywheel/internal/checkpoints"
	"flywheel/internal/jobs"
	"flywheel/internal/pgtest"
	"flywheel/internal/store"
)

// recTrainer records the order jobs run in and how many run at once.
type recTrainer struct {
	delay time.Duration
	block chan struct{} // when set, Train waits on it (or ctx)

	mu       sync.Mutex
	order    []string // job ids in start order
	running  map[string]bool
	maxPar   int
	overlaps int // times two jobs of one model ran at once
}

func (t *recTrainer) Train(ctx context.Context, j jobs.Job, emit func(jobs.Event) error) (jobs.Result, error) {
	t.mu.Lock()
	if t.running == nil {
		t.running = map[string]bool{}
	}
	if t.running[j.ModelID] {
		t.overlaps++
	}
	t.running[j.ModelID] = true
	t.order = append(t.order, j.ID)
	n := 0
	for range t.running {
		n++
	}
	t.maxPar = max(t.maxPar, n)
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.running, j.ModelID)
		t.mu.Unlock()
	}()
	if err := emit(jobs.Event{Type: "training_started", Data: map[string]any{"num_sequences": 1}}); err != nil {
		return jobs.Result{}, err
	}
	if t.block != nil {
		select {
		case <-t.block:
		case <-ctx.Done():
			return jobs.Result{}, ctx.Err()
		}
	}
	select {
	case <-time.After(t.delay):
	case <-ctx.Done():
		return jobs.Result{}, ctx.Err()
	}
	if err := emit(jobs.Event{Type: "gradient_step", Data: map[string]any{"loss": 1.0}}); err != nil {
		return jobs.Result{}, err
	}
	if err := os.WriteFile(filepath.Join(j.OutDir, "adapter_model.safetensors"), []byte("weights"), 0o644); err != nil {
		return jobs.Result{}, err
	}
	return jobs.Result{Metrics: map[string]any{"loss": 1.0}}, nil
}

type fixture struct {
	st      store.Database
	dataDir string
	layout  store.Layout
}

// newFixture is a data dir over SQLite.
func newFixture(t *testing.T) *fixture { return openFixture(t, "") }

// each runs fn on a fixture over SQLite and one over PostgreSQL
// (internal/pgtest).
func each(t *testing.T, fn func(t *testing.T, f *fixture)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, newFixture(t)) })
	t.Run("postgres", func(t *testing.T) { fn(t, openFixture(t, pgtest.DSN(t))) })
}

// openFixture opens a data dir over the database dbURL (SQLite in the data
// dir when empty).
func openFixture(t *testing.T, dbURL string) *fixture {
	t.Helper()
	dir := t.TempDir()
	st, _, err := store.OpenDataDir(context.Background(), dir, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.EnsureUser(context.Background(), "u"); err != nil {
		t.Fatal(err)
	}
	return &fixture{st: st, dataDir: dir, layout: store.Layout{DataDir: dir}}
}

func (f *fixture) model(t *testing.T, name string) string {
	t.Helper()
	id := store.NewID()
	dir := f.layout.CheckpointDir(id, 0)
	os.MkdirAll(dir, 0o755)
	_, err := f.st.CreateModel(context.Background(), store.TrainedModel{ID: id, Entity: "u", Project: "p", Name: name, BaseModel: "b"},
		store.Checkpoint{Step: 0, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (f *fixture) queue(tr jobs.Trainer, workers int) *jobs.Queue {
	log := slog.New(slog.DiscardHandler)
	return jobs.New(f.st, jobs.Config{DataDir: f.dataDir, ModelsDir: f.dataDir, Workers: workers, Trainer: tr, Shared: f.st.Shared(),
		Checkpoints: checkpoints.New(f.st, f.layout, log, f.st.Shared()), Logger: log, PollInterval: 20 * time.Millisecond})
}

func submit(t *testing.T, q *jobs.Queue, modelID string) string {
	t.Helper()
	p, err := q.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	p.Write([]byte(`{"model_id": "` + modelID + `"}`))
	j, err := p.Submit(context.Background(), store.Job{ModelID: modelID, Kind: store.KindRL})
	if err != nil {
		t.Fatal(err)
	}
	return j.ID
}

func waitAll(t *testing.T, st store.Store, ids []string, status store.JobStatus) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, id := range ids {
		for {
			j, err := st.JobByID(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if j.Status == status {
				break
			}
			if j.Status == store.StatusFailed || time.Now().After(deadline) {
				t.Fatalf("job %s: %s (%s), want %s", id, j.Status, j.ErrorMessage, status)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func TestPerModelOrderAndParallelism(t *testing.T) { each(t, testPerModelOrderAndParallelism) }

func testPerModelOrderAndParallelism(t *testing.T, f *fixture) {
	tr := &recTrainer{delay: 30 * time.Millisecond}
	q := f.queue(tr, 2)
	a, b := f.model(t, "a"), f.model(t, "b")
	// Submit before starting so that every job is queued at once.
	var ids, aIDs, bIDs []string
	for i := 0; i < 4; i++ {
		ja, jb := submit(t, q, a), submit(t, q, b)
		ids, aIDs, bIDs = append(ids, ja, jb), append(aIDs, ja), append(bIDs, jb)
	}
	if err := q.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer q.Shutdown(context.Background())
	waitAll(t, f.st, ids, store.StatusCompleted)

	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.overlaps != 0 {
		t.Errorf("%d times two jobs of one model ran at once", tr.overlaps)
	}
	if tr.maxPar != 2 {
		t.Errorf("at most %d jobs ran at once, want 2 (two models, two workers)", tr.maxPar)
	}
	// Each model's jobs ran in submission order, each from the previous step.
	for _, want := range [][]string{aIDs, bIDs} {
		var got []string
		for _, id := range tr.order {
			for _, w := range want {
				if id == w {
					got = append(got, id)
				}
			}
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("order %v, want %v", got, want)
			}
			j, _ := f.st.JobByID(context.Background(), want[i])
			if *j.FromStep != i || *j.ToStep != i+1 {
				t.Errorf("job %d: from %d to %d", i, *j.FromStep, *j.ToStep)
			}
			if _, err := os.Stat(j.RequestPath); !os.IsNotExist(err) {
				t.Errorf("request file of a finished job remains")
			}
		}
	}
	ck, err := f.st.LatestCheckpoint(context.Background(), a)
	if err != nil || ck.Step != 4 || ck.Dir != f.layout.CheckpointDir(a, 4) || ck.Metrics["loss"] != 1.0 {
		t.Fatalf("latest checkpoint %+v, %v", ck, err)
	}
	if b, err := os.ReadFile(filepath.Join(ck.Dir, "adapter_model.safetensors")); err != nil || string(b) != "weights" {
		t.Errorf("checkpoint files: %v", err)
	}
	evs, _, _ := f.st.ListEvents(context.Background(), aIDs[3], store.Page{Limit: 100})
	var types []string
	for _, e := range evs {
		types = append(types, string(e.Type))
	}
	if len(types) != 3 || types[2] != "training_ended" {
		t.Errorf("events %v", types)
	}
	var ended map[string]any
	json.Unmarshal(evs[2].Data, &ended)
	if ended["step"] != 4.0 || ended["checkpoint_id"] != ck.ID {
		t.Errorf("training_ended %v", ended)
	}
}

func TestRequeueAtStartAndShutdown(t *testing.T) { each(t, testRequeueAtStartAndShutdown) }

func testRequeueAtStartAndShutdown(t *testing.T, f *fixture) {
	m := f.model(t, "m")
	// A first queue starts a job, then shuts down mid-run: the job goes back
	// to the queue with its partial events dropped.
	blocked := &recTrainer{block: make(chan struct{})}
	q1 := f.queue(blocked, 1)
	if err := q1.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	id := submit(t, q1, m)
	waitAll(t, f.st, []string{id}, store.StatusRunning)
	if err := q1.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	j, _ := f.st.JobByID(context.Background(), id)
	if j.Status != store.StatusQueued || j.FromStep != nil || j.TrainingStart != nil {
		t.Fatalf("after shutdown: %+v", j)
	}
	if evs, _, _ := f.st.ListEvents(context.Background(), id, store.Page{Limit: 10}); len(evs) != 0 {
		t.Errorf("partial events kept: %d", len(evs))
	}

	// A process killed mid-job leaves it RUNNING with a partial work dir.
	// (Its lease has expired by the restart, as a dead node's does.)
	dead, ok, err := f.st.ClaimNext(context.Background(), "dead-node", time.Millisecond, nil)
	if !ok || err != nil {
		t.Fatal("claim", err)
	}
	partial := f.layout.WorkDir(m, id+".1")
	os.MkdirAll(partial, 0o755)
	os.WriteFile(filepath.Join(partial, "junk"), []byte("x"), 0o644)
	f.st.AppendEvent(context.Background(), dead.Lease(), store.NewID(), "training_started", map[string]any{"num_sequences": 1})
	time.Sleep(5 * time.Millisecond)

	orphans := []string{filepath.Join(f.dataDir, "requests", store.NewID()+".json"), filepath.Join(f.dataDir, "requests", "x.json.part")}
	for _, o := range orphans {
		os.WriteFile(o, []byte("{}"), 0o644)
	}

	q2 := f.queue(&recTrainer{}, 1)
	if err := q2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer q2.Shutdown(context.Background())
	waitAll(t, f.st, []string{id}, store.StatusCompleted)
	evs, _, _ := f.st.ListEvents(context.Background(), id, store.Page{Limit: 10})
	if len(evs) != 3 || evs[0].Type != "training_started" || evs[2].Type != "training_ended" {
		t.Errorf("events after re-run: %v", evs)
	}
	if _, err := os.Stat(partial); !os.IsNotExist(err) {
		t.Errorf("partial work dir remains")
	}
	for _, o := range orphans {
		_, err := os.Stat(o)
		// On a shared data dir a recent file may be another node's intake
		// in progress: only files older than an hour are swept.
		if removed := os.IsNotExist(err); removed == f.st.Shared() {
			t.Errorf("orphan request %s: removed %v on a shared data dir %v", filepath.Base(o), removed, f.st.Shared())
		}
	}
}

func TestFailureLeavesModelUnchanged(t *testing.T) { each(t, testFailureLeavesModelUnchanged) }

func testFailureLeavesModelUnchanged(t *testing.T, f *fixture) {
	m := f.model(t, "m")
	q := f.queue(jobs.Trainer(failTrainer{}), 1)
	if err := q.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer q.Shutdown(context.Background())
	id := submit(t, q, m)
	waitAll(t, f.st, []string{id}, store.StatusFailed)
	j, _ := f.st.JobByID(context.Background(), id)
	if j.ErrorMessage != "no trajectory in the job is trainable" || j.ToStep != nil {
		t.Errorf("failed job: %+v", j)
	}
	if ck, _ := f.st.LatestCheckpoint(context.Background(), m); ck.Step != 0 {
		t.Errorf("model moved to step %d", ck.Step)
	}
	if err := q.Cancel(context.Background(), id); !errors.Is(err, jobs.ErrNotCancellable) {
		t.Errorf("cancel a failed job: %v", err)
	}
}

type failTrainer struct{}

func (failTrainer) Train(ctx context.Context, j jobs.Job, emit func(jobs.Event) error) (jobs.Result, error) {
	return jobs.Result{}, errors.New("no trajectory in the job is trainable")
}
