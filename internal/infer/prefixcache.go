package infer

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"
	"weak"

	"flywheel/internal/engine"
)

// PrefixBlockTokens is the granularity of the prefix cache: a block holds
// the keys and values of this many consecutive positions.
const PrefixBlockTokens = 16

// PrefixCache keeps the KV-cache blocks of prompts (and of the tokens
// generated after them) across requests, so that a request whose prompt
// begins with an earlier request's tokens prefills only the rest. It is
// shared by the schedulers of every base model and is safe for concurrent
// use.
//
// A block is keyed by its base model, its adapter and a SHA-256 hash of
// the whole token prefix up to the block's end (a chain: each block's hash
// covers its parent's), so a block is only ever used after the very same
// tokens on the same model and adapter. The adapter is identified by the
// loaded *engine.Adapter (held weakly): an adapter folder loaded again (a
// checkpoint rewritten in place, or evicted from the AdapterCache) starts
// with no blocks. Blocks are copies of the keys and values (float32); the
// least recently used are evicted to stay within the byte budget.
type PrefixCache struct {
	budget int64

	mu     sync.Mutex
	blocks map[blockKey]*kvBlock
	lru    list.List // of *kvBlock, front: most recently used
	used   int64

	inserted  atomic.Int64
	evictions atomic.Int64
}

// blockKey identifies a block: whose keys and values, after which tokens.
type blockKey struct {
	model   *engine.Model
	adapter weak.Pointer[engine.Adapter] // zero: the base model
	hash    prefixHash
}

type prefixHash [sha256.Size]byte

type kvBlock struct {
	key  blockKey
	kv   []float32 // engine.Seq.ExportKV layout; never modified once cached
	elem *list.Element
}

// NewPrefixCache returns a cache that keeps blocks up to budget bytes of
// keys and values; nil when budget is not positive (no cache).
func NewPrefixCache(budget int64) *PrefixCache {
	if budget <= 0 {
		return nil
	}
	return &PrefixCache{budget: budget, blocks: map[blockKey]*kvBlock{}}
}

// PrefixCacheStats describes a prefix cache's contents.
type PrefixCacheStats struct {
	Bytes     int64 // keys and values held
	Budget    int64 // the byte budget
	Blocks    int   // blocks held
	Inserted  int64 // blocks added so far
	Evictions int64 // blocks evicted to stay within the budget
}

// Stats returns the cache's figures.
func (c *PrefixCache) Stats() PrefixCacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return PrefixCacheStats{Bytes: c.used, Budget: c.budget, Blocks: len(c.blocks), Inserted: c.inserted.Load(), Evictions: c.evictions.Load()}
}

// blockHashes appends to hs the chained hashes of the full blocks of toks
// from block len(hs) on, up to nblocks blocks in all; the chain starts from
// scope (Request.CacheScope), so scopes never share blocks.
func blockHashes(hs []prefixHash, scope string, toks []int, nblocks int) []prefixHash {
	var buf [4 * PrefixBlockTokens]byte
	for i := len(hs); i < nblocks; i++ {
		h := sha256.New()
		if i > 0 {
			h.Write(hs[i-1][:])
		} else { // the chain starts from the request's cache scope
			binary.LittleEndian.PutUint32(buf[:4], uint32(len(scope)))
			h.Write(buf[:4])
			h.Write([]byte(scope))
		}
		for j, t := range toks[i*PrefixBlockTokens : (i+1)*PrefixBlockTokens] {
			binary.LittleEndian.PutUint32(buf[4*j:], uint32(t))
		}
		h.Write(buf[:])
		var sum prefixHash
		h.Sum(sum[:0])
		hs = append(hs, sum)
	}
	return hs
}

// lookup returns the cached blocks from block first on that continue the
// prefix whose block hashes are hs, in order, stopping at the first one
// not cached; they become the most recently used.
func (c *PrefixCache) lookup(m *engine.Model, a *engine.Adapter, hs []prefixHash, first int) [][]float32 {
	key := blockKey{model: m, adapter: weak.Make(a)}
	var out [][]float32
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := first; i < len(hs); i++ {
		key.hash = hs[i]
		b, ok := c.blocks[key]
		if !ok {
			break
		}
		out = append(out, b.kv)
	}
	// Touch the found blocks last-first, so the earlier blocks of a prefix,
	// which every longer prefix needs, are evicted after the later ones.
	for i := first + len(out) - 1; i >= first; i-- {
		key.hash = hs[i]
		c.lru.MoveToFront(c.blocks[key].elem)
	}
	return out
}

