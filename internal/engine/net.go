package engine

import (
	"fmt"
	"sync"
	"sync/atomic"

	"flywheel/internal/engine/kernels"
	"flywheel/internal/par"
)

// This file defines the transformer once: the decoder layer's forward and
// backward over the rows of a pass. Serving (forward.go: batched decode and
// prefill over KV caches) and training (trainpass.go: packed sequences, kept
// activations, the backward) drive these same functions; neither restates a
// layer.

// Module indices, in AllModules order.
const (
	modQ = iota
	modK
	modV
	modO
	modGate
	modUp
	modDown
	numModules
)

// Net is the transformer in element type T: the frozen base weights laid out
// for the forward and backward passes (aliased when T is float32, converted
// otherwise) and the RoPE frequencies of the config.
type Net[T Float] struct {
	Config        *Config
	embed, lmHead wmat[T]
	norm          []T
	layers        []netLayer[T]
	invFreq       []float64
	// actPool keeps training activations between steps: a step's forward
	// takes them, its backward gives them back, so a training job does not
	// allocate (and zero) its activations again every step.
	actPool sync.Pool
	// headPool and scrPool likewise keep the lm head's probability buffer
	// and the backward's scratch.
	headPool, scrPool sync.Pool
}

// getActs is a set of training activations for N rows (reused when one
// is free).
func (n *Net[T]) getActs(N, rmax int) *acts[T] {
	a, _ := n.actPool.Get().(*acts[T])
	if a == nil {
		a = &acts[T]{}
	}
	a.ensure(n, N, rmax, true)
	return a
}

// netLayer is one decoder layer's weights. wqkv and wgu view q/k/v and
// gate/up as one matrix when they lie back to back in memory, so one matrix
// product computes them (nil: separate products).
type netLayer[T Float] struct {
	attnNorm, mlpNorm []T
	qNorm, kNorm      []T // [D] (Qwen3) or nil
	wq, wk, wv, wo    wmat[T]
	wgate, wup, wdown wmat[T]
	bq, bk, bv        []T // [Q],[KV],[KV] or nil
	bo                []T // [H] or nil
	wqkv, wgu         wmat[T]
}

// NewNet lays out the weights w of a model of shape cfg in T: float32
// matrices are aliased, BF16/F16 matrices kept as they are for float32
// (the kernels widen them as they multiply) and widened for float64.
func NewNet[T Float](cfg *Config, w *Weights) (*Net[T], error) {
	if err := w.Check(cfg); err != nil {
		return nil, err
	}
	n := &Net[T]{Config: cfg, embed: toWmat[T](w.Embed), norm: convert[T](w.Norm), invFreq: ropeInvFreq(cfg)}
	if w.LMHead.same(w.Embed) {
		n.lmHead = n.embed
	} else {
		n.lmHead = toWmat[T](w.LMHead)
	}
	fused := fuse(w)
	for l := range w.Layers {
		L := &w.Layers[l]
		nl := netLayer[T]{attnNorm: convert[T](L.AttnNorm), mlpNorm: convert[T](L.MLPNorm),
			wo: toWmat[T](L.Wo), wdown: toWmat[T](L.Wdown),
			bq: convert[T](L.Bq), bk: convert[T](L.Bk), bv: convert[T](L.Bv), bo: convert[T](L.Bo)}
		if cfg.QKNorm {
			nl.qNorm, nl.kNorm = convert[T](L.QNorm), convert[T](L.KNorm)
		}
		if f := fused[l].qkv; f.Len() > 0 {
			nl.wqkv = toWmat[T](f)
			q, k := L.Wq.Len(), L.Wk.Len()
			nl.wq, nl.wk, nl.wv = nl.wqkv.slice(0, q), nl.wqkv.slice(q, q+k), nl.wqkv.slice(q+k, f.Len())
		} else {
			nl.wq, nl.wk, nl.wv = toWmat[T](L.Wq), toWmat[T](L.Wk), toWmat[T](L.Wv)
		}
		if f := fused[l].gu; f.Len() > 0 {
			nl.wgu = toWmat[T](f)
			g := L.Wgate.Len()
			nl.wgate, nl.wup = nl.wgu.slice(0, g), nl.wgu.slice(g, f.Len())
		} else {
			nl.wgate, nl.wup = toWmat[T](L.Wgate), toWmat[T](L.Wup)
		}
		n.layers = append(n.layers, nl)
	}
	return n, nil
}

