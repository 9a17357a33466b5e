package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
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

// WriteFileAtomic writes data to path through a temp file in the same
// folder, renamed into place, so a crash never leaves a partial file. With
// sync the data is flushed to disk before the rename; without, the file
// survives a crash of the process (like a commit of the database, which runs
// with synchronous=NORMAL) but not necessarily a power loss.
func WriteFileAtomic(path string, data []byte, sync bool) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}

// BaseModels lists the base models under modelsDir: every folder holding a
// config.json, by its slash-separated path relative to modelsDir (e.g.
// "Qwen/Qwen2.5-0.5B-Instruct"), sorted. Hidden folders are skipped; a
// missing modelsDir lists nothing.
func BaseModels(modelsDir string) ([]string, error) {
	out := []string{}
	err := filepath.WalkDir(modelsDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == modelsDir && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if path != modelsDir && strings.HasPrefix(d.Name(), ".") {
			return fs.SkipDir
		}
		rel, _ := filepath.Rel(modelsDir, path)
		if strings.Count(rel, string(filepath.Separator)) > 4 {
			return fs.SkipDir
		}
		if _, err := os.Stat(filepath.Join(path, "config.json")); err == nil && path != modelsDir {
			out = append(out, filepath.ToSlash(rel))
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(out)
	return out, nil
}

// BaseModelDir returns the folder of base model id under modelsDir, or an
// error wrapping ErrNotFound when id is not a clean relative path to a
// folder holding config.json.
func BaseModelDir(modelsDir, id string) (string, error) {
	if id == "" || strings.HasPrefix(id, "/") || strings.Contains(id, "\\") || path.Clean(id) != id || strings.HasPrefix(id, "..") || strings.HasPrefix(id, ".") {
		return "", fmt.Errorf("base model %q: %w", id, ErrNotFound)
	}
	dir := filepath.Join(modelsDir, filepath.FromSlash(id))
	if st, err := os.Stat(filepath.Join(dir, "config.json")); err != nil || st.IsDir() {
		return "", fmt.Errorf("base model %q: %w", id, ErrNotFound)
	}
	return dir, nil
}
