package engine

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"

	"flywheel/internal/engine/kernels"
)

// Seq is one sequence being decoded: its KV cache, its length and its LoRA
// adapter (nil for the base model). A Seq belongs to one Model and must not
// be used by two goroutines at once; different Seqs of one Model may be
// forwarded concurrently (in one batch or in separate Forward calls).
type Seq struct {
	m       *Model
	adapter *Adapter
	n       int // positions held in the cache
	cap     int // positions allocated per head
	// k[l], v[l]: layer l's cache, head-major [NumKVHeads][cap][HeadDim].
	k, v   [][]float32
	logits []float32 // last Forward's logits for this sequence [VocabSize]
	inUse  bool      // guards against the same Seq twice in one batch
}

// NewSeq starts an empty sequence decoded with adapter (nil: base model).
// The adapter must not be modified while the sequence is in use.
func (m *Model) NewSeq(adapter *Adapter) *Seq {
	L := m.Config.NumLayers
	return &Seq{m: m, adapter: adapter, k: make([][]float32, L), v: make([][]float32, L)}
}

// Len is the number of tokens the sequence holds (its next position).
func (s *Seq) Len() int { return s.n }

// Adapter is the sequence's LoRA adapter, nil for the base model.
func (s *Seq) Adapter() *Adapter { return s.adapter }

// Truncate drops the cached positions from n on, so decoding continues
// from position n (e.g. to reuse a shared prompt prefix). n must be in
// [0, Len()].
func (s *Seq) Truncate(n int) {
	if n < 0 || n > s.n {
		panic(fmt.Sprintf("engine: Seq.Truncate(%d) with length %d", n, s.n))
	}
	s.n = n
}

// Clone returns an independent copy of the sequence (same adapter, same
// cached positions), e.g. to sample several continuations of one prompt
// after a single prefill.
func (s *Seq) Clone() *Seq {
	c := s.m.NewSeq(s.adapter)
	if s.n == 0 {
		return c
	}
	c.ensure(s.n)
	D := s.m.Config.HeadDim
	for l := range s.k {
		for h := 0; h < s.m.Config.NumKVHeads; h++ {
			copy(c.k[l][h*c.cap*D:h*c.cap*D+s.n*D], s.k[l][h*s.cap*D:h*s.cap*D+s.n*D])
			copy(c.v[l][h*c.cap*D:h*c.cap*D+s.n*D], s.v[l][h*s.cap*D:h*s.cap*D+s.n*D])
		}
	}
	c.n = s.n
	if s.logits != nil {
		c.logits = append([]float32(nil), s.logits...)
	}
	return c
}

// Logits returns the logits of the last Forward on this sequence (nil
// before the first); the slice is overwritten by the next Forward.
func (s *Seq) Logits() []float32 { return s.logits }

// Reset empties the sequence, keeping its cache memory for reuse.
func (s *Seq) Reset() { s.n = 0 }

// Release frees the cache memory; the sequence is empty afterwards.
func (s *Seq) Release() {
	for l := range s.k {
		s.k[l], s.v[l] = nil, nil
	}
	s.n, s.cap, s.logits = 0, 0, nil
}

// ensure makes room for need positions.
func (s *Seq) ensure(need int) {
	if need <= s.cap {
		return
	}
	c := s.m.Config
	newCap := max(need, 2*s.cap, 64)
	newCap = min(newCap, max(c.MaxPositionEmbeddings, need))
	KVH, D := c.NumKVHeads, c.HeadDim
	for l := range s.k {
		nk := make([]float32, KVH*newCap*D)
		nv := make([]float32, KVH*newCap*D)
		if s.n > 0 {
			for h := 0; h < KVH; h++ {
				copy(nk[h*newCap*D:h*newCap*D+s.n*D], s.k[l][h*s.cap*D:h*s.cap*D+s.n*D])
				copy(nv[h*newCap*D:h*newCap*D+s.n*D], s.v[l][h*s.cap*D:h*s.cap*D+s.n*D])
			}
		}
		s.k[l], s.v[l] = nk, nv
	}
	s.cap = newCap
}

