// Package checkpoints owns the lifecycle of checkpoint folders: it creates a
// new model's step 0, publishes a job's output as step N+1, deletes
// checkpoints and models, and sweeps what crashed runs left behind. It is the
// only code that renames or removes checkpoint folders; the HTTP handlers
// and the job queue call it, and it keeps the folders (named by
// store.Layout) and the checkpoint rows of the store in step.
//
// The invariant it keeps: a step-<N> folder is complete before its row
// exists (folders are only ever published by rename), and a row's folder is
// removed only after the row is gone. A crash between the two steps leaves a
// folder with no row, or a work folder (.tmp-*), which Sweep removes at the
// next start; so does a run that lost its lease while retrying its record.
package checkpoints

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"flywheel/internal/store"
)

// AdapterFile is the file every published checkpoint holds: the PEFT
// adapter weights (adapter_config.json and optimizer state sit beside it).
const AdapterFile = "adapter_model.safetensors"

// createWork names the work folder of a model's step 0.
const createWork = "create"

// Store is what the lifecycle reads and writes: models and checkpoints,
// and whether a model is in training (Sweep).
type Store interface {
	store.Models
	ModelTraining(ctx context.Context, modelID string) (bool, error)
}

// Manager runs the checkpoint lifecycle over a store and a data dir. Safe
// for concurrent use; it keeps no state of its own.
type Manager struct {
	st     Store
	layout store.Layout
	log    *slog.Logger
	shared bool
}

// New returns a manager of the checkpoints under layout's data dir, whose
// rows live in st. log may be nil (slog.Default). shared says that other
// nodes use the same store and data dir (see Sweep).
func New(st Store, layout store.Layout, log *slog.Logger, shared bool) *Manager {
	if log == nil {
		log = slog.Default()
	}
	return &Manager{st: st, layout: layout, log: log, shared: shared}
}

// AdapterError is returned by Create when the step-0 adapter could not be
// written: the base model does not fit the requested adapter, or its
// config is unreadable. Err is the writer's error.
type AdapterError struct{ Err error }

func (e *AdapterError) Error() string { return "write the step-0 adapter: " + e.Err.Error() }
func (e *AdapterError) Unwrap() error { return e.Err }

// Create makes a new model with its step 0: writeAdapter fills an empty
// work folder with the untrained adapter, the folder is renamed to step-0,
// and the model and its step-0 checkpoint are inserted in one transaction.
// On any failure the model's folder is removed. A writeAdapter failure is an
// *AdapterError; store errors (ErrConflict for a taken name) are wrapped.
func (m *Manager) Create(ctx context.Context, model store.TrainedModel, writeAdapter func(dir string) error) (store.TrainedModel, error) {
	modelDir := m.layout.ModelDir(model.ID)
	work := m.layout.WorkDir(model.ID, createWork)
	final := m.layout.CheckpointDir(model.ID, 0)
	if err := store.EmptyDir(work); err != nil {
		return store.TrainedModel{}, fmt.Errorf("create the folder of model %s: %w", model.ID, err)
	}
	if err := writeAdapter(work); err != nil {
		m.removeAll(modelDir, "model_id", model.ID)
		return store.TrainedModel{}, &AdapterError{Err: err}
	}
	if err := private(work); err != nil {
		m.removeAll(modelDir, "model_id", model.ID)
		return store.TrainedModel{}, fmt.Errorf("publish step 0 of model %s: %w", model.ID, err)
	}
	if err := store.PublishDir(work, final); err != nil {
		m.removeAll(modelDir, "model_id", model.ID)
		return store.TrainedModel{}, fmt.Errorf("publish step 0 of model %s: %w", model.ID, err)
	}
	created, err := m.st.CreateModel(ctx, model, store.Checkpoint{Step: 0, Dir: final})
	if err != nil {
		m.removeAll(modelDir, "model_id", model.ID)
		return store.TrainedModel{}, fmt.Errorf("create model %s: %w", model.ID, err)
	}
	return created, nil
}

// WorkDir returns an empty work folder for job jobID's new checkpoint of
// model modelID (what it held from an earlier attempt is removed). Publish
// renames it into place; Discard removes it.
func (m *Manager) WorkDir(modelID, jobID string) (string, error) {
	dir := m.layout.WorkDir(modelID, jobID)
	if err := store.EmptyDir(dir); err != nil {
		return "", fmt.Errorf("prepare work folder: %w", err)
	}
	return dir, nil
}

