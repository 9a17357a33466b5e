package train

import (
	"fmt"
	"math"

	"flywheel/internal/engine"
)

// model is the frozen base model in T plus the trainable LoRA pairs, laid out
// for the training forward/backward over packed batches.
type model[T Float] struct {
	cfg      *engine.Config
	embed    []T // [V,H]
	norm     []T // [H]
	lmHead   []T // [V,H] (the embedding when tied)
	layers   []block[T]
	invFreq  []float64
	cos, sin []T // [maxPos, D/2], grown on demand
	maxPos   int

	// ActivationBudget bounds the bytes of saved per-layer activations: when
	// a batch's activations for all layers fit, they are kept from the
	// forward; otherwise only each layer's input is kept and the layer is
	// recomputed just before its backward.
	ActivationBudget int64
	// HeadBudget bounds the bytes of lm-head probabilities kept between the
	// forward and the backward; above it they are recomputed chunk by chunk.
	HeadBudget int64
}

type block[T Float] struct {
	attnNorm, mlpNorm []T
	qNorm, kNorm      []T // [D] or nil
	q, k, v, o        linear[T]
	gate, up, down    linear[T]
}

func (b *block[T]) linears() []*linear[T] {
	return []*linear[T]{&b.q, &b.k, &b.v, &b.o, &b.gate, &b.up, &b.down}
}

// newModel wraps base weights (aliased when T is float32, converted
// otherwise) and the adapter's pairs (aliased likewise; gradients are
// allocated here). ad may be nil (no LoRA).
func newModel[T Float](cfg *engine.Config, w *engine.Weights, ad *engine.Adapter) (*model[T], error) {
	if len(w.Layers) != cfg.NumLayers {
		return nil, fmt.Errorf("train: weights have %d layers, config %d", len(w.Layers), cfg.NumLayers)
	}
	m := &model[T]{cfg: cfg, embed: convert[T](w.Embed), norm: convert[T](w.Norm),
		invFreq: ropeInvFreq(cfg), ActivationBudget: 2 << 30, HeadBudget: 256 << 20}
	if cfg.TieWordEmbeddings || w.LMHead == nil || (len(w.LMHead) > 0 && len(w.Embed) > 0 && &w.LMHead[0] == &w.Embed[0]) {
		m.lmHead = m.embed
	} else {
		m.lmHead = convert[T](w.LMHead)
	}
	H, I, Q, KV := cfg.HiddenSize, cfg.IntermediateSize, cfg.QDim(), cfg.KVDim()
	var scale T
	rank := 0
	if ad != nil {
		scale = T(ad.Config.Alpha / float64(ad.Config.Rank))
		rank = ad.Config.Rank
		if len(ad.Layers) != cfg.NumLayers {
			return nil, fmt.Errorf("train: adapter has %d layers, model %d", len(ad.Layers), cfg.NumLayers)
		}
	}
	mk := func(l int, mod string, W, bias []float32, out, in int) linear[T] {
		ln := linear[T]{W: convert[T](W), Bias: convert[T](bias), Out: out, In: in, R: rank, S: scale}
		if ad != nil {
			if p := ad.Layers[l][mod]; p != nil {
				ln.L = &lora[T]{A: convert[T](p.A), B: convert[T](p.B), dA: make([]T, len(p.A)), dB: make([]T, len(p.B))}
			}
		}
		return ln
	}
	for l, wl := range w.Layers {
		m.layers = append(m.layers, block[T]{
			attnNorm: convert[T](wl.AttnNorm), mlpNorm: convert[T](wl.MLPNorm),
			qNorm: convert[T](wl.QNorm), kNorm: convert[T](wl.KNorm),
			q:    mk(l, engine.ModQ, wl.Wq, wl.Bq, Q, H),
			k:    mk(l, engine.ModK, wl.Wk, wl.Bk, KV, H),
			v:    mk(l, engine.ModV, wl.Wv, wl.Bv, KV, H),
			o:    mk(l, engine.ModO, wl.Wo, nil, H, Q),
			gate: mk(l, engine.ModGate, wl.Wgate, nil, I, H),
			up:   mk(l, engine.ModUp, wl.Wup, nil, I, H),
			down: mk(l, engine.ModDown, wl.Wdown, nil, H, I),
		})
		if !cfg.QKNorm {
			m.layers[l].qNorm, m.layers[l].kNorm = nil, nil
		}
	}
	return m, nil
}

