package checkpoints_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"flywheel/internal/checkpoints"
	"flywheel/internal/store"
)

type fixture struct {
	st     *store.SQLite
	layout store.Layout
	ck     *checkpoints.Manager
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	st, err := store.OpenSQLite(context.Background(), filepath.Join(dir, "flywheel.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.EnsureUser(context.Background(), "u"); err != nil {
		t.Fatal(err)
	}
	layout := store.Layout{DataDir: dir}
	return &fixture{st: st, layout: layout, ck: checkpoints.New(st, layout, slog.New(slog.DiscardHandler), false)}
}

// writeAdapter stands in for the engine's adapter writer: it makes dir and
// puts an adapter file in it.
// completeJob publishes a job's checkpoint as the job queue does:
// LockLease, then Complete under it.
func completeJob(ctx context.Context, st store.Jobs, l store.Lease, ck store.Checkpoint, metrics map[string]any) (store.Checkpoint, error) {
	t, err := st.LockLease(ctx, l)
	if err != nil {
		return ck, err
	}
	defer t.Rollback()
	return t.Complete(ctx, ck, metrics)
}

func writeAdapter(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, checkpoints.AdapterFile), []byte("weights"), 0o644)
}

func (f *fixture) create(t *testing.T, name string) store.TrainedModel {
	t.Helper()
	m, err := f.ck.Create(context.Background(), store.TrainedModel{ID: store.NewID(), Entity: "u", Project: "p", Name: name, BaseModel: "b"}, writeAdapter)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// names lists the entries of a model's folder.
func (f *fixture) names(t *testing.T, modelID string) []string {
	t.Helper()
	entries, err := os.ReadDir(f.layout.ModelDir(modelID))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func TestCreateStepZero(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	m := f.create(t, "m")
	ck, err := f.st.LatestCheckpoint(ctx, m.ID)
	if err != nil || ck.Step != 0 || ck.Dir != f.layout.CheckpointDir(m.ID, 0) {
		t.Fatalf("step 0: %+v %v", ck, err)
	}
	if got := f.names(t, m.ID); len(got) != 1 || got[0] != "step-0" {
		t.Errorf("model folder holds %v", got)
	}

	// A writer failure is an AdapterError and leaves nothing behind.
	id := store.NewID()
	_, err = f.ck.Create(ctx, store.TrainedModel{ID: id, Entity: "u", Project: "p", Name: "bad", BaseModel: "b"}, func(dir string) error {
		os.MkdirAll(dir, 0o755)
		return errors.New("rank too large")
	})
	var ae *checkpoints.AdapterError
	if !errors.As(err, &ae) || ae.Err.Error() != "rank too large" {
		t.Fatalf("writer failure: %v", err)
	}
	if exists(f.layout.ModelDir(id)) {
		t.Error("folder of a failed create remains")
	}

	// A taken name is the store's conflict, and leaves nothing behind.
	id = store.NewID()
	_, err = f.ck.Create(ctx, store.TrainedModel{ID: id, Entity: "u", Project: "p", Name: "m", BaseModel: "b"}, writeAdapter)
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate name: %v", err)
	}
	if exists(f.layout.ModelDir(id)) {
		t.Error("folder of a conflicting create remains")
	}
}

// claim queues and claims a job of model m, as the queue does.
func (f *fixture) claim(t *testing.T, m store.TrainedModel) store.Job {
	t.Helper()
	if _, err := f.st.CreateJob(context.Background(), store.Job{ModelID: m.ID, Kind: store.KindRL}); err != nil {
		t.Fatal(err)
	}
	j, ok, err := f.st.ClaimNext(context.Background(), "node", time.Hour, nil)
	if err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	return j
}

func TestPublish(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	m := f.create(t, "m")
	j := f.claim(t, m)
	record := func(dir string) error {
		_, err := completeJob(ctx, f.st, j.Lease(), store.Checkpoint{ModelID: m.ID, Step: 1, Dir: dir}, nil)
		return err
	}

	// A work folder without the adapter is refused.
	work, err := f.ck.WorkDir(m.ID, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ck.Publish(m.ID, j.ID, 1); err == nil {
		t.Fatal("published a work folder without an adapter")
	}
	if err := writeAdapter(work); err != nil {
		t.Fatal(err)
	}

	// A record that failed takes the folder back out (Unpublish).
	dir, err := f.ck.Publish(m.ID, j.ID, 1)
	if err != nil || dir != f.layout.CheckpointDir(m.ID, 1) || !exists(dir) || exists(work) {
		t.Fatalf("publish: %q %v", dir, err)
	}
	failed := errors.New("record failed")
	if err := f.ck.Unpublish(m.ID, 1, dir, failed); err != failed {
		t.Fatalf("unpublish of a step without a row: %v, want the record's error", err)
	}
	if exists(f.layout.CheckpointDir(m.ID, 1)) {
		t.Fatal("step folder of a failed record remains")
	}

	// A stale step-1 folder (a crash between rename and commit) is replaced.
	work, _ = f.ck.WorkDir(m.ID, j.ID)
	writeAdapter(work)
	stale := f.layout.CheckpointDir(m.ID, 1)
	os.MkdirAll(stale, 0o755)
	os.WriteFile(filepath.Join(stale, "junk"), []byte("x"), 0o644)
	if dir, err = f.ck.Publish(m.ID, j.ID, 1); err != nil {
		t.Fatal(err)
	}
	if err := record(dir); err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(stale, "junk")) || !exists(filepath.Join(stale, checkpoints.AdapterFile)) || exists(work) {
		t.Error("publish did not replace the stale folder with the work folder")
	}
	if ck, err := f.st.LatestCheckpoint(ctx, m.ID); err != nil || ck.Step != 1 || ck.Dir != stale {
		t.Errorf("latest checkpoint %+v %v", ck, err)
	}
	f.ck.Discard(m.ID, j.ID) // nothing left to discard
	if got := f.names(t, m.ID); len(got) != 2 {
		t.Errorf("model folder holds %v", got)
	}
}

func TestDelete(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	m := f.create(t, "m")
	j := f.claim(t, m)
	work, _ := f.ck.WorkDir(m.ID, j.ID)
	writeAdapter(work)
	if dir, err := f.ck.Publish(m.ID, j.ID, 1); err != nil {
		t.Fatal(err)
	} else if _, err := completeJob(ctx, f.st, j.Lease(), store.Checkpoint{ModelID: m.ID, Step: 1, Dir: dir}, nil); err != nil {
		t.Fatal(err)
	}

	deleted, notFound, err := f.ck.Delete(ctx, m.ID, []int{0, 7})
	if err != nil || len(deleted) != 1 || deleted[0].Step != 0 || len(notFound) != 1 || notFound[0] != 7 {
		t.Fatalf("delete: %v %v %v", deleted, notFound, err)
	}
	if exists(f.layout.CheckpointDir(m.ID, 0)) || !exists(f.layout.CheckpointDir(m.ID, 1)) {
		t.Error("delete removed the wrong folders")
	}

	cks, err := f.ck.DeleteModel(ctx, m.ID)
	if err != nil || len(cks) != 1 {
		t.Fatalf("delete model: %v %v", cks, err)
	}
	if exists(f.layout.ModelDir(m.ID)) {
		t.Error("model folder remains")
	}
	if _, err := f.ck.DeleteModel(ctx, m.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleting twice: %v", err)
	}
}

// TestSweep fakes what crashes leave behind and checks that a start-up sweep
// removes exactly the leftovers.
func TestSweep(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.ck.Sweep(ctx); err != nil { // no checkpoints folder yet
		t.Fatal(err)
	}
	m := f.create(t, "m")
	dir := f.layout.ModelDir(m.ID)
	work := f.layout.WorkDir(m.ID, store.NewID()) // a job's output cut short
	writeAdapter(work)
	orphan := f.layout.CheckpointDir(m.ID, 1) // renamed, never recorded
	writeAdapter(orphan)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not ours"), 0o644)
	os.MkdirAll(filepath.Join(dir, "step-01"), 0o755) // not a name we write

	unknown := f.layout.ModelDir(store.NewID()) // no model row: reported, kept
	writeAdapter(filepath.Join(unknown, "step-0"))
	writeAdapter(filepath.Join(unknown, ".tmp-create"))

	if err := f.ck.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if exists(work) || exists(orphan) {
		t.Errorf("leftovers remain: work %v, unrecorded step %v", exists(work), exists(orphan))
	}
	for _, keep := range []string{f.layout.CheckpointDir(m.ID, 0), filepath.Join(dir, "notes.txt"), filepath.Join(dir, "step-01"), filepath.Join(unknown, "step-0")} {
		if !exists(keep) {
			t.Errorf("sweep removed %s", keep)
		}
	}
	if exists(filepath.Join(unknown, ".tmp-create")) {
		t.Error("work folder of an unknown model remains")
	}
}

// Checkpoints are tenants' data: every published folder is 0700 and every
// file in it 0600, whatever mode the writer gave them (the engine writes
// 0644).
func TestPublishedCheckpointsArePrivate(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	m, j, work := f.trained(t)
	os.MkdirAll(filepath.Join(work, "sub"), 0o755)
	os.WriteFile(filepath.Join(work, "sub", "x"), []byte("x"), 0o644)
	if dir, err := f.ck.Publish(m.ID, j.ID, 1); err != nil {
		t.Fatal(err)
	} else if _, err := completeJob(ctx, f.st, j.Lease(), store.Checkpoint{ModelID: m.ID, Step: 1, Dir: dir}, nil); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{filepath.Join(f.layout.DataDir, "checkpoints"), f.layout.ModelDir(m.ID)} {
		if st, err := os.Stat(root); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v", root, st.Mode(), err)
		}
	}
	for _, step := range []int{0, 1} {
		filepath.WalkDir(f.layout.CheckpointDir(m.ID, step), func(path string, d os.DirEntry, err error) error {
			if err != nil {
				t.Fatal(err)
			}
			st, _ := d.Info()
			want := os.FileMode(0o600)
			if d.IsDir() {
				want = 0o700
			}
			if st.Mode().Perm() != want {
				t.Errorf("%s: mode %v, want %v", path, st.Mode().Perm(), want)
			}
			return nil
		})
	}
}

