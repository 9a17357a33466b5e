package train

import (
	"sort"

	"flywheel/internal/rl"
)

// packSequences groups sequences into batches of at most budget tokens
// (first-fit decreasing; a sequence longer than the budget gets a batch of
// its own). Sequences that fit one batch give exactly one batch. The order
// is deterministic.
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
		n := len(seqs[i].Tokens)
		placed := false
		for b := range bins {
			if used[b]+n <= budget {
				bins[b] = append(bins[b], seqs[i])
				used[b] += n
				placed = true
				break
			}
		}
		if !placed {
			bins = append(bins, []*sequence{seqs[i]})
			used = append(used, n)
		}
	}
	return bins
}

// stepBatch is one gradient step's packed input: the model batch and, per
// row (trainable token), what the loss needs.
type stepBatch struct {
	b      *batch
	toks   []rl.Token
	seqs   []*sequence
	ntoken int
}

// buildBatch packs seqs into one model batch. Rows are the positions t−1 of
// every trainable token t; each row carries its sequence's advantage and
// weight and the token's recorded logprob.
func buildBatch(seqs []*sequence) *stepBatch {
	sb := &stepBatch{b: &batch{}, seqs: seqs}
	b := sb.b
	for si, s := range seqs {
		off := len(b.Tokens)
		b.Tokens = append(b.Tokens, s.Tokens...)
		for t := range s.Tokens {
			b.Pos = append(b.Pos, t)
		}
		b.Segs = append(b.Segs, seg{Off: off, Len: len(s.Tokens)})
		for t := 1; t < len(s.Tokens); t++ {
			if !s.Mask[t] {
				continue
			}
			b.Rows = append(b.Rows, off+t-1)
			b.Targets = append(b.Targets, s.Tokens[t])
			sb.toks = append(sb.toks, rl.Token{Old: s.OldLP[t], A: s.A, W: s.W, Seq: si})
		}
	}
	sb.ntoken = len(b.Tokens)
	return sb
}