// Factors is one projection's LoRA pair in T (ΔW = scale·B·A) with the
// gradients of A and B when training (nil otherwise).
type Factors[T Float] struct {
	A, B   []T // [r, in], [out, r]
	DA, DB []T
}

// LoRA is an adapter laid out for the passes in T: per layer, the factors of
// each module (nil: not adapted).
type LoRA[T Float] struct {
	Rank   int
	Scale  T
	Layers [][numModules]*Factors[T]
}

// NewLoRA lays out ad in T. For float32 the factors alias the adapter's, so
// an optimizer that updates them updates ad. grads allocates gradients.
func NewLoRA[T Float](ad *Adapter, grads bool) *LoRA[T] {
	lo := &LoRA[T]{Rank: ad.Config.Rank, Scale: T(ad.Config.Alpha / float64(ad.Config.Rank)),
		Layers: make([][numModules]*Factors[T], len(ad.Layers))}
	for l, mods := range ad.Layers {
		for mi, name := range AllModules {
			p := mods[name]
			if p == nil {
				continue
			}
			f := &Factors[T]{A: convert[T](p.A), B: convert[T](p.B)}
			if grads {
				f.DA, f.DB = make([]T, len(p.A)), make([]T, len(p.B))
			}
			lo.Layers[l][mi] = f
		}
	}
	return lo
}

// Each calls f for every adapted module in layer and AllModules order.
func (lo *LoRA[T]) Each(f func(layer int, module string, fa *Factors[T])) {
	for l := range lo.Layers {
		for mi, fa := range lo.Layers[l] {
			if fa != nil {
				f(l, AllModules[mi], fa)
			}
		}
	}
}

// ZeroGrads clears every gradient.
func (lo *LoRA[T]) ZeroGrads() {
	lo.Each(func(_ int, _ string, fa *Factors[T]) {
		clear(fa.DA)
		clear(fa.DB)
	})
}

// layout is the adapter laid out for serving (float32, aliasing its
// factors), built once: the adapter must not gain or lose modules after its
// first use.
func (a *Adapter) layout() *LoRA[float32] {
	if lo := a.lay.Load(); lo != nil {
		return lo
	}
	lo := NewLoRA[float32](a, false)
	a.lay.CompareAndSwap(nil, lo)
	return a.lay.Load()
}

// adapterLayout is the lazily built serving layout of an Adapter.
type adapterLayout = atomic.Pointer[LoRA[float32]]

// loraRows is the adapter of the rows [R0, R1) of a pass (L nil: the base).
type loraRows[T Float] struct {
	R0, R1 int
	L      *LoRA[T]
}

func (g loraRows[T]) factors(l, mod int) *Factors[T] {
	if g.L == nil {
		return nil
	}
	return g.L.Layers[l][mod]
}

// span is one sequence's rows in a pass: rows [R0, R0+N) are its tokens at
// positions P0..P0+N−1. With seq set (serving) the rows' keys and values are
// appended to its KV cache and attention reads the cache; otherwise
// (training) its keys are the rows of its ancestor spans anc (root first,
// covering positions [0, P0): a shared prefix) and then its own rows.
type span struct {
	R0, N, P0 int
	seq       *Seq
	anc       []int
}

// rowsState is what the layers need to know about the rows of a pass, and
// its scratch shared across layers.
type rowsState[T Float] struct {
	N        int
	cos, sin []T // [N, D/2] RoPE of each row's position
	groups   []loraRows[T]
	rmax     int // largest LoRA rank of the groups (at least 1)
	spans    []span
	views    []attnView[T]
	chunks   []kvChunk[T]     // the views' chunks
	anc      []attnGrads[T]   // per view, for the backward
	scr      []attnScratch[T] // per worker
	tasks    attnTasks        // the attention's tasks and decode blocks
	qkv      []T              // fused q/k/v product
	mods     []loraMod[T]     // one step's LoRA updates (loraForwardAll)
}