// On a data dir shared with other nodes the sweep leaves a model in
// training alone (its work folder, and the step it may be publishing,
// belong to a live run elsewhere) and sweeps it once no job runs.
func TestSharedSweepSparesModelsInTraining(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	shared := checkpoints.New(f.st, f.layout, slog.New(slog.DiscardHandler), true)
	m := f.create(t, "m")
	j := f.claim(t, m)
	work := f.layout.WorkDir(m.ID, j.ID+".1")
	writeAdapter(work)
	publishing := f.layout.CheckpointDir(m.ID, 1) // renamed, row not yet committed
	writeAdapter(publishing)
	if err := shared.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if !exists(work) || !exists(publishing) {
		t.Fatalf("a live run's folders were swept: work %v, step-1 %v", exists(work), exists(publishing))
	}
	if err := f.st.FinishJob(ctx, j.ID, store.StatusFailed, "node died"); err != nil {
		t.Fatal(err)
	}
	if err := shared.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if exists(work) || exists(publishing) || !exists(f.layout.CheckpointDir(m.ID, 0)) {
		t.Errorf("after the run: work %v, step-1 %v, step-0 %v", exists(work), exists(publishing), exists(f.layout.CheckpointDir(m.ID, 0)))
	}
}

// trained creates model m, claims a job of it, and writes the job's work
// folder with an adapter, as a finished run leaves it.
func (f *fixture) trained(t *testing.T) (store.TrainedModel, store.Job, string) {
	t.Helper()
	m := f.create(t, "m")
	j := f.claim(t, m)
	work, err := f.ck.WorkDir(m.ID, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeAdapter(work); err != nil {
		t.Fatal(err)
	}
	return m, j, work
}

// A record that commits but answers an error (the database restarting as
// it answers) is a publish: the step's folder stays with its row.
func TestPublishLostAnswer(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	m, j, _ := f.trained(t)
	dir, err := f.ck.Publish(m.ID, j.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	// The record commits, but its answer is lost (the database restarting
	// as it answers): the queue sees an error and calls Unpublish.
	if _, err := completeJob(ctx, f.st, j.Lease(), store.Checkpoint{ModelID: m.ID, Step: 1, Dir: dir}, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.ck.Unpublish(m.ID, 1, dir, errors.New("unexpected EOF")); err != nil {
		t.Fatalf("unpublish of a step whose commit went through: %v", err)
	}
	if !exists(filepath.Join(dir, checkpoints.AdapterFile)) {
		t.Fatal("the recorded step's folder was removed")
	}
	if ck, err := f.st.LatestCheckpoint(ctx, m.ID); err != nil || ck.Step != 1 || ck.Dir != dir {
		t.Errorf("latest checkpoint %+v %v", ck, err)
	}
}
