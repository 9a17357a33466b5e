package tokenizer

import (
	"strings"
	"sync"
	"sync/atomic"
)

// bpeModel is a byte-level BPE model working on raw bytes.
type bpeModel struct {
	vocab        map[string]int32 // raw bytes of a token -> id
	merges       map[uint64]uint64
	byteIDs      [256]int32 // id of each single byte, -1 if absent
	ignoreMerges bool
	cache        bpeCache
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// mergeOf returns the rank and resulting id of merging a and b.
func (m *bpeModel) mergeOf(a, b int32) (rank uint32, id int32, ok bool) {
	v, ok := m.merges[pairKey(a, b)]
	return uint32(v >> 32), int32(uint32(v)), ok
}

const noRank = ^uint32(0)

// encode appends the ids of one pre-token (raw bytes) to out.
func (m *bpeModel) encode(piece string, out []int) []int {
	if piece == "" {
		return out
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[piece]; ok {
			return append(out, int(id))
		}
	}
	if len(piece) == 1 {
		if id := m.byteIDs[piece[0]]; id >= 0 {
			out = append(out, int(id))
		}
		return out
	}
	if ids, ok := m.cache.get(piece); ok {
		for _, id := range ids {
			out = append(out, int(id))
		}
		return out
	}
	var buf [64]int32
	syms := buf[:0]
	for i := 0; i < len(piece); i++ {
		if id := m.byteIDs[piece[i]]; id >= 0 {
			syms = append(syms, id)
		}
	}
	if len(syms) <= 48 {
		syms = m.mergeSmall(syms)
	} else {
		syms = m.mergeHeap(syms)
	}
	m.cache.put(piece, syms)
	for _, id := range syms {
		out = append(out, int(id))
	}
	return out
}

// mergeSmall applies the merges by repeatedly merging the lowest-ranked
// (then leftmost) adjacent pair. O(n^2); used for short pieces.
func (m *bpeModel) mergeSmall(syms []int32) []int32 {
	var rbuf [64]uint32
	ranks := rbuf[:0]
	if len(syms) > len(rbuf) {
		ranks = make([]uint32, 0, len(syms))
	}
	var nbuf [64]int32
	newIDs := nbuf[:0]
	if len(syms) > len(nbuf) {
		newIDs = make([]int32, 0, len(syms))
	}
	for i := 0; i+1 < len(syms); i++ {
		r, id, ok := m.mergeOf(syms[i], syms[i+1])
		if !ok {
			r = noRank
		}
		ranks = append(ranks, r)
		newIDs = append(newIDs, id)
	}
	for len(syms) > 1 {
		best, bi := noRank, -1
		for i, r := range ranks {
			if r < best {
				best, bi = r, i
			}
		}
		if bi < 0 {
			break
		}
		syms[bi] = newIDs[bi]
		syms = append(syms[:bi+1], syms[bi+2:]...)
		ranks = append(ranks[:bi], ranks[bi+1:]...)
		newIDs = append(newIDs[:bi], newIDs[bi+1:]...)
		// Refresh the pairs around the merged symbol.
		if bi > 0 {
			r, id, ok := m.mergeOf(syms[bi-1], syms[bi])
			if !ok {
				r = noRank
			}
			ranks[bi-1], newIDs[bi-1] = r, id
		}
		if bi < len(ranks) {
			r, id, ok := m.mergeOf(syms[bi], syms[bi+1])
			if !ok {
				r = noRank
			}
			ranks[bi], newIDs[bi] = r, id
		}
	}
	return syms
}

// mergeItem is a candidate merge: key = rank<<32 | position of the left
// symbol, so ordering by key is ordering by (rank, position) as in HF.
type mergeItem struct {
	key   uint64
	newID int32
}

// mergeQueue is a binary min-heap of mergeItems (hand-written: no interface
// calls, this is the hot loop for long pieces).
type mergeQueue []mergeItem

func (h *mergeQueue) push(it mergeItem) {
	q := append(*h, it)
	i := len(q) - 1
	for i > 0 {
		p := (i - 1) / 2
		if q[p].key <= it.key {
			break
		}
		q[i] = q[p]
		i = p
	}
	q[i] = it
	*h = q
}

func (h *mergeQueue) pop() mergeItem {
	q := *h
	top := q[0]
	last := q[len(q)-1]
	q = q[:len(q)-1]
	n := len(q)
	if n > 0 {
		i := 0
		for {
			c := 2*i + 1
			if c >= n {
				break
			}
			if c+1 < n && q[c+1].key < q[c].key {
				c++
			}
			if last.key <= q[c].key {
				break
			}
			q[i] = q[c]
			i = c
		}
		q[i] = last
	}
	*h = q
	return top
}

// mergeHeap is the O(n log n) variant (as in HF's Word::merge_all) for long
// pieces; it gives the same result as mergeSmall.
func (m *bpeModel) mergeHeap(syms []int32) []int32 {
	n := len(syms)
	prev := make([]int32, n)
	next := make([]int32, n)
	for i := range syms {
		prev[i], next[i] = int32(i-1), int32(i+1)
	}
	next[n-1] = -1
	q := make(mergeQueue, 0, n)
	for i := 0; i+1 < n; i++ {
		if r, id, ok := m.mergeOf(syms[i], syms[i+1]); ok {
			q.push(mergeItem{uint64(r)<<32 | uint64(i), id})
		}
	}
	const dead = -2 // next[] value of a symbol merged into its left neighbour
	for len(q) > 0 {
		top := q.pop()
		p := int32(uint32(top.key))
		rank := uint32(top.key >> 32)
		nq := next[p]
		if nq < 0 { // merged away, or last symbol
			continue
		}
		if r, id, ok := m.mergeOf(syms[p], syms[nq]); !ok || r != rank || id != top.newID {
			continue // stale entry
		}
		syms[p] = top.newID
		next[p] = next[nq]
		next[nq] = dead
		if next[p] >= 0 {
			prev[next[p]] = p
		}
		if pp := prev[p]; pp >= 0 {
			if r, id, ok := m.mergeOf(syms[pp], syms[p]); ok {
				q.push(mergeItem{uint64(r)<<32 | uint64(pp), id})
			}
		}
		if nn := next[p]; nn >= 0 {
			if r, id, ok := m.mergeOf(syms[p], syms[nn]); ok {
				q.push(mergeItem{uint64(r)<<32 | uint64(p), id})
			}
		}
	}
	out := syms[:0]
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, syms[i])
	}
	return out
}

