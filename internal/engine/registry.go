package engine

import (
	"fmt"
	"sort"
	"sync"

	"flywheel/internal/basemodels"
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

// List returns the ids of the base models in the models dir (see package
// basemodels for which folders count), plus the ids of models added with
// Put, sorted.
func (r *Registry) List() ([]string, error) {
	ids, err := basemodels.List(r.dir)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	seen := map[string]bool{}
	for _, id := range ids {
		seen[id] = true
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

// Get returns the model with id, loading it on first use. A failed load
// is not remembered: the next Get tries again.
func (r *Registry) Get(id string) (*Model, error) {
	if !basemodels.ValidID(id) {
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
	dir, err := basemodels.Dir(r.dir, id)
	if err != nil {
		return nil, fmt.Errorf("engine: model %q not found in %s", id, r.dir)
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