// workspace holds the activations of one forward pass; reused through a pool.
type workspace struct {
	x, xn, q, k, v, att, tmp, g, u, lt []float32
	qkv, gu                            []float32 // fused products
	qg, og                             []float32 // grouped attention blocks
	cos, sin                           []float32
	last, logits                       []float32
	scores                             [][]float32 // per worker
	s                                  []float32   // attention score block (GEMM path)
	rowPos                             []int
	groups                             []adapterGroup
	rows                               []seqRows
}

func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// maxPassRows bounds the rows of one pass; longer inputs are split into
// several passes (chunked prefill) to bound the workspace memory.
const maxPassRows = 512

// gemmAttnRows is the number of new rows of a sequence from which its
// attention runs as matrix products rather than dot-product loops.
const gemmAttnRows = 8

type seqRows struct {
	s      *Seq
	toks   []int
	r0     int // first row in the pass
	p0     int // position of the first new token
	outIdx int // index in the caller's slices
}

type adapterGroup struct {
	a      *Adapter
	r0, r1 int
}

// Forward appends tokens[i] to seqs[i] for every i in one batched pass and
// returns each sequence's logits at its last new position ([VocabSize]
// each). The sequences may be at different positions, use different
// adapters (or none), and mix prefill (many tokens) with decode (one).
//
// The returned slices are owned by the sequences: each stays valid until
// the next Forward on its sequence; copy them to keep them longer. On error
// no sequence has changed.
func (m *Model) Forward(seqs []*Seq, tokens [][]int) ([][]float32, error) {
	if len(seqs) != len(tokens) {
		return nil, fmt.Errorf("engine: Forward: %d sequences but %d token lists", len(seqs), len(tokens))
	}
	if err := m.checkBatch(seqs, tokens); err != nil {
		return nil, err
	}
	total := 0
	for _, t := range tokens {
		total += len(t)
	}
	out := make([][]float32, len(seqs))
	if total <= maxPassRows {
		m.pass(seqs, tokens, nil)
	} else {
		// Chunked: feed every sequence's tokens in passes of at most
		// maxPassRows rows, sequences that finish dropping out.
		rem := make([][]int, len(tokens))
		copy(rem, tokens)
		for {
			var ps []*Seq
			var pt [][]int
			budget := maxPassRows
			for i, t := range rem {
				if len(t) == 0 || budget == 0 {
					continue
				}
				n := min(len(t), budget)
				ps = append(ps, seqs[i])
				pt = append(pt, t[:n])
				rem[i] = t[n:]
				budget -= n
			}
			if len(ps) == 0 {
				break
			}
			m.pass(ps, pt, nil)
		}
	}
	for i, s := range seqs {
		out[i] = s.logits
	}
	return out, nil
}

// Logits runs tokens from position 0 through a fresh sequence with adapter
// and returns the logits at every position, [len(tokens)*VocabSize]
// row-major (row t predicts token t+1).
func (m *Model) Logits(adapter *Adapter, tokens []int) ([]float32, error) {
	s := m.NewSeq(adapter)
	if len(tokens) == 0 {
		return nil, fmt.Errorf("engine: Logits: no tokens")
	}
	if err := m.checkBatch([]*Seq{s}, [][]int{tokens}); err != nil {
		return nil, err
	}
	V := m.Config.VocabSize
	out := make([]float32, len(tokens)*V)
	for t0 := 0; t0 < len(tokens); t0 += maxPassRows {
		t1 := min(len(tokens), t0+maxPassRows)
		m.pass([]*Seq{s}, [][]int{tokens[t0:t1]}, out[t0*V:t1*V])
	}
	return out, nil
}

func (m *Model) checkBatch(seqs []*Seq, tokens [][]int) error {
	c := m.Config
	defer func() {
		for _, s := range seqs {
			if s != nil {
				s.inUse = false
			}
		}
	}()
	var checked []*Adapter
	for i, s := range seqs {
		if s == nil {
			return fmt.Errorf("engine: Forward: sequence %d is nil", i)
		}
		if s.m != m {
			return fmt.Errorf("engine: Forward: sequence %d belongs to another model", i)
		}
		if s.inUse {
			return fmt.Errorf("engine: Forward: sequence %d appears twice in the batch", i)
		}
		s.inUse = true
		if len(tokens[i]) == 0 {
			return fmt.Errorf("engine: Forward: no tokens for sequence %d", i)
		}
		if n := s.n + len(tokens[i]); n > c.MaxPositionEmbeddings {
			return fmt.Errorf("engine: context length exceeded: sequence %d would hold %d tokens, the model's maximum is %d", i, n, c.MaxPositionEmbeddings)
		}
		for _, t := range tokens[i] {
			if t < 0 || t >= c.VocabSize {
				return fmt.Errorf("engine: token id %d out of range [0,%d)", t, c.VocabSize)
			}
		}
		if a := s.adapter; a != nil && !slices.Contains(checked, a) {
			if err := a.Check(c); err != nil {
				return err
			}
			checked = append(checked, a)
		}
	}
	return nil
}

