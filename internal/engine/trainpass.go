package engine

import "fmt"

// Batch is a packed set of training sequences. Segs are the segments:
// tokens [Off, Off+Len) of Tokens. A segment may continue another (Parent):
// sequences that share a prefix (the prompt of a group of trajectories)
// hold it once, as a segment that their own segments continue, so its
// forward and backward run once. A segment's tokens are at positions
// P0..P0+Len−1 (Pos), where P0 is the total length of its ancestors, and
// attend to its ancestors' tokens and its own. Rows lists the rows t whose
// next-token logprob log p(Targets[i] | ≤t) is needed; a row may appear
// several times (the last row of a shared prefix predicts the first token
// of each continuation).
type Batch struct {
	Tokens  []int
	Pos     []int
	Segs    []Segment
	Parent  []int // per segment, the segment it continues (−1: none); nil: none does
	Rows    []int
	Targets []int
}

// Segment is one packed sequence: tokens [Off, Off+Len) of a Batch.
type Segment struct{ Off, Len int }

// Budgets bound the memory a training pass keeps between its forward and
// its backward.
type Budgets struct {
	// Activations bounds the bytes of saved per-layer activations: when a
	// batch's activations for all layers fit, they are kept from the
	// forward; otherwise only each layer's input is kept and the layer is
	// recomputed just before its backward.
	Activations int64
	// Head bounds the bytes of lm-head probabilities kept between the
	// forward and the backward; above it they are recomputed chunk by chunk.
	Head int64
}

// DefaultBudgets keeps up to 2 GiB of activations and 256 MiB of head
// probabilities.
var DefaultBudgets = Budgets{Activations: 2 << 30, Head: 256 << 20}

// Pass is one training forward over a batch, kept for its backward.
type Pass[T Float] struct {
	n        *Net[T]
	b        *Batch
	st       rowsState[T]
	xs       [][]T      // xs[l] input of layer l; xs[L] output of the last layer
	acts     []*acts[T] // per layer when kept, else nil
	shared   *acts[T]   // the one set reused by every layer when not kept
	hx, hf   []T        // [M,H] the rows' last hidden states and their final norm
	rinvF    []T
	probs    []T // [rows, V] of all rows when kept (see headChunkRows)
	headRows int // rows per head chunk
	budgets  Budgets
	// LogProb and Entropy are, per row of the batch, the logprob of its
	// target and the entropy of the predicted distribution.
	LogProb []float64
	Entropy []float64
}

// headChunk is the fewest rows the head computes at once.
const headChunk = 128

// ForwardBatch runs the model with the adapter lo (nil: the base model) over
// the packed sequences of b, through the same layer code as serving, and
// keeps what Backward needs.
func (n *Net[T]) ForwardBatch(b *Batch, lo *LoRA[T], bud Budgets) (*Pass[T], error) {
	c := n.Config
	N, H := len(b.Tokens), c.HiddenSize
	if err := n.checkBatch(b, lo); err != nil {
		return nil, err
	}
	p := &Pass[T]{n: n, b: b, xs: make([][]T, c.NumLayers+1), budgets: bud}
	spans := make([]span, len(b.Segs))
	for i, s := range b.Segs {
		spans[i] = span{R0: s.Off, N: s.Len}
		if p := b.parent(i); p >= 0 {
			spans[i].anc = append(append([]int(nil), spans[p].anc...), p)
			spans[i].P0 = spans[p].P0 + spans[p].N
		}
	}
	n.setRows(&p.st, b.Pos, []loraRows[T]{{R0: 0, R1: N, L: lo}}, spans)
	p.xs[0] = make([]T, N*H)
	embedForward(n.embed, H, b.Tokens, p.xs[0])
	keep := n.actElems(N, p.st.rmax)*int64(c.NumLayers)*int64(sizeof[T]()) <= bud.Activations
	if keep {
		p.acts = make([]*acts[T], c.NumLayers)
	} else {
		p.shared = n.getActs(N, p.st.rmax)
	}
	for l := 0; l < c.NumLayers; l++ {
		a := p.shared
		if keep {
			a = n.getActs(N, p.st.rmax)
			p.acts[l] = a
		}
		p.xs[l+1] = make([]T, N*H)
		n.blockForward(l, &p.st, p.xs[l], a, p.xs[l+1])
	}
	M := len(b.Rows)
	p.hx, p.hf, p.rinvF = make([]T, M*H), make([]T, M*H), make([]T, M)
	n.finalNorm(p.xs[c.NumLayers], b.Rows, p.hx, p.hf, p.rinvF)

	p.LogProb, p.Entropy = make([]float64, M), make([]float64, M)
	p.headRows = p.headChunkRows()
	keepHead := p.headRows >= M
	for c0 := 0; c0 < M; c0 += p.headRows {
		pr := p.headChunk(c0, min(c0+p.headRows, M))
		if keepHead {
			p.probs = pr
		} else {
			n.putHeadBuf(pr)
		}
	}
	return p, nil
}