// setRows prepares st for the rows at positions pos.
func (n *Net[T]) setRows(st *rowsState[T], pos []int, groups []loraRows[T], spans []span) {
	half := n.Config.HeadDim / 2
	st.N = len(pos)
	st.cos, st.sin = grow(st.cos, st.N*half), grow(st.sin, st.N*half)
	ropeRows(n.invFreq, pos, st.cos, st.sin)
	st.groups, st.spans = groups, spans
	st.rmax = 1
	for _, g := range groups {
		if g.L != nil {
			st.rmax = max(st.rmax, g.L.Rank)
		}
	}
	st.views = grow(st.views, len(spans))
	nc := 0
	for _, sp := range spans {
		nc += len(sp.anc) + 1
	}
	st.chunks = grow(st.chunks, nc)
	if len(st.anc) < len(spans) {
		st.anc = append(st.anc, make([]attnGrads[T], len(spans)-len(st.anc))...)
	}
	if w := par.Workers(); len(st.scr) < w {
		st.scr = append(st.scr, make([]attnScratch[T], w-len(st.scr))...)
	}
}

func (n *Net[T]) geom() attnGeom {
	c := n.Config
	return attnGeom{nh: c.NumHeads, nkv: c.NumKVHeads, d: c.HeadDim, win: c.SlidingWindow}
}

// acts are one layer's activations over N rows (its input x is kept
// outside). Serving reuses one set for every layer with q, k rotated in
// place (qn, qr alias q; kn, kr alias k) and no lse; training keeps them
// apart for the backward.
type acts[T Float] struct {
	xn1, rinv1 []T // [N,H], [N]
	q, k, v    []T // [N,Q], [N,KV], [N,KV] projections (+bias, +LoRA)
	qa, ka, va []T // [N,rmax] LoRA x·Aᵀ
	qn, kn     []T // after q/k norm (Qwen3), else alias q, k
	rq, rk     []T // [N·nh], [N·nkv] q/k-norm rinv
	qr, kr     []T // after RoPE
	lse        []T // [N,nh] attention log-sum-exp (training)
	att, oa    []T // [N,Q], [N,rmax]
	x2         []T // [N,H] residual after attention
	xn2, rinv2 []T
	gu, ga, ua []T // [N,2I] gate|up per row, [N,rmax], [N,rmax]
	h, da      []T // [N,I], [N,rmax]
	train      bool
	own        [4][]T // training's own qn, kn, qr, kr buffers (reused)
}

// actElems is the number of elements of one layer's training activations.
func (n *Net[T]) actElems(N, rmax int) int64 {
	c := n.Config
	H, I, Q, KV, r := int64(c.HiddenSize), int64(c.IntermediateSize), int64(c.QDim()), int64(c.KVDim()), int64(rmax)
	e := int64(N) * (3*H + 2 + 3*Q + 3*KV + 7*r + 3*I + int64(c.NumHeads))
	if c.QKNorm {
		e += int64(N) * (Q + KV + int64(c.NumHeads+c.NumKVHeads))
	}
	return e
}