// Check verifies that the adapter fits a model of shape cfg.
func (a *Adapter) Check(cfg *Config) error {
	if len(a.Layers) != cfg.NumLayers {
		return fmt.Errorf("engine: adapter has %d layers, model has %d", len(a.Layers), cfg.NumLayers)
	}
	r := a.Config.Rank
	for l, mods := range a.Layers {
		for mod, p := range mods {
			out, in, ok := cfg.ModuleShape(mod)
			if !ok {
				return fmt.Errorf("engine: adapter layer %d: unknown module %q", l, mod)
			}
			if p == nil || p.In != in || p.Out != out || len(p.A) != r*in || len(p.B) != out*r {
				return fmt.Errorf("engine: adapter layer %d %s: shape does not match the model (want A [%d,%d], B [%d,%d])", l, mod, r, in, out, r)
			}
		}
	}
	return nil
}

var wsPool sync.Pool

// pass runs one batched forward pass. With all != nil (one sequence), the
// logits of every row are written there; otherwise each sequence's last
// row's logits go to its own buffer.
func (m *Model) pass(seqs []*Seq, tokens [][]int, all []float32) {
	c, w := m.Config, m.Weights
	H, I, V := c.HiddenSize, c.IntermediateSize, c.VocabSize
	QD, KVD, D := c.QDim(), c.KVDim(), c.HeadDim
	half := D / 2
	eps := float32(c.RMSNormEps)

	ws, _ := wsPool.Get().(*workspace)
	if ws == nil {
		ws = &workspace{}
	}
	defer wsPool.Put(ws)

	// Order rows by adapter so each adapter's rows are contiguous.
	groups := ws.groups[:0]
	for _, s := range seqs {
		found := false
		for _, g := range groups {
			found = found || g.a == s.adapter
		}
		if !found {
			groups = append(groups, adapterGroup{a: s.adapter})
		}
	}
	rows := ws.rows[:0]
	r := 0
	for gi := range groups {
		g := &groups[gi]
		g.r0 = r
		for i, s := range seqs {
			if s.adapter == g.a {
				rows = append(rows, seqRows{s: s, toks: tokens[i], r0: r, p0: s.n, outIdx: i})
				r += len(tokens[i])
			}
		}
		g.r1 = r
	}
	ws.groups, ws.rows = groups, rows
	N := 0
	for _, sr := range rows {
		N += len(sr.toks)
	}
	ws.x = grow(ws.x, N*H)
	ws.xn = grow(ws.xn, N*H)
	ws.q = grow(ws.q, N*QD)
	ws.k = grow(ws.k, N*KVD)
	ws.v = grow(ws.v, N*KVD)
	ws.att = grow(ws.att, N*QD)
	ws.tmp = grow(ws.tmp, N*H)
	ws.g = grow(ws.g, N*I)
	ws.cos = grow(ws.cos, N*half)
	ws.sin = grow(ws.sin, N*half)
	if cap(ws.rowPos) < N {
		ws.rowPos = make([]int, N)
	}
	ws.rowPos = ws.rowPos[:N]

	// Embeddings, positions, RoPE tables; grow the caches.
	for _, sr := range rows {
		sr.s.ensure(sr.p0 + len(sr.toks))
		for t, id := range sr.toks {
			r := sr.r0 + t
			copy(ws.x[r*H:(r+1)*H], w.Embed[id*H:(id+1)*H])
			pos := sr.p0 + t
			ws.rowPos[r] = pos
			for i := 0; i < half; i++ {
				ang := float64(pos) * m.invFreq[i]
				ws.cos[r*half+i] = float32(math.Cos(ang))
				ws.sin[r*half+i] = float32(math.Sin(ang))
			}
		}
	}

	for l := range w.Layers {
		L := &w.Layers[l]
		// Attention block.
		parallelRange(N, H, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				rmsNorm(ws.xn[r*H:(r+1)*H], ws.x[r*H:(r+1)*H], L.AttnNorm, eps)
			}
		})
		if f := m.fused[l].qkv; f != nil {
			W := QD + 2*KVD
			ws.qkv = grow(ws.qkv, N*W)
			matmulT(ws.xn, N, H, f, W, ws.qkv)
			for r := 0; r < N; r++ {
				row := ws.qkv[r*W : (r+1)*W]
				copy(ws.q[r*QD:(r+1)*QD], row[:QD])
				copy(ws.k[r*KVD:(r+1)*KVD], row[QD:QD+KVD])
				copy(ws.v[r*KVD:(r+1)*KVD], row[QD+KVD:])
			}
		} else {
			matmulT(ws.xn, N, H, L.Wq, QD, ws.q)
			matmulT(ws.xn, N, H, L.Wk, KVD, ws.k)
			matmulT(ws.xn, N, H, L.Wv, KVD, ws.v)
		}
		m.applyLoRA(ws, groups, l, ModQ, ws.xn, ws.q, QD)
		m.applyLoRA(ws, groups, l, ModK, ws.xn, ws.k, KVD)
		m.applyLoRA(ws, groups, l, ModV, ws.xn, ws.v, KVD)
		parallelRange(N, QD, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				q := ws.q[r*QD : (r+1)*QD]
				k := ws.k[r*KVD : (r+1)*KVD]
				v := ws.v[r*KVD : (r+1)*KVD]
				if L.Bq != nil {
					addTo(q, L.Bq)
					addTo(k, L.Bk)
					addTo(v, L.Bv)
				}
				if L.QNorm != nil {
					for h := 0; h < c.NumHeads; h++ {
						rmsNorm(q[h*D:(h+1)*D], q[h*D:(h+1)*D], L.QNorm, eps)
					}
					for h := 0; h < c.NumKVHeads; h++ {
						rmsNorm(k[h*D:(h+1)*D], k[h*D:(h+1)*D], L.KNorm, eps)
					}
				}
				cs, sn := ws.cos[r*half:(r+1)*half], ws.sin[r*half:(r+1)*half]
				ropeApply(q, c.NumHeads, D, cs, sn)
				ropeApply(k, c.NumKVHeads, D, cs, sn)
			}
		})
		// Append K and V to the caches.
		for _, sr := range rows {
			s := sr.s
			kc, vc := s.k[l], s.v[l]
			for t := range sr.toks {
				r, pos := sr.r0+t, sr.p0+t
				for h := 0; h < c.NumKVHeads; h++ {
					off := (h*s.cap + pos) * D
					copy(kc[off:off+D], ws.k[r*KVD+h*D:r*KVD+(h+1)*D])
					copy(vc[off:off+D], ws.v[r*KVD+h*D:r*KVD+(h+1)*D])
				}
			}
		}
		m.attention(ws, rows, l)
		matmulT(ws.att, N, QD, L.Wo, H, ws.tmp)
		m.applyLoRA(ws, groups, l, ModO, ws.att, ws.tmp, H)
		addTo(ws.x, ws.tmp)

		// MLP block.
		parallelRange(N, H, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				rmsNorm(ws.xn[r*H:(r+1)*H], ws.x[r*H:(r+1)*H], L.MLPNorm, eps)
			}
		})
		if f := m.fused[l].gu; f != nil {
			ws.gu = grow(ws.gu, N*2*I)
			matmulT(ws.xn, N, H, f, 2*I, ws.gu)
			m.applyLoRA(ws, groups, l, ModGate, ws.xn, ws.gu, 2*I)
			m.applyLoRA(ws, groups, l, ModUp, ws.xn, ws.gu[I:], 2*I)
			parallelRange(N, I*8, func(lo, hi int) {
				for r := lo; r < hi; r++ {
					kernels.SwiGLU(ws.g[r*I:(r+1)*I], ws.gu[2*r*I:(2*r+1)*I], ws.gu[(2*r+1)*I:(2*r+2)*I])
				}
			})
		} else {
			ws.u = grow(ws.u, N*I)
			matmulT(ws.xn, N, H, L.Wgate, I, ws.g)
			matmulT(ws.xn, N, H, L.Wup, I, ws.u)
			m.applyLoRA(ws, groups, l, ModGate, ws.xn, ws.g, I)
			m.applyLoRA(ws, groups, l, ModUp, ws.xn, ws.u, I)
			parallelRange(N, I*8, func(lo, hi int) {
				siluMul(ws.g[lo*I:hi*I], ws.u[lo*I:hi*I])
			})
		}
		matmulT(ws.g, N, I, L.Wdown, H, ws.tmp)
		m.applyLoRA(ws, groups, l, ModDown, ws.g, ws.tmp, H)
		addTo(ws.x, ws.tmp)
	}

	for _, sr := range rows {
		sr.s.n = sr.p0 + len(sr.toks)
	}

	// Final norm and LM head.
	if all != nil {
		parallelRange(N, H, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				rmsNorm(ws.xn[r*H:(r+1)*H], ws.x[r*H:(r+1)*H], w.Norm, eps)
			}
		})
		matmulT(ws.xn, N, H, w.LMHead, V, all)
		return
	}
	B := len(rows)
	ws.last = grow(ws.last, B*H)
	ws.logits = grow(ws.logits, B*V)
	for b, sr := range rows {
		r := sr.r0 + len(sr.toks) - 1
		rmsNorm(ws.last[b*H:(b+1)*H], ws.x[r*H:(r+1)*H], w.Norm, eps)
	}
	matmulT(ws.last, B, H, w.LMHead, V, ws.logits)
	for b, sr := range rows {
		if len(sr.s.logits) != V {
			sr.s.logits = make([]float32, V)
		}
		copy(sr.s.logits, ws.logits[b*V:(b+1)*V])
	}
}

