package train

import (
	"math"
	"sort"
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
	toks   []lossToken
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
			sb.toks = append(sb.toks, lossToken{Old: s.OldLP[t], A: s.A, W: s.W, Seq: si})
		}
	}
	sb.ntoken = len(b.Tokens)
	return sb
}

// normalizeRL applies rl.md's batch-level steps over the trainable tokens:
// w ← w / mean(w); advantage balance b; A ← A / mean(|A|·w).
func normalizeRL(toks []lossToken, balance float64) {
	if len(toks) == 0 {
		return
	}
	var sw float64
	for _, t := range toks {
		sw += t.W
	}
	mw := sw / float64(len(toks))
	for i := range toks {
		if mw > 0 {
			toks[i].W /= mw
		}
		switch {
		case balance > 0 && toks[i].A < 0:
			toks[i].A *= 1 - balance
		case balance < 0 && toks[i].A > 0:
			toks[i].A *= 1 + balance
		}
	}
	var s float64
	for _, t := range toks {
		s += math.Abs(t.A) * t.W
	}
	m := s / float64(len(toks))
	if m > 0 {
		for i := range toks {
			toks[i].A /= m
		}
	}
}
