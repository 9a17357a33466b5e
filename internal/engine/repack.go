package engine

import "flywheel/internal/engine/kernels"

// repackWeights puts w's Q4_1 and Q4_0 matrices into the four-row layout
// of kernels.Repack4 (types Q4_1x4, Q4_0x4), which batch-1 decode streams
// faster (issue 22): each such matrix whose rows are a multiple of four —
// a fused q/k/v or gate/up buffer when each of its parts is — is copied
// once into the new layout and its old bytes passed to release (nil: left
// to the garbage collector; the GGUF loader drops the file's pages), so
// the model holds one copy. Fused layouts and tied embeddings are kept;
// other matrices are left as they are, and a matrix already repacked is
// not touched again. cfg gives the row lengths.
func repackWeights(w *Weights, cfg *Config, release func([]byte)) {
	H, Q, I := cfg.HiddenSize, cfg.QDim(), cfg.IntermediateSize
	tied := w.LMHead.same(w.Embed)
	w.Embed = repackMat(w.Embed, H, release)
	if tied {
		w.LMHead = w.Embed
	} else {
		w.LMHead = repackMat(w.LMHead, H, release)
	}
	for l := range w.Layers {
		L := &w.Layers[l]
		if partsOf(L.QKV, L.Wq, L.Wk, L.Wv) {
			if p, ok := repackFused(L.QKV, H, release, L.Wq, L.Wk, L.Wv); ok {
				L.QKV, L.Wq, L.Wk, L.Wv = p[0], p[1], p[2], p[3]
			}
		} else {
			L.Wq, L.Wk, L.Wv = repackMat(L.Wq, H, release), repackMat(L.Wk, H, release), repackMat(L.Wv, H, release)
		}
		if partsOf(L.GateUp, L.Wgate, L.Wup) {
			if p, ok := repackFused(L.GateUp, H, release, L.Wgate, L.Wup); ok {
				L.GateUp, L.Wgate, L.Wup = p[0], p[1], p[2]
			}
		} else {
			L.Wgate, L.Wup = repackMat(L.Wgate, H, release), repackMat(L.Wup, H, release)
		}
		L.Wo, L.Wdown = repackMat(L.Wo, Q, release), repackMat(L.Wdown, I, release)
	}
}

// repackable reports whether m is a Q4_1/Q4_0 matrix of rows of cols
// values (whole blocks) in a multiple of four rows.
func repackable(m Mat, cols int) bool {
	t := m.QuantType
	return m.Quant != nil && t.RepackedType() != kernels.QNone && cols > 0 && cols%t.BlockElems() == 0 &&
		m.Len()%(4*cols) == 0
}

// repackMat is m in the four-row layout when repackable, else m.
func repackMat(m Mat, cols int, release func([]byte)) Mat {
	if !repackable(m, cols) {
		return m
	}
	q := make([]byte, len(m.Quant))
	kernels.Repack4(m.QuantType, q, m.Quant, m.Len()/cols, cols)
	if release != nil {
		release(m.Quant)
	}
	return Mat{Quant: q, QuantType: m.QuantType.RepackedType(), Cols: cols}
}

// repackFused repacks the fused buffer buf of parts (each repackable:
// groups of four rows never straddle two parts, so the buffer's layout is
// its parts' back to back) and returns it and its new parts; ok is false,
// and nothing is changed, when a part is not repackable.
func repackFused(buf Mat, cols int, release func([]byte), parts ...Mat) (out []Mat, ok bool) {
	lens := make([]int, len(parts))
	for i, p := range parts {
		if !repackable(p, cols) {
			return nil, false
		}
		lens[i] = p.Len()
	}
	buf = repackMat(buf, cols, release)
	return append([]Mat{buf}, buf.parts(lens...)...), true
}