// Discard removes job jobID's work folder; nothing is left to remove after
// a successful Publish.
func (m *Manager) Discard(modelID, jobID string) {
	m.removeAll(m.layout.WorkDir(modelID, jobID), "model_id", modelID, "job_id", jobID)
}

// Publish makes job jobID's work folder checkpoint step of model modelID
// and returns the checkpoint's folder: it checks that the folder holds the
// adapter, replaces a stale step folder left by a crash, and renames the
// work folder into place. It checks no fence and records no row, so that
// it never calls back into its caller: the caller holds its fence from
// before Publish until the checkpoint's row is committed, and calls
// Unpublish when that fails. The job queue's fence is the run's lease
// (store.Jobs.LockLease keeps the job's row locked until the transaction
// that records the checkpoint commits), so no other node can claim the job
// again, and so publish the same step, while this one renames and
// records; a run whose lease was taken over can do neither. A caller whose
// record failed transiently may leave the folder published and record it
// again under a later fence (the job queue does, within the run's lease):
// that fence tells whether the failed record committed.
func (m *Manager) Publish(modelID, jobID string, step int) (string, error) {
	work := m.layout.WorkDir(modelID, jobID)
	if _, err := os.Stat(filepath.Join(work, AdapterFile)); err != nil {
		return "", fmt.Errorf("trainer wrote no %s: %w", AdapterFile, err)
	}
	if err := private(work); err != nil {
		return "", fmt.Errorf("publish step %d: %w", step, err)
	}
	dst := m.layout.CheckpointDir(modelID, step)
	// A folder at dst has no row (rows are recorded after the rename): it is
	// left by a crash between rename and commit, and is stale.
	if err := store.PublishDir(work, dst); err != nil {
		return "", fmt.Errorf("publish step %d: %w", step, err)
	}
	return dst, nil
}

// Unpublish is for a step Publish renamed into place whose row's record
// answered err: it reads the step back, and when its row is there with the
// folder (the commit went through while its answer was lost, as when the
// database restarts as it answers) the publish stands and it returns nil;
// when there is no row it removes the folder and returns err; when the
// store cannot answer it leaves the folder (without a row it is stale: the
// next publish of the step replaces it, the start-up sweep removes it) and
// returns err. Removing the folder of a recorded step would leave a
// checkpoint row without its files.
func (m *Manager) Unpublish(modelID string, step int, dir string, err error) error {
	switch m.recorded(modelID, step, dir) {
	case yes:
		m.log.Warn("recording a checkpoint answered an error, but its row is there: published", "model_id", modelID, "step", step, "err", err)
		return nil
	case no:
		m.removeAll(dir, "model_id", modelID, "step", step)
	}
	return err
}

type answer int

const (
	unknown answer = iota
	yes
	no
)

