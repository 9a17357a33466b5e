package train

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	"flywheel/internal/atomicfile"
	"flywheel/internal/jobs"
	"flywheel/internal/rl"
	"flywheel/internal/store"
)

// writeTrained writes what an RL job trained on (rl.Summarize) into the new
// checkpoint's folder as rl.TrajectoriesFile, so the checkpoint keeps its
// provenance after the request body is deleted.
func writeTrained(job jobs.Job, req rl.Request) error {
	if job.OutDir == "" {
		return nil
	}
	b, err := json.Marshal(rl.Summarize(job.ID, req))
	if err != nil {
		return fmt.Errorf("trajectories summary: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(job.OutDir, rl.TrajectoriesFile), b, store.FileMode); err != nil {
		return fmt.Errorf("write trajectories summary: %w", err)
	}
	return nil
}
