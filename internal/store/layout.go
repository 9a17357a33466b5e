package store

import (
	"fmt"
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
