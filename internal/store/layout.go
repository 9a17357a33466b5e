package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Layout names the files flywheel keeps under its data dir:
//
//	<data-dir>/checkpoints/<model_id>/step-<N>/   a checkpoint (PEFT adapter + optimizer state)
//	<data-dir>/checkpoints/<model_id>/.tmp-*      work folders, renamed into place when complete
//	<data-dir>/requests/<job_id>.json             a training job's request body as sent
//	<data-dir>/files/<file_id>                    an uploaded file
//	<data-dir>/runs/<run_id>/v<N>/                 learner version N of a training run (adapter + optimizer)
type Layout struct {
	DataDir string // absolute
}

// ModelDir is the folder holding all checkpoints of a model.
func (l Layout) ModelDir(modelID string) string {
	return filepath.Join(l.DataDir, "checkpoints", modelID)
}

// CheckpointDir is the folder of one checkpoint.
func (l Layout) CheckpointDir(modelID string, step int) string {
	return filepath.Join(l.ModelDir(modelID), fmt.Sprintf("step-%d", step))
}

// WorkDir is the temp folder a job writes its checkpoint into before the
// rename.
func (l Layout) WorkDir(modelID, jobID string) string {
	return filepath.Join(l.ModelDir(modelID), ".tmp-"+jobID)
}

// RequestPath is where a job's request body is stored.
func (l Layout) RequestPath(jobID string) string {
	return filepath.Join(l.DataDir, "requests", jobID+".json")
}

// FilePath is where an uploaded file's bytes are stored.
func (l Layout) FilePath(fileID string) string {
	return filepath.Join(l.DataDir, "files", fileID)
}

// RunsDir holds a folder per training run.
func (l Layout) RunsDir() string { return filepath.Join(l.DataDir, "runs") }

// RunVersionDir is the folder of learner version N of a training run
// (internal/runs): its adapter and optimizer state.
func (l Layout) RunVersionDir(runID string, version int) string {
	return filepath.Join(l.RunsDir(), runID, fmt.Sprintf("v%d", version))
}

// RunWorkDir is the temp folder node writes a run's learner version into
// before the rename (one per node: a node that lost the run's lease may
// still be writing while its successor redoes the version).
func (l Layout) RunWorkDir(runID string, version int, node string) string {
	return filepath.Join(l.RunsDir(), runID, fmt.Sprintf(".tmp-v%d-%s", version, node))
}

// OpenDataDir opens the store of a data dir: it makes dataDir absolute,
// creates it and its folders when missing, readable by this user only
// (DirMode, tightened when they exist with more), and opens the database dbURL (see Open), or
// <dataDir>/flywheel.db when dbURL is empty. It returns the layout of the
// absolute data dir beside the store.
func OpenDataDir(ctx context.Context, dataDir, dbURL string) (Database, Layout, error) {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, Layout{}, fmt.Errorf("data dir: %w", err)
	}
	l := Layout{DataDir: abs}
	if err := l.prepare(); err != nil {
		return nil, Layout{}, err
	}
	if dbURL == "" {
		dbURL = filepath.Join(abs, "flywheel.db")
	}
	st, err := Open(ctx, dbURL)
	if err != nil {
		return nil, Layout{}, err
	}
	return st, l, nil
}

// Modes of what the service keeps under its data dir: readable by its own
// user only (tenants' request bodies, uploads and adapters, the database
// with its key hashes).
const (
	DirMode  = 0o700
	FileMode = 0o600
)

// prepare creates the data dir and its folders with DirMode, and takes
// group and other permissions away from them when they exist with more.
func (l Layout) prepare() error {
	for _, d := range []string{l.DataDir, filepath.Join(l.DataDir, "checkpoints"),
		filepath.Join(l.DataDir, "requests"), filepath.Join(l.DataDir, "files"), filepath.Join(l.DataDir, "runs")} {
		if err := os.MkdirAll(d, DirMode); err != nil {
			return fmt.Errorf("create data dir: %w", err)
		}
		if err := tighten(d, DirMode); err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
	}
	return nil
}

// tighten removes the permission bits of path outside mode (it never adds
// any); a path that does not exist is left alone.
func tighten(path string, mode os.FileMode) error {
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode().Perm()&^mode != 0 {
		return os.Chmod(path, st.Mode().Perm()&mode)
	}
	return nil
}
