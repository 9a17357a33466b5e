package store

import (
	"context"
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

// OpenDataDir opens the store of a data dir: it makes dataDir absolute,
// creates it when missing, and opens the database dbURL (see Open), or
// <dataDir>/flywheel.db when dbURL is empty. It returns the layout of the
// absolute data dir beside the store.
func OpenDataDir(ctx context.Context, dataDir, dbURL string) (*SQLite, Layout, error) {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, Layout{}, fmt.Errorf("data dir: %w", err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, Layout{}, fmt.Errorf("create data dir: %w", err)
	}
	if dbURL == "" {
		dbURL = filepath.Join(abs, "flywheel.db")
	}
	st, err := Open(ctx, dbURL)
	if err != nil {
		return nil, Layout{}, err
	}
	return st.(*SQLite), Layout{DataDir: abs}, nil
}
