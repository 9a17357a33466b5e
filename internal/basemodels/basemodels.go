// Package basemodels is the one place that knows which folders of the models
// dir are base models: every folder holding a config.json (a Hugging Face
// model folder), named by its slash-separated path relative to the models
// dir, e.g. "flywheel/tiny" or "Qwen/Qwen2.5-0.5B-Instruct". The engine's
// registry (which loads them), the HTTP layer (which checks a new model's
// base) and the health check all go through it, so they agree on the rules.
//
// The rules: hidden folders (a name starting with '.') are never models and
// never searched, which also hides the temporary folders of atomic writes;
// folders below a model folder are not searched; ids have at most MaxDepth
// elements.
package basemodels

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

// MaxDepth is the most path elements a base model id has ("org/name" has
// two); deeper folders are not searched.
const MaxDepth = 5

// ErrNotFound is returned (wrapped) by Dir for an id that is malformed or
// names no base model folder.
var ErrNotFound = errors.New("base model not found")

// ValidID reports whether id is a well-formed base model id: a relative
// '/'-separated clean path of at most MaxDepth elements, none empty, "." or
// "..", none hidden.
func ValidID(id string) bool {
	if id == "" || strings.ContainsAny(id, "\\\x00") || strings.HasPrefix(id, "/") || path.Clean(id) != id {
		return false
	}
	elems := strings.Split(id, "/")
	if len(elems) > MaxDepth {
		return false
	}
	for _, e := range elems {
		if e == "" || strings.HasPrefix(e, ".") { // also "." and ".."
			return false
		}
	}
	return true
}

// Dir returns the folder of base model id under modelsDir, or an error
// wrapping ErrNotFound when id is not a valid id of a folder holding a
// config.json file.
func Dir(modelsDir, id string) (string, error) {
	if !ValidID(id) {
		return "", fmt.Errorf("base model %q: %w", id, ErrNotFound)
	}
	dir := filepath.Join(modelsDir, filepath.FromSlash(id))
	if !isModel(dir) {
		return "", fmt.Errorf("base model %q in %s: %w", id, modelsDir, ErrNotFound)
	}
	return dir, nil
}

// List returns the ids of the base models under modelsDir, sorted. A
// missing modelsDir lists nothing.
func List(modelsDir string) ([]string, error) {
	ids := []string{}
	err := filepath.WalkDir(modelsDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == modelsDir && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			return err
		}
		if !d.IsDir() || p == modelsDir {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			return fs.SkipDir
		}
		rel, err := filepath.Rel(modelsDir, p)
		if err != nil {
			return err
		}
		if isModel(p) {
			ids = append(ids, filepath.ToSlash(rel))
			return fs.SkipDir
		}
		if strings.Count(rel, string(filepath.Separator))+1 >= MaxDepth {
			return fs.SkipDir // a model below would have too long an id
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list base models in %s: %w", modelsDir, err)
	}
	sort.Strings(ids)
	return ids, nil
}

// isModel reports whether dir holds a config.json file.
func isModel(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, "config.json"))
	return err == nil && !st.IsDir()
}