// zeroGrads clears every LoRA gradient.
func (m *model[T]) zeroGrads() {
	for i := range m.layers {
		for _, ln := range m.layers[i].linears() {
			if ln.L != nil {
				clear(ln.L.dA)
				clear(ln.L.dB)
			}
		}
	}
}

// ropeInvFreq is the RoPE inverse frequency per rotated pair, with the
// llama3 scaling of Hugging Face's _compute_llama3_parameters when declared.
func ropeInvFreq(cfg *engine.Config) []float64 {
	d := cfg.HeadDim
	inv := make([]float64, d/2)
	for i := range inv {
		inv[i] = 1 / math.Pow(cfg.RopeTheta, float64(2*i)/float64(d))
	}
	rs := cfg.RopeScaling
	if rs == nil || (rs.RopeType != "llama3" && rs.Type != "llama3") {
		return inv
	}
	factor, lowF, highF := rs.Factor, rs.LowFreqFactor, rs.HighFreqFactor
	old := float64(rs.OriginalMaxPositionEmbeddings)
	lowWave, highWave := old/lowF, old/highF
	for i, f := range inv {
		wave := 2 * math.Pi / f
		switch {
		case wave < highWave:
		case wave > lowWave:
			inv[i] = f / factor
		default:
			smooth := (old/wave - lowF) / (highF - lowF)
			inv[i] = (1-smooth)*f/factor + smooth*f
		}
	}
	return inv
}

func (m *model[T]) ensureRope(n int) {
	if n <= m.maxPos {
		return
	}
	n = max(n, 2*m.maxPos, 256)
	m.cos, m.sin = ropeTables[T](m.invFreq, n)
	m.maxPos = n
}

// batch is a packed set of sequences. Rows lists the positions t whose
// next-token logprob log p(tokens[t+1] | ≤t) is needed; Targets the tokens.
type batch struct {
	Tokens  []int
	Pos     []int
	Segs    []seg
	Rows    []int
	Targets []int
}

// acts are one layer's saved activations (x, its input, is kept outside).
type acts[T Float] struct {
	xn1, rinv1   []T // [N,H], [N]
	q, k, v      []T // [N,Q], [N,KV], [N,KV] projections (+bias)
	qa, ka, va   []T // [N,r] LoRA x·Aᵀ
	qn, kn       []T // after q/k norm (Qwen3), else alias q, k
	rq, rk       []T // [N·nh], [N·nkv] q/k-norm rinv
	qr, kr       []T // after RoPE
	lse          []T // [N,nh] attention log-sum-exp per row and head
	att, oa      []T // [N,Q], [N,r]
	x2           []T // [N,H] residual after attention
	xn2, rinv2   []T
	g, u, ga, ua []T // [N,I], [N,I], [N,r], [N,r]
	h, da        []T // [N,I], [N,r]
}

func (m *model[T]) actElems(b *batch) int64 {
	c := m.cfg
	N := int64(len(b.Tokens))
	H, I, Q, KV := int64(c.HiddenSize), int64(c.IntermediateSize), int64(c.QDim()), int64(c.KVDim())
	e := N * (3*H + 2 + 3*Q + 3*KV + 3*I + 7*16 + int64(c.NumHeads))
	if c.QKNorm {
		e += N * (Q + KV + int64(c.NumHeads+c.NumKVHeads))
	}
	return e
}

func newActs[T Float](m *model[T], b *batch) *acts[T] {
	c := m.cfg
	N := len(b.Tokens)
	H, I, Q, KV, r := c.HiddenSize, c.IntermediateSize, c.QDim(), c.KVDim(), max(m.layers[0].q.R, 1)
	a := &acts[T]{
		xn1: make([]T, N*H), rinv1: make([]T, N),
		q: make([]T, N*Q), k: make([]T, N*KV), v: make([]T, N*KV),
		qa: make([]T, N*r), ka: make([]T, N*r), va: make([]T, N*r),
		qr: make([]T, N*Q), kr: make([]T, N*KV), lse: make([]T, N*c.NumHeads),
		att: make([]T, N*Q), oa: make([]T, N*r), x2: make([]T, N*H),
		xn2: make([]T, N*H), rinv2: make([]T, N),
		g: make([]T, N*I), u: make([]T, N*I), ga: make([]T, N*r), ua: make([]T, N*r),
		h: make([]T, N*I), da: make([]T, N*r),
	}
	a.qn, a.kn = a.q, a.k
	if c.QKNorm {
		a.qn, a.kn = make([]T, N*Q), make([]T, N*KV)
		a.rq, a.rk = make([]T, N*c.NumHeads), make([]T, N*c.NumKVHeads)
	}
	return a
}