// recorded reads whether step of model modelID has its row with folder dir,
// retrying for a few seconds while the store cannot answer. A record whose
// commit went through can still return an error (the database restarting
// as it answers): removing the folder then would leave a checkpoint row
// without its files.
func (m *Manager) recorded(modelID string, step int, dir string) answer {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		ck, err := m.st.CheckpointByStep(ctx, modelID, step)
		switch {
		case err == nil && ck.Dir == dir:
			return yes
		case err == nil || errors.Is(err, store.ErrNotFound):
			return no
		}
		select {
		case <-ctx.Done():
			return unknown
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// DeleteModel deletes model id with its checkpoints, jobs and metrics, then
// its folder, and returns the deleted checkpoints. Store errors are returned
// as they are (ErrConflict while a job of the model runs); a folder that
// cannot be removed is logged and left to Sweep's warning.
func (m *Manager) DeleteModel(ctx context.Context, id string) ([]store.Checkpoint, error) {
	cks, err := m.st.DeleteModel(ctx, id)
	if err != nil {
		return nil, err
	}
	m.removeAll(m.layout.ModelDir(id), "model_id", id)
	return cks, nil
}

// Delete deletes the given steps of model modelID, rows first, then their
// folders. It returns the deleted checkpoints and the steps that did not
// exist; store errors are returned as they are (ErrConflict when a step is
// what a running job trains from).
func (m *Manager) Delete(ctx context.Context, modelID string, steps []int) ([]store.Checkpoint, []int, error) {
	deleted, notFound, err := m.st.DeleteCheckpoints(ctx, modelID, steps)
	if err != nil {
		return nil, nil, err
	}
	for _, c := range deleted {
		m.removeAll(m.layout.CheckpointDir(modelID, c.Step), "model_id", modelID, "step", c.Step)
	}
	return deleted, notFound, nil
}

// Sweep removes what crashed runs left under the checkpoints folder: work
// folders (.tmp-*: a job or a model creation cut short), and step folders of
// a known model with no checkpoint row (a crash between a publish's rename
// and its commit, or between a delete's commit and the removal). Folders of
// models the store does not know are only reported: they may belong to
// another database pointed at this data dir, so nothing is inferred from a
// missing row there.
//
// Call it at start-up, before jobs run or requests are served: every work
// folder is taken for a leftover. With other nodes on the same data dir
// (shared), the models in training are left alone (their work folders and
// the step a job is publishing belong to a live run), and a step folder is
// removed only if, checked after that, it still has no row.
func (m *Manager) Sweep(ctx context.Context) error {
	models, err := store.ListDir(m.layout.CheckpointsDir())
	if err != nil {
		return fmt.Errorf("sweep checkpoints: %w", err)
	}
	for _, md := range models {
		if !md.IsDir() {
			continue
		}
		if err := m.sweepModel(ctx, md.Name()); err != nil {
			return fmt.Errorf("sweep checkpoints of model %s: %w", md.Name(), err)
		}
	}
	return nil
}

func (m *Manager) sweepModel(ctx context.Context, modelID string) error {
	dir := m.layout.ModelDir(modelID)
	entries, err := store.ListDir(dir)
	if err != nil {
		return err
	}
	known := true
	if _, err := m.st.ModelByID(ctx, modelID); errors.Is(err, store.ErrNotFound) {
		known = false
	} else if err != nil {
		return err
	}
	if known && m.shared {
		if training, err := m.st.ModelTraining(ctx, modelID); err != nil || training {
			return err
		}
	}
	rows := map[int]bool{}
	if known {
		cks, _, err := m.st.ListCheckpoints(ctx, modelID, store.Page{Limit: -1})
		if err != nil {
			return err
		}
		for _, c := range cks {
			rows[c.Step] = true
		}
	}
	for _, e := range entries {
		name := e.Name()
		if store.IsWork(name) {
			m.log.Info("removing a work folder left by an interrupted run", "model_id", modelID, "folder", name)
			m.removeAll(filepath.Join(dir, name), "model_id", modelID)
			continue
		}
		step, ok := store.StepOf(name)
		if !ok || !e.IsDir() {
			continue
		}
		if !known {
			m.log.Warn("checkpoint folder of a model the database does not know; left in place", "model_id", modelID, "folder", name)
			continue
		}
		if !rows[step] && m.stillOrphan(ctx, modelID, step) {
			m.log.Info("removing a checkpoint folder with no checkpoint row", "model_id", modelID, "step", step)
			m.removeAll(filepath.Join(dir, name), "model_id", modelID, "step", step)
		}
	}
	return nil
}

// stillOrphan re-checks, on a shared data dir, that a step folder found
// without a row has none now and that no job of the model runs (checked in
// that order: a publish renames while its job runs, and commits the row and
// the job's end together), so a publish by another node is never taken for
// a leftover.
func (m *Manager) stillOrphan(ctx context.Context, modelID string, step int) bool {
	if !m.shared {
		return true
	}
	if training, err := m.st.ModelTraining(ctx, modelID); err != nil || training {
		return false
	}
	_, err := m.st.CheckpointByStep(ctx, modelID, step)
	return errors.Is(err, store.ErrNotFound)
}

// private makes a checkpoint folder readable by the service's user only
// before it is published: folders 0700, files 0600 (the engine writes them
// world-readable). Adapters are tenants' data.
func private(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.Chmod(path, 0o700)
		case d.Type().IsRegular():
			return os.Chmod(path, 0o600)
		}
		return nil
	})
}

// removeAll removes a folder, logging (with the attributes) when it cannot:
// what is left is garbage that the next Sweep retries, never state.
func (m *Manager) removeAll(dir string, attrs ...any) {
	if err := os.RemoveAll(dir); err != nil {
		m.log.Error("remove checkpoint files", append(attrs, "dir", dir, "err", err)...)
	}
}
