package engine

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// Registry finds and loads the models of a models dir. Each base model is
// loaded once and shared by everyone who asks for it (training and
// serving); concurrent Gets of one id wait for a single load. Safe for
// concurrent use.
type Registry struct {
	dir string

	mu      sync.Mutex
	entries map[string]*regEntry
}

type regEntry struct {
	done chan struct{}
	m    *Model
	err  error
}

// NewRegistry returns a registry over modelsDir (which may not exist yet).
func NewRegistry(modelsDir string) *Registry {
	return &Registry{dir: modelsDir, entries: map[string]*regEntry{}}
}

// Dir is the models dir.
func (r *Registry) Dir() string { return r.dir }

// List returns the ids of every folder below the models dir that holds a
// config.json (the id is the relative path with '/' separators, e.g.
// "flywheel/tiny" or "Qwen/Qwen2.5-0.5B-Instruct"), sorted, plus the ids
// of models added with Put. Hidden folders (names starting with '.') are
// skipped, and folders below a model folder are not searched.
func (r *Registry) List() ([]string, error) {
	seen := map[string]bool{}
	var ids []string
	err := filepath.WalkDir(r.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == r.dir && os.IsNotExist(err) {
				return fs.SkipAll
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if p != r.dir && strings.HasPrefix(d.Name(), ".") {
			return fs.SkipDir
		}
		if _, err := os.Stat(filepath.Join(p, "config.json")); err == nil && p != r.dir {
			rel, err := filepath.Rel(r.dir, p)
			if err != nil {
				return err
			}
			id := filepath.ToSlash(rel)
			seen[id] = true
			ids = append(ids, id)
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("engine: list models: %w", err)
	}
	r.mu.Lock()
	for id, e := range r.entries {
		select {
		case <-e.done:
			if e.m != nil && !seen[id] {
				ids = append(ids, id)
			}
		default:
		}
	}
	r.mu.Unlock()
	sort.Strings(ids)
	return ids, nil
}

// ValidID reports whether id is a well-formed model id: a relative
// '/'-separated path without empty, "." or ".." elements.
func ValidID(id string) bool {
	if id == "" || strings.ContainsAny(id, "\\\x00") || strings.HasPrefix(id, "/") {
		return false
	}
	for _, e := range strings.Split(id, "/") {
		if e == "" || e == "." || e == ".." || strings.HasPrefix(e, ".") {
			return false
		}
	}
	return path.Clean(id) == id
}

// Get returns the model with id, loading it on first use. A failed load
// is not remembered: the next Get tries again.
func (r *Registry) Get(id string) (*Model, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("engine: invalid model id %q", id)
	}
	r.mu.Lock()
	e, ok := r.entries[id]
	if !ok {
		e = &regEntry{done: make(chan struct{})}
		r.entries[id] = e
		r.mu.Unlock()
		e.m, e.err = r.load(id)
		if e.err != nil {
			r.mu.Lock()
			delete(r.entries, id)
			r.mu.Unlock()
		}
		close(e.done)
		return e.m, e.err
	}
	r.mu.Unlock()
	<-e.done
	if e.err == nil {
		return e.m, nil
	}
	return nil, e.err
}

func (r *Registry) load(id string) (m *Model, err error) {
	defer func() {
		if p := recover(); p != nil {
			m, err = nil, fmt.Errorf("engine: load model %s: %v", id, p)
		}
	}()
	dir := filepath.Join(r.dir, filepath.FromSlash(id))
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("engine: model %q not found in %s", id, r.dir)
		}
		return nil, fmt.Errorf("engine: model %q: %w", id, err)
	}
	m, err = Load(dir)
	if err != nil {
		return nil, err
	}
	m.ID = id
	return m, nil
}

// Put adds an already loaded model under m.ID (tests, in-memory models),
// replacing any entry of that id.
func (r *Registry) Put(m *Model) {
	e := &regEntry{done: make(chan struct{}), m: m}
	close(e.done)
	r.mu.Lock()
	r.entries[m.ID] = e
	r.mu.Unlock()
}

// Loaded returns the models loaded so far, sorted by id.
func (r *Registry) Loaded() []*Model {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ms []*Model
	for _, e := range r.entries {
		select {
		case <-e.done:
			if e.m != nil {
				ms = append(ms, e.m)
			}
		default:
		}
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].ID < ms[j].ID })
	return ms
}