// blockForward runs decoder layer l on x [N,H] and writes its output to out
// [N,H], saving activations in a.
//
//	xn1 = RMSNorm(x)·w1
//	q, k, v = xn1·Wqᵀ(+bq), xn1·Wkᵀ(+bk), xn1·Wvᵀ(+bv)     (+ LoRA)
//	q, k = per-head RMSNorm (Qwen3); RoPE(q), RoPE(k)
//	att = causal GQA softmax(q·kᵀ/√D)·v
//	x2 = x + att·Woᵀ
//	xn2 = RMSNorm(x2)·w2
//	out = x2 + (silu(xn2·Wgᵀ) ⊙ xn2·Wuᵀ)·Wdᵀ
func (m *model[T]) blockForward(l int, b *batch, x []T, a *acts[T], out []T) {
	c := m.cfg
	blk := &m.layers[l]
	N, H, D := len(b.Tokens), c.HiddenSize, c.HeadDim
	nh, nkv := c.NumHeads, c.NumKVHeads
	eps := c.RMSNormEps

	rmsnormForward(x, blk.attnNorm, N, H, eps, a.xn1, a.rinv1)
	blk.q.forward(a.xn1, N, a.q, a.qa)
	blk.k.forward(a.xn1, N, a.k, a.ka)
	blk.v.forward(a.xn1, N, a.v, a.va)
	if blk.qNorm != nil {
		rmsnormForward(a.q, blk.qNorm, N*nh, D, eps, a.qn, a.rq)
		rmsnormForward(a.k, blk.kNorm, N*nkv, D, eps, a.kn, a.rk)
	}
	copy(a.qr, a.qn)
	copy(a.kr, a.kn)
	ropeForward(a.qr, N, nh, D, b.Pos, m.cos, m.sin)
	ropeForward(a.kr, N, nkv, D, b.Pos, m.cos, m.sin)
	attentionForward(a.qr, a.kr, a.v, b.Segs, nh, nkv, D, a.lse, a.att)
	blk.o.forward(a.att, N, a.x2, a.oa)
	for i := range a.x2 {
		a.x2[i] += x[i]
	}
	rmsnormForward(a.x2, blk.mlpNorm, N, H, eps, a.xn2, a.rinv2)
	blk.gate.forward(a.xn2, N, a.g, a.ga)
	blk.up.forward(a.xn2, N, a.u, a.ua)
	swigluForward(a.g, a.u, a.h)
	blk.down.forward(a.h, N, out, a.da)
	for i := range out {
		out[i] += a.x2[i]
	}
}

// scratch holds the backward's temporaries, shared by all layers.
type scratch[T Float] struct {
	dh, dg, du []T // [N,I]
	dxn, dx2   []T // [N,H]
	datt, dq   []T // [N,Q]
	dk, dv     []T // [N,KV]
	dqn, dkn   []T // q/k-norm inputs' gradients
	dyB        []T // [N,r]
}

func newScratch[T Float](m *model[T], N int) *scratch[T] {
	c := m.cfg
	H, I, Q, KV, r := c.HiddenSize, c.IntermediateSize, c.QDim(), c.KVDim(), max(m.layers[0].q.R, 1)
	s := &scratch[T]{dh: make([]T, N*I), dg: make([]T, N*I), du: make([]T, N*I),
		dxn: make([]T, N*H), dx2: make([]T, N*H), datt: make([]T, N*Q), dq: make([]T, N*Q),
		dk: make([]T, N*KV), dv: make([]T, N*KV), dyB: make([]T, N*r)}
	if c.QKNorm {
		s.dqn, s.dkn = make([]T, N*Q), make([]T, N*KV)
	}
	return s
}

