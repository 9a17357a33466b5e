package infer

import (
	"container/list"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"flywheel/internal/engine"
)

// AdapterCache is an LRU cache of loaded LoRA adapters, safe for concurrent
// use.
type AdapterCache struct {
	mu      sync.Mutex
	cap     int
	entries map[string]*adapterEntry
	order   *list.List // front: most recently used
	loads   atomic.Int64
}

type adapterEntry struct {
	key   string
	ready chan struct{}
	a     *engine.Adapter
	err   error
	elem  *list.Element
}

// NewAdapterCache returns a cache that keeps up to capacity adapters
// (at least one).
func NewAdapterCache(capacity int) *AdapterCache {
	return &AdapterCache{cap: max(capacity, 1), entries: map[string]*adapterEntry{}, order: list.New()}
}

// Get returns the adapter in folder dir for baseModel (of shape cfg),
// loading it once however many callers ask at the same time. A failed load
// is not cached.
func (c *AdapterCache) Get(baseModel, dir string, cfg *engine.Config) (*engine.Adapter, error) {
	key := adapterKey(baseModel, dir)
	c.mu.Lock()
	if e, ok := c.entries[key]; ok {
		c.order.MoveToFront(e.elem)
		c.mu.Unlock()
		<-e.ready
		return e.a, e.err
	}
	e := &adapterEntry{key: key, ready: make(chan struct{})}
	e.elem = c.order.PushFront(e)
	c.entries[key] = e
	for c.order.Len() > c.cap {
		old := c.order.Back().Value.(*adapterEntry)
		c.order.Remove(old.elem)
		delete(c.entries, old.key)
	}
	c.mu.Unlock()
	c.loads.Add(1)
	e.a, e.err = engine.LoadAdapter(dir, cfg)
	if e.err != nil {
		e.err = fmt.Errorf("infer: load adapter for %s: %w", baseModel, e.err)
	}
	close(e.ready)
	if e.err != nil {
		c.mu.Lock()
		if cur, ok := c.entries[key]; ok && cur == e {
			c.order.Remove(e.elem)
			delete(c.entries, key)
		}
		c.mu.Unlock()
	}
	return e.a, e.err
}

// Loads is the number of adapters loaded from disk (cache misses).
func (c *AdapterCache) Loads() int64 { return c.loads.Load() }

// adapterKey identifies a loaded adapter: its base model, folder, and the
// weights file's size and modification time, so a folder rewritten in place
// (a step deleted and trained again) is loaded afresh.
func adapterKey(base, dir string) string {
	key := base + "\x00" + dir
	if fi, err := os.Stat(filepath.Join(dir, engine.AdapterWeightsFile)); err == nil {
		key += fmt.Sprintf("\x00%d\x00%d", fi.Size(), fi.ModTime().UnixNano())
	}
	return key
}
