package train

import (
	"sort"

	"flywheel/internal/engine"
	"flywheel/internal/rl"
)

// packSequences groups sequences into batches of at most budget tokens
// (first-fit decreasing; a sequence longer than the budget gets a batch of
// its own). A batch holds the sequences' shared prefixes once (buildBatch),
// so a sequence costs a batch only the tokens it does not share with one
// already in it. Sequences that fit one batch give exactly one batch. The
// order is deterministic.
func packSequences(seqs []*sequence, budget int) [][]*sequence {
	if len(seqs) == 0 {
		return nil
	}
	idx := make([]int, len(seqs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return len(seqs[idx[a]].Tokens) > len(seqs[idx[b]].Tokens) })
	var bins [][]*sequence
	var used []int
	for _, i := range idx {
		s := seqs[i]
		placed := false
		for b := range bins {
			if n := newTokens(bins[b], s); used[b]+n <= budget {
				bins[b] = append(bins[b], s)
				used[b] += n
				placed = true
				break
			}
		}
		if !placed {
			bins = append(bins, []*sequence{s})
			used = append(used, len(s.Tokens))
		}
	}
	return bins
}

// newTokens is how many tokens s adds to the prefix tree of bin: its length
// less its longest common prefix with a sequence of bin.
func newTokens(bin []*sequence, s *sequence) int {
	best := 0
	for _, o := range bin {
		best = max(best, commonPrefix(o.Tokens, s.Tokens))
	}
	return len(s.Tokens) - best
}

func commonPrefix(a, b []int) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// trieNode is a run of tokens shared by every sequence through it, at
// positions p0.. of those sequences.
type trieNode struct {
	toks     []int
	children []*trieNode
	p0       int
	seg      int // segment index in the batch
	row0     int // row of toks[0] in the batch
}

// child is n's child whose run starts with tok (nil: none).
func (n *trieNode) child(tok int) *trieNode {
	for _, c := range n.children {
		if c.toks[0] == tok {
			return c
		}
	}
	return nil
}

// insert adds s below the root n, splitting a run where s leaves it.
func (n *trieNode) insert(s []int) {
	cur := n
	for i := 0; i < len(s); {
		c := cur.child(s[i])
		if c == nil {
			cur.children = append(cur.children, &trieNode{toks: s[i:], p0: i})
			return
		}
		m := commonPrefix(c.toks, s[i:])
		if m < len(c.toks) {
			rest := &trieNode{toks: c.toks[m:], children: c.children, p0: c.p0 + m}
			c.toks, c.children = c.toks[:m], []*trieNode{rest}
		}
		i += m
		cur = c
	}
}

// rowOf is the batch row of position p of sequence s (inserted below n).
func (n *trieNode) rowOf(s []int, p int) int {
	cur := n
	for {
		c := cur.child(s[cur.p0+len(cur.toks)])
		if p < c.p0+len(c.toks) {
			return c.row0 + p - c.p0
		}
		cur = c
	}
}

// stepBatch is one gradient step's packed input: the model batch and, per
// row (trainable token), what the loss needs.
type stepBatch struct {
	b      *batch
	toks   []rl.Token
	seqs   []*sequence
	ntoken int
}

// Prefixes is token sequences packed into one model batch as a prefix
// tree: a run of tokens that several sequences start with (the prompt of a
// group of trajectories, the earlier turns of a conversation) is one
// segment that their own segments continue, so its forward and backward
// run once; the result equals running each sequence in full
// (engine.Batch). The batch has no rows yet: the caller adds them with Row.
type Prefixes struct {
	Batch *engine.Batch
	root  *trieNode
	seqs  [][]int
}

// PackPrefixes packs seqs (each non-empty) into one batch.
func PackPrefixes(seqs [][]int) *Prefixes {
	pp := &Prefixes{Batch: &batch{}, root: &trieNode{}, seqs: seqs}
	b := pp.Batch
	for _, s := range seqs {
		pp.root.insert(s)
	}
	// segments in depth-first order, so a parent comes before its children
	var lay func(n *trieNode, parent int)
	lay = func(n *trieNode, parent int) {
		for _, c := range n.children {
			c.seg, c.row0 = len(b.Segs), len(b.Tokens)
			b.Segs = append(b.Segs, seg{Off: c.row0, Len: len(c.toks)})
			b.Parent = append(b.Parent, parent)
			b.Tokens = append(b.Tokens, c.toks...)
			for i := range c.toks {
				b.Pos = append(b.Pos, c.p0+i)
			}
			lay(c, c.seg)
		}
	}
	lay(pp.root, -1)
	return pp
}

// Row is the batch token (row index for Batch.Rows) of position p of
// sequence i.
func (pp *Prefixes) Row(i, p int) int { return pp.root.rowOf(pp.seqs[i], p) }

// buildBatch packs seqs into one model batch (PackPrefixes). Rows are the
// positions t−1 of every trainable token t of each sequence; each row
// carries its sequence's advantage and weight and the token's recorded
// logprob.
func buildBatch(seqs []*sequence) *stepBatch {
	toks := make([][]int, len(seqs))
	sb := &stepBatch{seqs: seqs}
	for i, s := range seqs {
		toks[i] = s.Tokens
		sb.ntoken += len(s.Tokens)
	}
	pp := PackPrefixes(toks)
	sb.b = pp.Batch
	b := sb.b
	for si, s := range seqs {
		for t := 1; t < len(s.Tokens); t++ {
			if !s.Mask[t] {
				continue
			}
			b.Rows = append(b.Rows, pp.Row(si, t-1))
			b.Targets = append(b.Targets, s.Tokens[t])
			sb.toks = append(sb.toks, rl.Token{Old: s.OldLP[t], A: s.A, W: s.W, Seq: si})
		}
	}
	return sb
}
