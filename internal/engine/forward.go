package engine

import (
	"fmt"
	"slices"
	"sync"
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

// layout is the sequence's adapter laid out for the passes (nil: base).
func (s *Seq) layout() *LoRA[float32] {
	if s.adapter == nil {
		return nil
	}
	return s.adapter.layout()
}

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

// workspace holds one serving pass's rows and activations; reused through a
// pool, so a steady decode loop allocates nothing.
type workspace struct {
	st     rowsState[float32]
	a      acts[float32]
	x      []float32
	pos    []int
	groups []loraRows[float32]
	spans  []span
	rows   []seqRows
	last   []int
	hf     []float32
	logits []float32
}

// maxPassRows bounds the rows of one pass; longer inputs are split into
// several passes (chunked prefill) to bound the workspace memory.
const maxPassRows = 512

type seqRows struct {
	s    *Seq
	toks []int
	r0   int // first row in the pass
	p0   int // position of the first new token
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
	out := make([]float32, len(tokens)*m.Config.VocabSize)
	if err := m.LogitsAt(s, tokens, out); err != nil {
		return nil, err
	}
	return out, nil
}

// LogitsAt appends tokens to s, as Forward does, and writes the logits at
// every new position into out ([len(tokens)*VocabSize] row-major, row t
// predicting the token after tokens[t]): prompt logprobs, computed a chunk
// at a time on a sequence that keeps growing. The sequence's logits
// (Seq.Logits) are the last row's afterwards, as after Forward.
func (m *Model) LogitsAt(s *Seq, tokens []int, out []float32) error {
	V := m.Config.VocabSize
	if len(out) != len(tokens)*V {
		return fmt.Errorf("engine: LogitsAt: out holds %d values, want %d", len(out), len(tokens)*V)
	}
	if err := m.checkBatch([]*Seq{s}, [][]int{tokens}); err != nil {
		return err
	}
	for t0 := 0; t0 < len(tokens); t0 += maxPassRows {
		t1 := min(len(tokens), t0+maxPassRows)
		m.pass([]*Seq{s}, [][]int{tokens[t0:t1]}, out[t0*V:t1*V])
	}
	s.logits = append(s.logits[:0], out[len(out)-V:]...) // as Forward leaves them
	return nil
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

// pass runs one batched forward pass through the model definition (net.go).
// With all != nil (one sequence), the logits of every row are written
// there; otherwise each sequence's last row's logits go to its own buffer.
func (m *Model) pass(seqs []*Seq, tokens [][]int, all []float32) {
	c, net := m.Config, m.net
	H, V := c.HiddenSize, c.VocabSize

	ws, _ := wsPool.Get().(*workspace)
	if ws == nil {
		ws = &workspace{}
	}
	defer wsPool.Put(ws)

	// Order rows by adapter so each adapter's rows are contiguous.
	groups := ws.groups[:0]
	for _, s := range seqs {
		lo := s.layout()
		if !slices.ContainsFunc(groups, func(g loraRows[float32]) bool { return g.L == lo }) {
			groups = append(groups, loraRows[float32]{L: lo})
		}
	}
	rows, spans := ws.rows[:0], ws.spans[:0]
	N := 0
	for gi := range groups {
		g := &groups[gi]
		g.R0 = N
		for i, s := range seqs {
			if s.layout() != g.L {
				continue
			}
			rows = append(rows, seqRows{s: s, toks: tokens[i], r0: N, p0: s.n})
			spans = append(spans, span{R0: N, N: len(tokens[i]), P0: s.n, seq: s})
			N += len(tokens[i])
		}
		g.R1 = N
	}
	ws.groups, ws.rows, ws.spans = groups, rows, spans

	// Embeddings and positions; grow the caches.
	ws.x = grow(ws.x, N*H)
	ws.pos = grow(ws.pos, N)
	for _, sr := range rows {
		sr.s.ensure(sr.p0 + len(sr.toks))
		embedForward(net.embed, H, sr.toks, ws.x[sr.r0*H:])
		for t := range sr.toks {
			ws.pos[sr.r0+t] = sr.p0 + t
		}
	}
	net.setRows(&ws.st, ws.pos, groups, spans)
	ws.a.ensure(net, N, ws.st.rmax, false)
	for l := range net.layers {
		net.blockForward(l, &ws.st, ws.x, &ws.a, ws.x)
	}
	for _, sr := range rows {
		sr.s.n = sr.p0 + len(sr.toks)
	}

	// Final norm and LM head.
	last := ws.last[:0]
	if all != nil {
		for r := 0; r < N; r++ {
			last = append(last, r)
		}
	} else {
		for _, sr := range rows {
			last = append(last, sr.r0+len(sr.toks)-1)
		}
	}
	ws.last = last
	B := len(last)
	ws.hf = grow(ws.hf, B*H)
	net.finalNorm(ws.x, last, ws.hf, ws.hf, nil)
	if all != nil {
		net.headForward(ws.hf, B, all)
		return
	}
	ws.logits = grow(ws.logits, B*V)
	net.headForward(ws.hf, B, ws.logits)
	for b, sr := range rows {
		if len(sr.s.logits) != V {
			sr.s.logits = make([]float32, V)
		}
		copy(sr.s.logits, ws.logits[b*V:(b+1)*V])
	}
}