// headChunkRows is how many rows the head computes at once: all of them
// when their probabilities fit the Head budget (one matrix product, kept
// for the backward), else as many as fit (at least headChunk), recomputed
// chunk by chunk in the backward.
func (p *Pass[T]) headChunkRows() int {
	M, V := len(p.b.Rows), int64(p.n.Config.VocabSize)*int64(sizeof[T]())
	if int64(M)*V <= p.budgets.Head {
		return max(M, 1)
	}
	return max(headChunk, int(p.budgets.Head/V))
}

// headBuf is a buffer of n elements for head probabilities, reused across
// steps (a step's probabilities are hundreds of MB; allocating them fresh
// costs page faults and zeroing every step).
func (n *Net[T]) headBuf(size int) []T {
	if b, _ := n.headPool.Get().(*[]T); b != nil && cap(*b) >= size {
		return (*b)[:size]
	}
	return make([]T, size)
}

func (n *Net[T]) putHeadBuf(b []T) { n.headPool.Put(&b) }

// checkBatch verifies the batch's shape: tokens in the vocabulary,
// segments tiling the tokens at positions 0..Len−1, rows inside them.
func (n *Net[T]) checkBatch(b *Batch, lo *LoRA[T]) error {
	c := n.Config
	if len(b.Pos) != len(b.Tokens) || len(b.Rows) != len(b.Targets) {
		return fmt.Errorf("engine: batch: %d tokens, %d positions, %d rows, %d targets", len(b.Tokens), len(b.Pos), len(b.Rows), len(b.Targets))
	}
	for _, t := range b.Tokens {
		if t < 0 || t >= c.VocabSize {
			return fmt.Errorf("engine: token id %d out of range [0,%d)", t, c.VocabSize)
		}
	}
	for _, t := range b.Targets {
		if t < 0 || t >= c.VocabSize {
			return fmt.Errorf("engine: target id %d out of range [0,%d)", t, c.VocabSize)
		}
	}
	if b.Parent != nil && len(b.Parent) != len(b.Segs) {
		return fmt.Errorf("engine: batch: %d segments, %d parents", len(b.Segs), len(b.Parent))
	}
	off := 0
	p0 := make([]int, len(b.Segs))
	for si, s := range b.Segs {
		if s.Off != off || s.Len <= 0 {
			return fmt.Errorf("engine: batch segments must tile the tokens in order")
		}
		if p := b.parent(si); p >= 0 || p < -1 {
			if p >= si || p < -1 {
				return fmt.Errorf("engine: batch segment %d continues segment %d, which does not come before it", si, p)
			}
			p0[si] = p0[p] + b.Segs[p].Len
		}
		if n := p0[si] + s.Len; n > c.MaxPositionEmbeddings {
			return fmt.Errorf("engine: context length exceeded: a sequence of %d tokens, the model's maximum is %d", n, c.MaxPositionEmbeddings)
		}
		for i := 0; i < s.Len; i++ {
			if b.Pos[s.Off+i] != p0[si]+i {
				return fmt.Errorf("engine: batch positions must run on from the parent's in each segment")
			}
		}
		off += s.Len
	}
	if off != len(b.Tokens) {
		return fmt.Errorf("engine: batch segments cover %d of %d tokens", off, len(b.Tokens))
	}
	for _, r := range b.Rows {
		if r < 0 || r >= len(b.Tokens) {
			return fmt.Errorf("engine: batch row %d out of range", r)
		}
	}
	return n.checkLoRA(lo)
}