// ensure sizes a for N rows.
func (a *acts[T]) ensure(n *Net[T], N, rmax int, train bool) {
	c := n.Config
	H, I, Q, KV := c.HiddenSize, c.IntermediateSize, c.QDim(), c.KVDim()
	a.train = train
	a.xn1, a.rinv1 = grow(a.xn1, N*H), grow(a.rinv1, N)
	a.q, a.k, a.v = grow(a.q, N*Q), grow(a.k, N*KV), grow(a.v, N*KV)
	a.qa, a.ka, a.va = grow(a.qa, N*rmax), grow(a.ka, N*rmax), grow(a.va, N*rmax)
	a.att, a.oa, a.x2 = grow(a.att, N*Q), grow(a.oa, N*rmax), grow(a.x2, N*H)
	a.xn2, a.rinv2 = grow(a.xn2, N*H), grow(a.rinv2, N)
	a.gu, a.ga, a.ua = grow(a.gu, N*2*I), grow(a.ga, N*rmax), grow(a.ua, N*rmax)
	a.h, a.da = grow(a.h, N*I), grow(a.da, N*rmax)
	a.qn, a.kn, a.qr, a.kr = a.q, a.k, a.q, a.k
	if train {
		if c.QKNorm {
			a.own[0], a.own[1] = grow(a.own[0], N*Q), grow(a.own[1], N*KV)
			a.qn, a.kn = a.own[0], a.own[1]
		}
		a.own[2], a.own[3] = grow(a.own[2], N*Q), grow(a.own[3], N*KV)
		a.qr, a.kr = a.own[2], a.own[3]
		a.lse = grow(a.lse, N*c.NumHeads)
	}
	if c.QKNorm {
		a.rq, a.rk = grow(a.rq, N*c.NumHeads), grow(a.rk, N*c.NumKVHeads)
	}
}

// splitQKV copies the rows [lo, hi) of the fused projection's output
// qkv [N, Q+2·KV] into q, k and v.
func splitQKV[T Float](lo, hi int, qkv []T, Q, KV int, q, k, v []T) {
	W := Q + 2*KV
	for r := lo; r < hi; r++ {
		row := qkv[r*W : (r+1)*W]
		copy(q[r*Q:(r+1)*Q], row[:Q])
		copy(k[r*KV:(r+1)*KV], row[Q:Q+KV])
		copy(v[r*KV:(r+1)*KV], row[Q+KV:])
	}
}