// insert caches blocks [first, len(hs)) of seq (whose positions hold the
// tokens the hashes hs, from block 0, were computed from), those not cached
// already.
func (c *PrefixCache) insert(seq *engine.Seq, m *engine.Model, hs []prefixHash, first int) {
	if first >= len(hs) {
		return
	}
	key := blockKey{model: m, adapter: weak.Make(seq.Adapter())}
	floats := PrefixBlockTokens * m.KVFloatsPerToken()
	size := int64(4 * floats)
	if size > c.budget {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := first; i < len(hs); i++ {
		key.hash = hs[i]
		if _, ok := c.blocks[key]; ok {
			continue
		}
		for c.used+size > c.budget {
			c.evictOldest()
		}
		b := &kvBlock{key: key, kv: seq.ExportKV(i*PrefixBlockTokens, (i+1)*PrefixBlockTokens, make([]float32, floats))}
		b.elem = c.lru.PushFront(b)
		c.blocks[key] = b
		c.used += size
		c.inserted.Add(1)
	}
	// The whole prefix becomes the most recently used, its earlier blocks
	// most of all (see lookup).
	for i := len(hs) - 1; i >= 0; i-- {
		key.hash = hs[i]
		if b, ok := c.blocks[key]; ok {
			c.lru.MoveToFront(b.elem)
		}
	}
}

func (c *PrefixCache) evictOldest() {
	b := c.lru.Back().Value.(*kvBlock)
	c.lru.Remove(b.elem)
	delete(c.blocks, b.key)
	c.used -= int64(4 * len(b.kv))
	c.evictions.Add(1)
}

// promptHashes returns the hashes of the full blocks of st's prompt.
func (st *seqState) promptHashes() []prefixHash {
	p := st.gen.req.Prompt
	st.hashes = blockHashes(st.hashes, st.gen.req.CacheScope, p, len(p)/PrefixBlockTokens)
	return st.hashes
}

// reusePrefix moves a prefilling sequence past the prompt blocks the cache
// holds beyond its position: their keys and values are copied in and
// their tokens are not prefilled. It runs before every step, so a request
// also picks up blocks that a concurrent request with the same prefix
// prefilled in the meantime. The prompt's last token is always prefilled
// (its logits are needed), so at most len(prompt)-1 tokens come from the
// cache.
func (s *Scheduler) reusePrefix(st *seqState) {
	p := st.gen.req.Prompt
	fed := len(p) - len(st.pending)
	usable := (len(p) - 1) / PrefixBlockTokens
	first := fed / PrefixBlockTokens
	if !st.looked {
		st.looked = true
		s.prefixLook.Add(1)
	}
	if first >= usable {
		return
	}
	kvs := s.opts.PrefixCache.lookup(s.m, st.seq.Adapter(), st.promptHashes()[:usable], first)
	if len(kvs) == 0 {
		return
	}
	st.seq.Truncate(first * PrefixBlockTokens)
	for _, kv := range kvs {
		st.seq.AppendKV(kv, PrefixBlockTokens)
	}
	end := (first + len(kvs)) * PrefixBlockTokens
	s.prefixToks.Add(int64(end - fed))
	if !st.hit {
		st.hit = true
		s.prefixHits.Add(1)
	}
	st.pending = p[end:]
	st.cached = max(st.cached, first+len(kvs))
}

// cachePrompt caches the prompt blocks a prefilling sequence has completed.
func (s *Scheduler) cachePrompt(st *seqState) {
	n := min(st.seq.Len(), len(st.gen.req.Prompt)) / PrefixBlockTokens
	if n <= st.cached {
		return
	}
	s.opts.PrefixCache.insert(st.seq, s.m, st.promptHashes()[:n], st.cached)
	st.cached = n
}

// cacheSequence caches the full blocks of an ended sequence, the generated
// tokens it has fed included (a multi-turn conversation sends them back
// as the next turn's prompt).
func (s *Scheduler) cacheSequence(st *seqState) {
	p := st.gen.req.Prompt
	n := st.seq.Len() / PrefixBlockTokens
	if n <= st.cached {
		return
	}
	toks := p
	if st.seq.Len() > len(p) {
		toks = slices.Clip(p)
		st.out.mu.Lock()
		for _, t := range st.out.toks[:st.seq.Len()-len(p)] {
			toks = append(toks, t.ID)
		}
		st.out.mu.Unlock()
	}
	hs := blockHashes(st.promptHashes(), st.gen.req.CacheScope, toks, n)
	s.opts.PrefixCache.insert(st.seq, s.m, hs, st.cached)
	st.cached = n
}

// cutAtLastBlock shortens a prefill chunk of n tokens that would cross the
// end of the prompt's last full block before its final token (the most a
// later request can take from the prefix cache), so that with a cache the
// rest of the prompt is always prefilled in a pass of its own, whether it
// hit the cache or not (without a cache nothing is cut). A request whose prompt was prefilled before then runs exactly
// the passes the first one ran (it copies the keys and values of the
// first, then runs the second) and gets bit-identical logits, as without
// the cache; this matters because the engine's kernels round differently
// for different numbers of rows.
func (st *seqState) cutAtLastBlock(n int) int {
	p := st.gen.req.Prompt
	fed := len(p) - len(st.pending)
	end := (len(p) - 1) / PrefixBlockTokens * PrefixBlockTokens
	if fed < end && fed+n > end {
		return end - fed
	}
	return n
}