// blockBackward takes dout [N,H] (gradient of the layer's output), adds the
// LoRA gradients of layer l and writes the gradient of its input to dx.
// dout and dx may not alias.
func (m *model[T]) blockBackward(l int, b *batch, x []T, a *acts[T], dout, dx []T, s *scratch[T]) {
	c := m.cfg
	blk := &m.layers[l]
	N, H, D := len(b.Tokens), c.HiddenSize, c.HeadDim
	nh, nkv := c.NumHeads, c.NumKVHeads

	// MLP: out = x2 + down(swiglu(gate(xn2), up(xn2)))
	blk.down.backward(a.h, a.da, dout, N, s.dh, false, s.dyB)
	swigluBackward(a.g, a.u, s.dh, s.dg, s.du)
	blk.gate.backward(a.xn2, a.ga, s.dg, N, s.dxn, false, s.dyB)
	blk.up.backward(a.xn2, a.ua, s.du, N, s.dxn, true, s.dyB)
	copy(s.dx2, dout) // residual
	rmsnormBackward(a.x2, blk.mlpNorm, a.rinv2, s.dxn, N, H, s.dx2, true)

	// attention: x2 = x + o(att)
	blk.o.backward(a.att, a.oa, s.dx2, N, s.datt, false, s.dyB)
	dq, dk := s.dq, s.dk
	if blk.qNorm != nil {
		dq, dk = s.dqn, s.dkn
	}
	attentionBackward(a.qr, a.kr, a.v, a.lse, s.datt, b.Segs, nh, nkv, D, dq, dk, s.dv)
	ropeBackward(dq, N, nh, D, b.Pos, m.cos, m.sin)
	ropeBackward(dk, N, nkv, D, b.Pos, m.cos, m.sin)
	if blk.qNorm != nil {
		rmsnormBackward(a.q, blk.qNorm, a.rq, s.dqn, N*nh, D, s.dq, false)
		rmsnormBackward(a.k, blk.kNorm, a.rk, s.dkn, N*nkv, D, s.dk, false)
	}
	blk.q.backward(a.xn1, a.qa, s.dq, N, s.dxn, false, s.dyB)
	blk.k.backward(a.xn1, a.ka, s.dk, N, s.dxn, true, s.dyB)
	blk.v.backward(a.xn1, a.va, s.dv, N, s.dxn, true, s.dyB)
	copy(dx, s.dx2) // residual
	rmsnormBackward(x, blk.attnNorm, a.rinv1, s.dxn, N, H, dx, true)
}

// pass is one forward over a batch, kept for its backward.
type pass[T Float] struct {
	m       *model[T]
	b       *batch
	xs      [][]T      // xs[l] input of layer l; xs[L] output of the last layer
	acts    []*acts[T] // per layer when kept, else nil
	hf      []T        // [N,H] final-normed hidden states
	rinvF   []T
	probs   [][]T // per head chunk [rows, V] when kept
	LogProb []float64
	Entropy []float64
}

const headChunk = 128

// forward runs the model over b and returns, for each of b.Rows, the
// logprob of its target and the entropy of the predicted distribution.
func (m *model[T]) forward(b *batch) *pass[T] {
	c := m.cfg
	N, H := len(b.Tokens), c.HiddenSize
	m.ensureRope(maxPos(b) + 1)
	p := &pass[T]{m: m, b: b, xs: make([][]T, c.NumLayers+1)}
	p.xs[0] = make([]T, N*H)
	embedForward(m.embed, H, b.Tokens, p.xs[0])
	keep := m.actElems(b)*int64(c.NumLayers)*int64(sizeof[T]()) <= m.ActivationBudget
	var shared *acts[T]
	if keep {
		p.acts = make([]*acts[T], c.NumLayers)
	} else {
		shared = newActs(m, b)
	}
	for l := 0; l < c.NumLayers; l++ {
		a := shared
		if keep {
			a = newActs(m, b)
			p.acts[l] = a
		}
		p.xs[l+1] = make([]T, N*H)
		m.blockForward(l, b, p.xs[l], a, p.xs[l+1])
	}
	p.hf, p.rinvF = make([]T, N*H), make([]T, N)
	rmsnormForward(p.xs[c.NumLayers], m.norm, N, H, c.RMSNormEps, p.hf, p.rinvF)

	M := len(b.Rows)
	p.LogProb, p.Entropy = make([]float64, M), make([]float64, M)
	keepHead := int64(M)*int64(c.VocabSize)*int64(sizeof[T]()) <= m.HeadBudget
	for c0 := 0; c0 < M; c0 += headChunk {
		c1 := min(c0+headChunk, M)
		pr := m.headChunk(p, c0, c1)
		if keepHead {
			p.probs = append(p.probs, pr)
		}
	}
	return p
}