// blockForward runs decoder layer l on the rows x [N,H] and writes its
// output to out [N,H] (out may be x when a is not kept for a backward),
// leaving its activations in a.
//
//	xn1 = RMSNorm(x)·w1
//	q, k, v = xn1·Wqᵀ(+bq), xn1·Wkᵀ(+bk), xn1·Wvᵀ(+bv)     (+ LoRA)
//	q, k = per-head RMSNorm (Qwen3); RoPE(q), RoPE(k)
//	att = causal GQA softmax(q·kᵀ/√D)·v   (over each sequence's keys)
//	x2 = x + att·Woᵀ(+bo)                                  (+ LoRA)
//	xn2 = RMSNorm(x2)·w2
//	out = x2 + (silu(xn2·Wgᵀ) ⊙ xn2·Wuᵀ)·Wdᵀ               (+ LoRA)
func (n *Net[T]) blockForward(l int, st *rowsState[T], x []T, a *acts[T], out []T) {
	c := n.Config
	L := &n.layers[l]
	N, H, I, D := st.N, c.HiddenSize, c.IntermediateSize, c.HeadDim
	Q, KV, nh, nkv := c.QDim(), c.KVDim(), c.NumHeads, c.NumKVHeads
	eps, gs, rm := c.RMSNormEps, st.groups, st.rmax

	// attention block
	rmsnormForward(x, L.attnNorm, N, H, eps, a.xn1, a.rinv1)
	if !L.wqkv.empty() {
		W := Q + 2*KV
		st.qkv = grow(st.qkv, N*W)
		mulNT(N, W, H, a.xn1, H, L.wqkv, 0, st.qkv, W)
		if par.Serial(N, W) { // a decode step: no closure to allocate
			splitQKV(0, N, st.qkv, Q, KV, a.q, a.k, a.v)
		} else {
			par.Range(N, W, func(lo, hi int) { splitQKV(lo, hi, st.qkv, Q, KV, a.q, a.k, a.v) })
		}
		if L.bq != nil {
			addBias(a.q, N, Q, L.bq)
			addBias(a.k, N, KV, L.bk)
			addBias(a.v, N, KV, L.bv)
		}
	} else {
		linearForward(a.xn1, N, H, L.wq, L.bq, Q, a.q, Q)
		linearForward(a.xn1, N, H, L.wk, L.bk, KV, a.k, KV)
		linearForward(a.xn1, N, H, L.wv, L.bv, KV, a.v, KV)
	}
	st.mods = append(st.mods[:0],
		loraMod[T]{mod: modQ, in: H, ldy: Q, x: a.xn1, y: a.q, xa: a.qa},
		loraMod[T]{mod: modK, in: H, ldy: KV, x: a.xn1, y: a.k, xa: a.ka},
		loraMod[T]{mod: modV, in: H, ldy: KV, x: a.xn1, y: a.v, xa: a.va})
	loraForwardAll(gs, l, st.mods, rm, a.train)
	if L.qNorm != nil {
		rmsnormForward(a.q, L.qNorm, N*nh, D, eps, a.qn, a.rq)
		rmsnormForward(a.k, L.kNorm, N*nkv, D, eps, a.kn, a.rk)
	}
	if a.train {
		copy(a.qr, a.qn)
		copy(a.kr, a.kn)
	}
	ropeForward(a.qr, N, nh, D, st.cos, st.sin)
	ropeForward(a.kr, N, nkv, D, st.cos, st.sin)
	n.attendViews(l, st, a)
	var lse []T
	if a.train {
		lse = a.lse
	}
	attentionForward(a.qr, st.views, n.geom(), lse, a.att, st.scr, &st.tasks)
	linearForward(a.att, N, Q, L.wo, L.bo, H, a.x2, H)
	st.mods = append(st.mods[:0], loraMod[T]{mod: modO, in: Q, ldy: H, x: a.att, y: a.x2, xa: a.oa})
	loraForwardAll(gs, l, st.mods, rm, a.train)
	addInto(a.x2, x)

	// MLP block
	rmsnormForward(a.x2, L.mlpNorm, N, H, eps, a.xn2, a.rinv2)
	if !L.wgu.empty() {
		mulNT(N, 2*I, H, a.xn2, H, L.wgu, 0, a.gu, 2*I)
	} else {
		mulNT(N, I, H, a.xn2, H, L.wgate, 0, a.gu, 2*I)
		mulNT(N, I, H, a.xn2, H, L.wup, 0, a.gu[I:], 2*I)
	}
	st.mods = append(st.mods[:0],
		loraMod[T]{mod: modGate, in: H, ldy: 2 * I, x: a.xn2, y: a.gu, xa: a.ga},
		loraMod[T]{mod: modUp, in: H, ldy: 2 * I, x: a.xn2, y: a.gu[I:], xa: a.ua})
	loraForwardAll(gs, l, st.mods, rm, a.train)
	swigluForward(a.gu, N, I, a.h)
	linearForward(a.h, N, I, L.wdown, nil, H, out, H)
	st.mods = append(st.mods[:0], loraMod[T]{mod: modDown, in: I, ldy: H, x: a.h, y: out, xa: a.da})
	loraForwardAll(gs, l, st.mods, rm, a.train)
	addInto(out, a.x2)
}

// attendViews sets st.views to where each span's keys and values of layer
// l are, appending the new rows' keys and values to the KV caches of
// serving spans.
func (n *Net[T]) attendViews(l int, st *rowsState[T], a *acts[T]) {
	c := n.Config
	KV, D := c.KVDim(), c.HeadDim
	chunks := st.chunks[:0]
	rows := func(sp span) kvChunk[T] {
		return kvChunk[T]{K: a.kr[sp.R0*KV:], V: a.v[sp.R0*KV:], RS: KV, HS: D, P0: sp.P0, N: sp.N, R0: sp.R0}
	}
	for i, sp := range st.spans {
		k0 := len(chunks)
		if sp.seq == nil {
			for _, ai := range sp.anc {
				chunks = append(chunks, rows(st.spans[ai]))
			}
			chunks = append(chunks, rows(sp))
		} else {
			s := sp.seq
			kc, vc := any(s.k[l]).([]T), any(s.v[l]).([]T)
			for t := 0; t < sp.N; t++ {
				r, pos := sp.R0+t, sp.P0+t
				for h := 0; h < c.NumKVHeads; h++ {
					off := (h*s.cap + pos) * D
					copy(kc[off:off+D], a.kr[r*KV+h*D:r*KV+(h+1)*D])
					copy(vc[off:off+D], a.v[r*KV+h*D:r*KV+(h+1)*D])
				}
			}
			chunks = append(chunks, kvChunk[T]{K: kc, V: vc, RS: D, HS: s.cap * D, P0: 0, N: sp.P0 + sp.N, R0: -1})
		}
		st.views[i] = attnView[T]{R0: sp.R0, N: sp.N, P0: sp.P0, KV: chunks[k0:len(chunks):len(chunks)]}
	}
	st.chunks = chunks
}