func addTo(dst, x []float32) { kernels.Add(dst, x) }

// applyLoRA adds scale·(x·Aᵀ)·Bᵀ to y (row stride ldy) for the rows of
// each adapter group.
func (m *Model) applyLoRA(ws *workspace, groups []adapterGroup, l int, mod string, x, y []float32, ldy int) {
	be := kernels.Default()
	for _, g := range groups {
		if g.a == nil {
			continue
		}
		p := g.a.Layers[l][mod]
		if p == nil {
			continue
		}
		r := g.a.Config.Rank
		n := g.r1 - g.r0
		ws.lt = grow(ws.lt, n*r)
		be.Sgemm(false, true, n, r, p.In, 1, x[g.r0*p.In:], p.In, p.A, p.In, 0, ws.lt, r)
		be.Sgemm(false, true, n, p.Out, r, g.a.Config.Scale(), ws.lt, r, p.B, r, 1, y[g.r0*ldy:], ldy)
	}
}

// attention computes, for every new row, causal (optionally windowed)
// attention over its sequence's cache, writing ws.att [N, QDim].
func (m *Model) attention(ws *workspace, rows []seqRows, l int) {
	c := m.Config
	QD, D := c.QDim(), c.HeadDim
	rep := c.NumHeads / c.NumKVHeads
	scale := float32(1 / math.Sqrt(float64(D)))
	win := c.SlidingWindow

	// Long runs of new rows (prefill): matrix products per head. Short
	// runs (decode): per KV head, the rep query heads sharing it are one
	// [rep, D] block, so each cached key and value row is read once for
	// all of them: S = Q·Kᵀ [rep, P], softmax, O = S·V [rep, D]. These
	// small products use the Go backend directly: they run inside the
	// parallel loop below, where handing them to a threaded BLAS would
	// oversubscribe the cores.
	type item struct{ sr, kh int }
	var loops []item
	work := 0
	for i, sr := range rows {
		if len(sr.toks) < gemmAttnRows {
			for kh := 0; kh < c.NumKVHeads; kh++ {
				loops = append(loops, item{i, kh})
			}
			work += c.NumHeads * len(sr.toks) * (sr.p0 + len(sr.toks)) * D
			continue
		}
		m.attentionGEMM(ws, sr, l, scale)
	}
	if len(loops) == 0 {
		return
	}
	workers := runtime.GOMAXPROCS(0)
	for len(ws.scores) < workers {
		ws.scores = append(ws.scores, nil)
	}
	var be kernels.Go
	parallelForW(len(loops), work, func(wk, i int) {
		it := loops[i]
		sr := rows[it.sr]
		s := sr.s
		kc := s.k[l][it.kh*s.cap*D : (it.kh+1)*s.cap*D]
		vc := s.v[l][it.kh*s.cap*D : (it.kh+1)*s.cap*D]
		for t := range sr.toks {
			r, pos := sr.r0+t, sr.p0+t
			lo := 0
			if win > 0 && pos-win+1 > 0 {
				lo = pos - win + 1
			}
			P := pos + 1 - lo
			ws.scores[wk] = grow(ws.scores[wk], rep*P)
			sc := ws.scores[wk]
			q := ws.q[r*QD+it.kh*rep*D:]
			be.Sgemm(false, true, rep, P, D, scale, q, D, kc[lo*D:], D, 0, sc, P)
			for h := 0; h < rep; h++ {
				softmaxInPlace(sc[h*P : (h+1)*P])
			}
			be.Sgemm(false, false, rep, D, P, 1, sc, P, vc[lo*D:], D, 0, ws.att[r*QD+it.kh*rep*D:], D)
		}
	})
}

