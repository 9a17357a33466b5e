// Package basemodels is the one place that knows which paths of the models
// dir are base models, named by their slash-separated path relative to the
// models dir:
//
//   - every folder holding a config.json (a Hugging Face model folder),
//     e.g. "flywheel/tiny" or "Qwen/Qwen2.5-0.5B-Instruct";
//   - every GGUF file (a name ending in ".gguf"), e.g.
//     "SmolLM2-135M-Instruct.Q4_1.gguf";
//   - every folder without a config.json holding exactly one GGUF file,
//     e.g. "smollm2" for smollm2/SmolLM2-135M-Instruct.Q4_1.gguf (the
//     file's own id names it too, but only the folder is listed).
//
// The engine's registry (which loads them), the HTTP layer (which checks a
// new model's base) and the health check all go through it, so they agree
// on the rules.
//
// The rules: hidden entries (a name starting with '.') are never models and
// never searched, which also hides the temporary files and folders of
// atomic writes; folders below a model folder are not searched; ids have at
// most MaxDepth elements.
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

// Dir returns the path of base model id under modelsDir: its folder (a
// Hugging Face model) or its GGUF file (for a folder holding one, that
// file). It returns an error wrapping ErrNotFound when id is not a valid id
// of a base model.
func Dir(modelsDir, id string) (string, error) {
	if !ValidID(id) {
		return "", fmt.Errorf("base model %q: %w", id, ErrNotFound)
	}
	p := filepath.Join(modelsDir, filepath.FromSlash(id))
	path, ok := modelPath(p)
	if !ok {
		return "", fmt.Errorf("base model %q in %s: %w", id, modelsDir, ErrNotFound)
	}
	return path, nil
}

// IsGGUF reports whether name is a GGUF file's name (by its extension).
func IsGGUF(name string) bool { return strings.EqualFold(filepath.Ext(name), ".gguf") }

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
		if p == modelsDir {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(modelsDir, p)
		if err != nil {
			return err
		}
		if !d.IsDir() {
			// A GGUF file, unless its folder is itself listed as its model.
			if _, ok := modelPath(p); ok && !folderIsModel(filepath.Dir(p), modelsDir) {
				ids = append(ids, filepath.ToSlash(rel))
			}
			return nil
		}
		if _, ok := modelPath(p); ok {
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

// folderIsModel reports whether dir (below modelsDir) is a model folder.
func folderIsModel(dir, modelsDir string) bool {
	if dir == modelsDir {
		return false
	}
	_, ok := modelPath(dir)
	return ok
}

// modelPath reports whether p is a base model and returns the path to load:
// p itself for a folder holding a config.json or for a GGUF file, the one
// GGUF file inside for a folder holding exactly one (and no config.json).
func modelPath(p string) (string, bool) {
	st, err := os.Stat(p)
	if err != nil {
		return "", false
	}
	if !st.IsDir() {
		return p, st.Mode().IsRegular() && IsGGUF(p)
	}
	if cst, err := os.Stat(filepath.Join(p, "config.json")); err == nil && !cst.IsDir() {
		return p, true
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return "", false
	}
	found := ""
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || !IsGGUF(e.Name()) {
			continue
		}
		if st, err := os.Stat(filepath.Join(p, e.Name())); err != nil || !st.Mode().IsRegular() {
			continue
		}
		if found != "" {
			return "", false // several: each is its own model
		}
		found = filepath.Join(p, e.Name())
	}
	return found, found != ""
}
