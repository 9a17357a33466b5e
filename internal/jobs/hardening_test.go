package jobs_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"flywheel/internal/jobs"
	"flywheel/internal/pgtest"
	"flywheel/internal/store"
)

// leakyTrainer writes part of a checkpoint, then fails with an error that
// names server paths (or panics).
type leakyTrainer struct {
	modelsDir string
	panics    bool
}

func (l leakyTrainer) Train(ctx context.Context, j jobs.Job, emit func(jobs.Event) error) (jobs.Result, error) {
	if err := os.WriteFile(filepath.Join(j.OutDir, "adapter_model.safetensors"), []byte("half"), 0o644); err != nil {
		return jobs.Result{}, err
	}
	if l.panics {
		panic("index out of range in " + j.FromDir)
	}
	return jobs.Result{}, errors.New("open " + filepath.Join(j.OutDir, "x") + ": disk full; base " +
		filepath.Join(l.modelsDir, "org/base", "model.safetensors") + ", also /etc/passwd")
}

// A failed job leaves nothing behind: its work folder and request body
// are removed; the message clients see names no server path; a trainer's
// panic fails its job instead of the process.
func TestFailedJobLeavesNothingAndNoPaths(t *testing.T) {
	for _, panics := range []bool{false, true} {
		f := newFixture(t)
		m := f.model(t, "m")
		q := f.queue(leakyTrainer{modelsDir: f.dataDir, panics: panics}, 1)
		// Submitted before the queue starts: a started queue may claim,
		// fail and clean up the job before its request body is looked at.
		id := submit(t, q, m)
		req := f.layout.RequestPath(id)
		if st, err := os.Stat(req); err != nil || st.Mode().Perm() != store.FileMode {
			t.Errorf("request body: %v %v", st, err)
		}
		if err := q.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		waitAll(t, f.st, []string{id}, store.StatusFailed)
		q.Shutdown(context.Background())

		j, _ := f.st.JobByID(context.Background(), id)
		evs, _, _ := f.st.ListEvents(context.Background(), id, store.Page{Limit: 100})
		last := string(evs[len(evs)-1].Data)
		for _, msg := range []string{j.ErrorMessage, last} {
			if strings.Contains(msg, f.dataDir) || strings.Contains(msg, "/etc/") || !strings.Contains(msg, "-dir\\u003e/") && !strings.Contains(msg, "-dir>/") {
				t.Errorf("panics=%v: client message %q", panics, msg)
			}
		}
		if !panics && !strings.Contains(j.ErrorMessage, "disk full") {
			t.Errorf("message lost its cause: %q", j.ErrorMessage)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, e1 := os.Stat(req)
			work, _ := filepath.Glob(filepath.Join(f.layout.ModelDir(m), ".tmp-*")) // a run's folder is .tmp-<job>.<attempt>
			if os.IsNotExist(e1) && len(work) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("panics=%v: leftovers: request %v, work folders %v", panics, e1, work)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// What kill -9 leaves (a job's work folder, a request body cut short, the
// request of a job that ended) is swept at the next start; the request of a
// queued job is kept.
func TestStartSweepsLeftovers(t *testing.T) {
	f := newFixture(t)
	m, ended, queued := f.endedAndQueued(t)
	work := f.layout.WorkDir(m, ended)
	os.MkdirAll(work, 0o700)
	os.WriteFile(filepath.Join(work, "adapter_model.safetensors"), []byte("half"), 0o600)
	part := filepath.Join(f.dataDir, "requests", ".tmp-"+store.NewID()+".json-123")
	os.WriteFile(part, []byte(`{"model_id": "`), 0o600)

	q2 := f.queue(blockTrainer{}, 1)
	if err := q2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer q2.Shutdown(context.Background())
	for _, p := range []string{work, part, f.layout.RequestPath(ended)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s survived the start: %v", p, err)
		}
	}
	if _, err := os.Stat(f.layout.RequestPath(queued)); err != nil {
		t.Errorf("queued job's request: %v", err)
	}
}

// On a data dir shared by several nodes (PostgreSQL) the start-up sweep
// removes the request body of an ended job however recent it is (a node
// killed between recording the end and removing the body, as the chaos
// soak's kill -9 can); a recent body without a job — another node's
// submission whose row is not written yet — stays, as does a queued job's.
func TestStartSweepsEndedJobsRequestsOnASharedDataDir(t *testing.T) {
	f := openFixture(t, pgtest.DSN(t))
	_, ended, queued := f.endedAndQueued(t)
	pending := f.layout.RequestPath(store.NewID())
	if err := os.WriteFile(pending, []byte(`{"model_id": "m"}`), 0o600); err != nil {
		t.Fatal(err)
	}

	q2 := f.queue(blockTrainer{}, 1)
	if err := q2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer q2.Shutdown(context.Background())
	if _, err := os.Stat(f.layout.RequestPath(ended)); !os.IsNotExist(err) {
		t.Errorf("the ended job's request survived the start: %v", err)
	}
	for _, p := range []string{f.layout.RequestPath(queued), pending} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// endedAndQueued submits two jobs of a new model m through a queue that is
// not started (they stay queued) and ends the first (FAILED).
func (f *fixture) endedAndQueued(t *testing.T) (m, ended, queued string) {
	t.Helper()
	m = f.model(t, "m")
	q := f.queue(nil, 1)
	ended = submit(t, q, m)
	if err := f.st.FinishJob(context.Background(), ended, store.StatusFailed, "x"); err != nil {
		t.Fatal(err)
	}
	return m, ended, submit(t, q, m)
}

// blockTrainer runs until cancelled.
type blockTrainer struct{}

func (blockTrainer) Train(ctx context.Context, j jobs.Job, emit func(jobs.Event) error) (jobs.Result, error) {
	<-ctx.Done()
	return jobs.Result{}, ctx.Err()
}