// attentionGEMM is the attention of one sequence with many new rows, as
// matrix products in row blocks, per KV head: the rep query heads sharing
// it are stacked into one [rep·rows, D] block Q, then S = Q·Kᵀ, masked
// softmax, O = S·V, and O is scattered back into the heads' columns.
func (m *Model) attentionGEMM(ws *workspace, sr seqRows, l int, scale float32) {
	c := m.Config
	QD, D := c.QDim(), c.HeadDim
	rep := c.NumHeads / c.NumKVHeads
	win := c.SlidingWindow
	be := kernels.Default()
	s := sr.s
	T := len(sr.toks)
	end := sr.p0 + T
	// Row blocks of at most 128 rows (fewer for long contexts, bounding
	// the score block to 4M floats): each block only multiplies against
	// the keys up to its last row, which skips most of the masked half.
	block := max(1, min(T, 128, (1<<22)/(end*rep)))
	for kh := 0; kh < c.NumKVHeads; kh++ {
		kc := s.k[l][kh*s.cap*D:]
		vc := s.v[l][kh*s.cap*D:]
		for t0 := 0; t0 < T; t0 += block {
			t1 := min(T, t0+block)
			P := sr.p0 + t1
			nr := t1 - t0
			M := rep * nr
			ws.qg = grow(ws.qg, M*D)
			ws.og = grow(ws.og, M*D)
			for hl := 0; hl < rep; hl++ {
				h := kh*rep + hl
				for t := 0; t < nr; t++ {
					r := sr.r0 + t0 + t
					copy(ws.qg[(hl*nr+t)*D:(hl*nr+t+1)*D], ws.q[r*QD+h*D:r*QD+(h+1)*D])
				}
			}
			ws.s = grow(ws.s, M*P)
			S := ws.s
			be.Sgemm(false, true, M, P, D, scale, ws.qg, D, kc, D, 0, S, P)
			parallelRange(M, P, func(a, b int) {
				for i := a; i < b; i++ {
					row := S[i*P : (i+1)*P]
					pos := sr.p0 + t0 + i%nr
					lo := 0
					if win > 0 && pos-win+1 > 0 {
						lo = pos - win + 1
					}
					clear(row[:lo])
					softmaxInPlace(row[lo : pos+1])
					clear(row[pos+1:])
				}
			})
			be.Sgemm(false, false, M, D, P, 1, S, P, vc, D, 0, ws.og, D)
			for hl := 0; hl < rep; hl++ {
				h := kh*rep + hl
				for t := 0; t < nr; t++ {
					r := sr.r0 + t0 + t
					copy(ws.att[r*QD+h*D:r*QD+(h+1)*D], ws.og[(hl*nr+t)*D:(hl*nr+t+1)*D])
				}
			}
		}
	}
}

// parallelForW is parallelFor that also passes a worker index in
// [0, GOMAXPROCS); with little total work it runs serially.
func parallelForW(n, work int, f func(worker, i int)) {
	w := min(runtime.GOMAXPROCS(0), n)
	if w <= 1 || work < 1<<16 {
		for i := 0; i < n; i++ {
			f(0, i)
		}
		return
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	next := 0
	wg.Add(w)
	for wk := range w {
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n {
					return
				}
				f(wk, i)
			}
		}()
	}
	wg.Wait()
}
