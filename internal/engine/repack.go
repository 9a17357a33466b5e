package engine

import (
	"slices"

	"flywheel/internal/engine/kernels"
)

// repackWeights puts w's Q4_1 and Q4_0 matrices (and Q8_0, Q5_0 and Q5_1
// ones where the CPU has their integer kernels: QuantType.RepackPays)
// whose rows are a multiple of four (a fused q/k/v or gate/up buffer
// whole, when each of its parts is) into the four-row layout of
// kernels.Repack4 (types Q4_1x4, ..., Q5_1x4), which batch-1 decode
// streams faster (issue 22). The model holds one copy of each, the same bytes rearranged: owned (the GGUF
// loader's arena, which nothing else refers to) rearranges them in place;
// otherwise (NewModel, whose weights may share buffers with others, as
// ToQuant's tied heads do) they are copied into a new arena. Fused layouts
// and tied embeddings are kept; other matrices, and ones already
// repacked, are left as they are. cfg gives the row lengths.
func repackWeights(w *Weights, cfg *Config, owned bool) {
	rp := &repacker{owned: owned}
	if !owned {
		// Size the arena by a dry run over a copy of w's matrices.
		dry := *w
		dry.Layers = slices.Clone(w.Layers)
		rp.walk(&dry, cfg)
		if rp.size == 0 {
			return
		}
		rp.a, rp.size = newArena(rp.size), -1
	}
	rp.walk(w, cfg)
}

// walk repacks w's matrices (rp.size >= 0: only sums the space copies
// would take).
func (rp *repacker) walk(w *Weights, cfg *Config) {
	H, Q, I := cfg.HiddenSize, cfg.QDim(), cfg.IntermediateSize
	tied := w.LMHead.same(w.Embed)
	w.Embed = rp.mat(w.Embed, H)
	if tied {
		w.LMHead = w.Embed
	} else {
		w.LMHead = rp.mat(w.LMHead, H)
	}
	for l := range w.Layers {
		L := &w.Layers[l]
		if partsOf(L.QKV, L.Wq, L.Wk, L.Wv) {
			if p, ok := rp.fused(L.QKV, H, L.Wq, L.Wk, L.Wv); ok {
				L.QKV, L.Wq, L.Wk, L.Wv = p[0], p[1], p[2], p[3]
			}
		} else {
			L.Wq, L.Wk, L.Wv = rp.mat(L.Wq, H), rp.mat(L.Wk, H), rp.mat(L.Wv, H)
		}
		if partsOf(L.GateUp, L.Wgate, L.Wup) {
			if p, ok := rp.fused(L.GateUp, H, L.Wgate, L.Wup); ok {
				L.GateUp, L.Wgate, L.Wup = p[0], p[1], p[2]
			}
		} else {
			L.Wgate, L.Wup = rp.mat(L.Wgate, H), rp.mat(L.Wup, H)
		}
		L.Wo, L.Wdown = rp.mat(L.Wo, Q), rp.mat(L.Wdown, I)
	}
}

// repacker is repackWeights's choice of where each matrix goes.
type repacker struct {
	owned bool
	a     *arena // the copies' arena (not owned)
	size  int    // >= 0: a dry run summing the copies' arena bytes
}

// repackable reports whether m is a matrix of a format whose four-row
// layout decode streams faster here (Q4_1, Q4_0; Q8_0, Q5_0, Q5_1 with
// VNNI: QuantType.RepackPays), of rows
// of cols values (whole blocks) in a multiple of four rows.
func repackable(m Mat, cols int) bool {
	t := m.QuantType
	return m.Quant != nil && t.RepackPays() && cols > 0 && cols%t.BlockElems() == 0 &&
		m.Len()%(4*cols) == 0
}

// mat is m in the four-row layout when repackable, else m.
func (rp *repacker) mat(m Mat, cols int) Mat {
	if !repackable(m, cols) {
		return m
	}
	if rp.size >= 0 && !rp.owned {
		rp.size += arenaBytes(len(m.Quant))
		return m
	}
	q := m.Quant
	if !rp.owned {
		q = rp.a.take(len(m.Quant))
	}
	kernels.Repack4(m.QuantType, q, m.Quant, m.Len()/cols, cols)
	return Mat{Quant: q, QuantType: m.QuantType.RepackedType(), Cols: cols}
}

// fused repacks the fused buffer buf of parts (each repackable: groups of
// four rows never straddle two parts, so the buffer's layout is its
// parts' back to back) and returns it and its new parts; ok is false,
// and nothing is changed, when a part is not repackable.
func (rp *repacker) fused(buf Mat, cols int, parts ...Mat) (out []Mat, ok bool) {
	lens := make([]int, len(parts))
	for i, p := range parts {
		if !repackable(p, cols) {
			return nil, false
		}
		lens[i] = p.Len()
	}
	buf = rp.mat(buf, cols)
	return append([]Mat{buf}, buf.parts(lens...)...), true
}