// headChunk computes the probabilities [c1−c0, V] of rows c0..c1 of the
// head (logits = hf·LMHeadᵀ, then softmax), filling LogProb and Entropy.
func (m *model[T]) headChunk(p *pass[T], c0, c1 int) []T {
	H, V := m.cfg.HiddenSize, m.cfg.VocabSize
	n := c1 - c0
	hr := make([]T, n*H)
	for i := 0; i < n; i++ {
		r := p.b.Rows[c0+i]
		copy(hr[i*H:(i+1)*H], p.hf[r*H:(r+1)*H])
	}
	z := make([]T, n*V)
	gemm(false, true, n, V, H, 1, hr, H, m.lmHead, H, 0, z, V)
	parallelFor(n, func(i0, i1 int) {
		for i := i0; i < i1; i++ {
			lp, ent := logSoftmaxForward(z[i*V:(i+1)*V], p.b.Targets[c0+i])
			p.LogProb[c0+i], p.Entropy[c0+i] = lp, ent
		}
	})
	return z
}

// backward takes dLogProb (∂loss/∂LogProb[i] per row) and adds the LoRA
// gradients of the whole model.
func (p *pass[T]) backward(dLogProb []float64) {
	m, b := p.m, p.b
	c := m.cfg
	N, H, V := len(b.Tokens), c.HiddenSize, c.VocabSize
	M := len(b.Rows)

	// head: dz = g·(onehot − p); dhf[row] = dz·LMHead
	dhf := make([]T, N*H)
	for c0, ci := 0, 0; c0 < M; c0, ci = c0+headChunk, ci+1 {
		c1 := min(c0+headChunk, M)
		n := c1 - c0
		var pr []T
		if p.probs != nil {
			pr = p.probs[ci]
		} else {
			save := append([]float64(nil), p.LogProb[c0:c1]...)
			pr = m.headChunk(p, c0, c1)
			copy(p.LogProb[c0:c1], save)
		}
		parallelFor(n, func(i0, i1 int) {
			for i := i0; i < i1; i++ {
				row := pr[i*V : (i+1)*V]
				logSoftmaxBackward(row, b.Targets[c0+i], T(dLogProb[c0+i]), row)
			}
		})
		dhr := make([]T, n*H)
		gemm(false, false, n, H, V, 1, pr, V, m.lmHead, H, 0, dhr, H)
		for i := 0; i < n; i++ {
			r := b.Rows[c0+i]
			row := dhf[r*H : (r+1)*H]
			for j, g := range dhr[i*H : (i+1)*H] {
				row[j] += g
			}
		}
	}
	p.probs = nil

	// final norm
	dx := make([]T, N*H)
	rmsnormBackward(p.xs[c.NumLayers], m.norm, p.rinvF, dhf, N, H, dx, false)

	s := newScratch(m, N)
	var shared *acts[T]
	if p.acts == nil {
		shared = newActs(m, b)
	}
	dnext := dhf // reuse as the other buffer
	for l := c.NumLayers - 1; l >= 0; l-- {
		a := shared
		if p.acts != nil {
			a = p.acts[l]
		} else {
			m.blockForward(l, b, p.xs[l], a, p.xs[l+1]) // recompute
		}
		m.blockBackward(l, b, p.xs[l], a, dx, dnext, s)
		dx, dnext = dnext, dx
		if p.acts != nil {
			p.acts[l] = nil
		}
	}
}

func maxPos(b *batch) int {
	m := 0
	for _, p := range b.Pos {
		m = max(m, p)
	}
	return m
}

func sizeof[T Float]() int {
	var z T
	if any(z) == any(float32(0)) {
		return 4
	}
	return 8
}