// parent is segment i's parent (−1: none).
func (b *Batch) parent(i int) int {
	if b.Parent == nil {
		return -1
	}
	return b.Parent[i]
}

// headChunk computes the probabilities [c1−c0, V] of rows c0..c1 of the
// head (logits = hf·LMHeadᵀ, then softmax), filling LogProb and Entropy.
func (p *Pass[T]) headChunk(c0, c1 int) []T {
	H, V := p.n.Config.HiddenSize, p.n.Config.VocabSize
	z := p.n.headBuf((c1 - c0) * V)
	p.n.headForward(p.hf[c0*H:c1*H], c1-c0, z)
	parallelRows(c1-c0, V, func(i int) {
		lp, ent := logSoftmaxForward(z[i*V:(i+1)*V], p.b.Targets[c0+i])
		p.LogProb[c0+i], p.Entropy[c0+i] = lp, ent
	})
	return z
}

// Backward takes dLogProb (∂loss/∂LogProb[i] per row) and adds the gradients
// of the adapter's factors (Factors.DA, DB; allocated by NewLoRA with
// grads). It may be called once per Pass.
func (p *Pass[T]) Backward(dLogProb []float64) {
	n, b := p.n, p.b
	c := n.Config
	N, H, V := len(b.Tokens), c.HiddenSize, c.VocabSize
	M := len(b.Rows)

	// head: dz = g·(onehot − p); dhf = dz·LMHead
	dhf := make([]T, M*H)
	for c0 := 0; c0 < M; c0 += p.headRows {
		c1 := min(c0+p.headRows, M)
		pr := p.probs
		if pr == nil {
			save := append([]float64(nil), p.LogProb[c0:c1]...)
			pr = p.headChunk(c0, c1)
			copy(p.LogProb[c0:c1], save)
		}
		parallelRows(c1-c0, V, func(i int) {
			row := pr[i*V : (i+1)*V]
			logSoftmaxBackward(row, b.Targets[c0+i], T(dLogProb[c0+i]), row)
		})
		mulNN(c1-c0, H, V, pr, V, n.lmHead, 0, dhf[c0*H:], H)
		n.putHeadBuf(pr)
	}
	p.probs = nil

	// final norm, on the rows that feed the head
	dhx := make([]T, M*H)
	rmsnormBackward(p.hx, n.norm, p.rinvF, dhf, M, H, dhx, nil)
	dx := make([]T, N*H)
	for i, r := range b.Rows {
		row := dx[r*H : (r+1)*H]
		for j, g := range dhx[i*H : (i+1)*H] {
			row[j] += g
		}
	}

	s := n.getScratch(N, p.st.rmax)
	defer n.scrPool.Put(s)
	dnext := make([]T, N*H)
	for l := c.NumLayers - 1; l >= 0; l-- {
		a := p.shared
		if p.acts != nil {
			a = p.acts[l]
		} else {
			n.blockForward(l, &p.st, p.xs[l], a, p.xs[l+1]) // recompute
		}
		n.blockBackward(l, &p.st, p.xs[l], a, dx, dnext, s)
		dx, dnext = dnext, dx
		if p.acts != nil {
			p.acts[l] = nil
			n.actPool.Put(a) // the next step's forward takes it
		}
	}
	if p.shared != nil {
		n.actPool.Put(p.shared)
		p.shared = nil
	}
}