// addInto adds x to dst elementwise.
func addInto[T Float](dst, x []T) {
	if d32, ok := any(dst).([]float32); ok {
		kernels.Add(d32, any(x).([]float32))
		return
	}
	for i, v := range x {
		dst[i] += v
	}
}

// scratch holds the backward's temporaries, shared by all layers.
type scratch[T Float] struct {
	dh, dgu  []T // [N,I], [N,2I]
	dxn, dx2 []T // [N,H]
	datt, dq []T // [N,Q]
	dk, dv   []T // [N,KV]
	dqn, dkn []T // q/k-norm inputs' gradients
	dqkv     []T // [N,Q+2KV] for the fused product
	dyB      []T // [N,rmax]
}

// getScratch is the backward's scratch for N rows, reused across steps
// (every buffer is overwritten before it is read).
func (n *Net[T]) getScratch(N, rmax int) *scratch[T] {
	c := n.Config
	H, I, Q, KV := c.HiddenSize, c.IntermediateSize, c.QDim(), c.KVDim()
	s, _ := n.scrPool.Get().(*scratch[T])
	if s == nil {
		s = &scratch[T]{}
	}
	s.dh, s.dgu = grow(s.dh, N*I), grow(s.dgu, N*2*I)
	s.dxn, s.dx2, s.datt, s.dq = grow(s.dxn, N*H), grow(s.dx2, N*H), grow(s.datt, N*Q), grow(s.dq, N*Q)
	s.dk, s.dv, s.dyB = grow(s.dk, N*KV), grow(s.dv, N*KV), grow(s.dyB, N*rmax)
	if c.QKNorm {
		s.dqn, s.dkn = grow(s.dqn, N*Q), grow(s.dkn, N*KV)
	}
	return s
}