// bpeCache maps pre-tokens to their ids. Safe for concurrent use. Reads
// hit an immutable map published through an atomic pointer (no locking);
// new entries go to a small locked map that is merged into a fresh immutable
// map once it has grown to a quarter of it (amortized O(1) per entry). The
// whole cache is dropped when it exceeds cacheMaxEntries.
const (
	cacheMaxEntries  = 1 << 17
	cacheMaxPieceLen = 128
)

type bpeCache struct {
	frozen atomic.Pointer[map[string][]int32]
	mu     sync.Mutex
	recent map[string][]int32
}

func (c *bpeCache) init() {
	c.mu.Lock()
	empty := map[string][]int32{}
	c.frozen.Store(&empty)
	c.recent = map[string][]int32{}
	c.mu.Unlock()
}

func (c *bpeCache) get(s string) ([]int32, bool) {
	if v, ok := (*c.frozen.Load())[s]; ok {
		return v, true
	}
	if len(s) > cacheMaxPieceLen {
		return nil, false
	}
	c.mu.Lock()
	v, ok := c.recent[s]
	c.mu.Unlock()
	return v, ok
}

func (c *bpeCache) put(s string, ids []int32) {
	if len(s) > cacheMaxPieceLen {
		return
	}
	v := append([]int32(nil), ids...)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recent[strings.Clone(s)] = v
	old := *c.frozen.Load()
	if len(c.recent) < max(256, len(old)/4) {
		return
	}
	var next map[string][]int32
	if len(old)+len(c.recent) > cacheMaxEntries {
		next = c.recent
	} else {
		next = make(map[string][]int32, len(old)+len(c.recent))
		for k, v := range old {
			next[k] = v
		}
		for k, v := range c.recent {
			next[k] = v
		}
	}
	c.frozen.Store(&next)
	c.recent = map[string][]int32{}
}
