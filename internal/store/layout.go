package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"flywheel/internal/atomicfile"
)

// Layout names the files flywheel keeps under its data dir; it is the one
// place their paths are spelled:
//
//	<data-dir>/flywheel.db                        the SQLite database (none with PostgreSQL)
//	<data-dir>/admin-api-key                      the bootstrap key, when generated
//	<data-dir>/models/                            base models, unless --models-dir says elsewhere
//	<data-dir>/checkpoints/<model_id>/step-<N>/   a checkpoint (PEFT adapter + optimizer state)
//	<data-dir>/checkpoints/<model_id>/.tmp-*      work folders, renamed into place when complete
//	<data-dir>/requests/<job_id>.json             a training job's request body as sent
//	<data-dir>/files/<file_id>                    an uploaded file
//	<data-dir>/runs/<run_id>/v<N>/                learner version N of a training run (adapter + optimizer)
//	<data-dir>/runs/<run_id>/.tmp-v<N>-<node>/    a node's work folder for version N
//
// Work folders and atomicfile's temporary files share one prefix
// (atomicfile.TempPrefix; IsWork), so one rule finds crash leftovers.
type Layout struct {
	DataDir string // absolute
}

// Folder names under the data dir.
const (
	checkpointsDir = "checkpoints"
	requestsDir    = "requests"
	filesDir       = "files"
	runsDir        = "runs"
	stepPrefix     = "step-"
)

// DatabasePath is the SQLite database's file.
func (l Layout) DatabasePath() string { return filepath.Join(l.DataDir, "flywheel.db") }

// AdminKeyPath is the file of a generated bootstrap admin key.
func (l Layout) AdminKeyPath() string { return filepath.Join(l.DataDir, "admin-api-key") }

// DefaultModelsDir is the models dir when none is configured.
func (l Layout) DefaultModelsDir() string { return filepath.Join(l.DataDir, "models") }

// CheckpointsDir holds a folder per model (ModelDir).
func (l Layout) CheckpointsDir() string { return filepath.Join(l.DataDir, checkpointsDir) }

// ModelDir is the folder holding all checkpoints of a model.
func (l Layout) ModelDir(modelID string) string {
	return filepath.Join(l.CheckpointsDir(), modelID)
}

// CheckpointDir is the folder of one checkpoint.
func (l Layout) CheckpointDir(modelID string, step int) string {
	return filepath.Join(l.ModelDir(modelID), stepPrefix+strconv.Itoa(step))
}

// StepOf parses the name of a checkpoint folder (CheckpointDir's last
// element): "step-<N>" with N >= 0 in canonical decimal.
func StepOf(name string) (step int, ok bool) {
	s, ok := strings.CutPrefix(name, stepPrefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || strconv.Itoa(n) != s {
		return 0, false
	}
	return n, true
}

// WorkDir is the temp folder a job writes its checkpoint into before the
// rename.
func (l Layout) WorkDir(modelID, jobID string) string {
	return filepath.Join(l.ModelDir(modelID), atomicfile.TempPrefix+jobID)
}

// IsWork reports whether a folder entry's name is a work folder (WorkDir,
// RunWorkDir) or an atomicfile temporary file: a crash's leftover unless
// its writer is still running.
func IsWork(name string) bool { return strings.HasPrefix(name, atomicfile.TempPrefix) }

// RequestsDir holds the request bodies (RequestPath).
func (l Layout) RequestsDir() string { return filepath.Join(l.DataDir, requestsDir) }

// RequestPath is where a job's request body is stored.
func (l Layout) RequestPath(jobID string) string {
	return filepath.Join(l.RequestsDir(), jobID+".json")
}

// FilesDir holds the uploaded files (FilePath).
func (l Layout) FilesDir() string { return filepath.Join(l.DataDir, filesDir) }

// FilePath is where an uploaded file's bytes are stored.
func (l Layout) FilePath(fileID string) string {
	return filepath.Join(l.FilesDir(), fileID)
}

// RunsDir holds a folder per training run (RunDir).
func (l Layout) RunsDir() string { return filepath.Join(l.DataDir, runsDir) }

// RunDir holds a training run's learner versions and work folders.
func (l Layout) RunDir(runID string) string { return filepath.Join(l.RunsDir(), runID) }

// RunVersionDir is the folder of learner version N of a training run
// (internal/runs): its adapter and optimizer state.
func (l Layout) RunVersionDir(runID string, version int) string {
	return filepath.Join(l.RunDir(runID), fmt.Sprintf("v%d", version))
}

// RunWorkDir is the temp folder node writes a run's learner version into
// before the rename (one per node: a node that lost the run's lease may
// still be writing while its successor redoes the version).
func (l Layout) RunWorkDir(runID string, version int, node string) string {
	return filepath.Join(l.RunDir(runID), fmt.Sprintf("%sv%d-%s", atomicfile.TempPrefix, version, node))
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
		dbURL = l.DatabasePath()
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
	for _, d := range []string{l.DataDir, l.CheckpointsDir(), l.RequestsDir(), l.FilesDir(), l.RunsDir()} {
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