// blockBackward takes dout [N,H] (gradient of layer l's output), adds the
// LoRA gradients of layer l and writes the gradient of its input x to dx.
// a holds the layer's training activations; dout and dx may not alias.
func (n *Net[T]) blockBackward(l int, st *rowsState[T], x []T, a *acts[T], dout, dx []T, s *scratch[T]) {
	c := n.Config
	L := &n.layers[l]
	N, H, I, D := st.N, c.HiddenSize, c.IntermediateSize, c.HeadDim
	Q, KV, nh, nkv := c.QDim(), c.KVDim(), c.NumHeads, c.NumKVHeads
	gs, rm := st.groups, st.rmax

	// MLP: out = x2 + down(swiglu(gate(xn2), up(xn2)))
	linearBackward(dout, N, H, L.wdown, I, s.dh, false)
	loraBackward(gs, l, modDown, a.h, I, a.da, rm, dout, H, s.dh, s.dyB)
	swigluBackward(a.gu, N, I, s.dh, s.dgu)
	if !L.wgu.empty() {
		linearBackward(s.dgu, N, 2*I, L.wgu, H, s.dxn, false)
	} else {
		mulNN(N, H, I, s.dgu, 2*I, L.wgate, 0, s.dxn, H)
		mulNN(N, H, I, s.dgu[I:], 2*I, L.wup, 1, s.dxn, H)
	}
	loraBackward(gs, l, modGate, a.xn2, H, a.ga, rm, s.dgu, 2*I, s.dxn, s.dyB)
	loraBackward(gs, l, modUp, a.xn2, H, a.ua, rm, s.dgu[I:], 2*I, s.dxn, s.dyB)
	rmsnormBackward(a.x2, L.mlpNorm, a.rinv2, s.dxn, N, H, s.dx2, dout) // + residual

	// attention: x2 = x + o(att)
	linearBackward(s.dx2, N, H, L.wo, Q, s.datt, false)
	loraBackward(gs, l, modO, a.att, Q, a.oa, rm, s.dx2, H, s.datt, s.dyB)
	dq, dk := s.dq, s.dk
	if L.qNorm != nil {
		dq, dk = s.dqn, s.dkn
	}
	n.attendViews(l, st, a)
	attentionBackward(a.qr, a.lse, s.datt, st.views[:len(st.spans)], n.geom(), dq, dk, s.dv, st.anc, st.scr)
	ropeBackward(dq, N, nh, D, st.cos, st.sin)
	ropeBackward(dk, N, nkv, D, st.cos, st.sin)
	if L.qNorm != nil {
		rmsnormBackward(a.q, L.qNorm, a.rq, s.dqn, N*nh, D, s.dq, nil)
		rmsnormBackward(a.k, L.kNorm, a.rk, s.dkn, N*nkv, D, s.dk, nil)
	}
	if !L.wqkv.empty() {
		W := Q + 2*KV
		s.dqkv = grow(s.dqkv, N*W)
		par.Range(N, W, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				row := s.dqkv[r*W : (r+1)*W]
				copy(row[:Q], s.dq[r*Q:(r+1)*Q])
				copy(row[Q:Q+KV], s.dk[r*KV:(r+1)*KV])
				copy(row[Q+KV:], s.dv[r*KV:(r+1)*KV])
			}
		})
		linearBackward(s.dqkv, N, W, L.wqkv, H, s.dxn, false)
	} else {
		linearBackward(s.dq, N, Q, L.wq, H, s.dxn, false)
		linearBackward(s.dk, N, KV, L.wk, H, s.dxn, true)
		linearBackward(s.dv, N, KV, L.wv, H, s.dxn, true)
	}
	loraBackward(gs, l, modQ, a.xn1, H, a.qa, rm, s.dq, Q, s.dxn, s.dyB)
	loraBackward(gs, l, modK, a.xn1, H, a.ka, rm, s.dk, KV, s.dxn, s.dyB)
	loraBackward(gs, l, modV, a.xn1, H, a.va, rm, s.dv, KV, s.dxn, s.dyB)
	rmsnormBackward(x, L.attnNorm, a.rinv1, s.dxn, N, H, dx, s.dx2) // + residual
}

// finalNorm gathers the rows rows of x into hx [len(rows), H] and writes
// their final-normed hidden states to hf (which may be hx); rinv
// [len(rows)] is saved when not nil.
func (n *Net[T]) finalNorm(x []T, rows []int, hx, hf, rinv []T) {
	H := n.Config.HiddenSize
	for i, r := range rows {
		copy(hx[i*H:(i+1)*H], x[r*H:(r+1)*H])
	}
	rmsnormForward(hx, n.norm, len(rows), H, n.Config.RMSNormEps, hf, rinv)
}

// headForward: logits z [m, V] = hf [m, H] · LMHeadᵀ.
func (n *Net[T]) headForward(hf []T, m int, z []T) {
	H, V := n.Config.HiddenSize, n.Config.VocabSize
	mulNT(m, V, H, hf, H, n.lmHead, 0, z, V)
}

func (n *Net[T]) checkLoRA(lo *LoRA[T]) error {
	if lo != nil && len(lo.Layers) != n.Config.NumLayers {
		return fmt.Errorf("engine: adapter has %d layers, model has %d", len(lo.Layers), n.Config.NumLayers)
	}
	return nil
}
