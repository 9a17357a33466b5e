package serve

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"flywheel/internal/engine"
	"flywheel/internal/engine/tokenizer"
)

// Finish reasons.
const (
	finishStop      = "stop"
	finishLength    = "length"
	finishToolCalls = "tool_calls"
	finishCancelled = "cancelled"
)

var errQueueFull = errors.New("serve: queue full")

// topLP is one alternative token with its logprob.
type topLP struct {
	id int
	lp float32
}

// genToken is one sampled token.
type genToken struct {
	id  int
	lp  float32
	top []topLP
}

// tokenSampler draws the next token from a sequence's logits; it returns
// the token, its logprob under the distribution it was drawn from (after
// temperature, before truncation) and the top alternatives.
type tokenSampler interface {
	sample(logits []float32) (int, float32, []topLP)
}

// samplingParams are one choice's sampling settings.
type samplingParams struct {
	temperature float64
	topP        float64
	topK        int
	minP        float64
	seed        uint64
	topLogprobs int
}

// genRequest is one completion request as the scheduler sees it: n choices
// of the same prompt.
type genRequest struct {
	ctx        context.Context
	prompt     []int
	adapter    *engine.Adapter
	params     []samplingParams // one per choice
	maxTokens  int
	stop       []string
	stopIDs    map[int]bool
	ignoreEOS  bool
	grammar    *gnode // forced tool call; nil: free text
	outs       []*seqOut
	notify     chan struct{} // cap 1: something changed in outs
	enqueued   time.Time
	newSampler func(samplingParams) tokenSampler
}

// seqOut is what one choice has produced so far; the scheduler appends, the
// handler reads.
type seqOut struct {
	mu     sync.Mutex
	toks   []genToken
	text   strings.Builder
	finish string
	err    error
	done   bool
}

// snapshot returns tokens from tokFrom and text from textFrom on, and the
// finish state.
func (o *seqOut) snapshot(tokFrom, textFrom int) ([]genToken, string, bool, string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.toks[tokFrom:]
	s := o.text.String()[textFrom:]
	return t, s, o.done, o.finish, o.err
}

func (r *genRequest) signal() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *genRequest) allDone() bool {
	for _, o := range r.outs {
		o.mu.Lock()
		d := o.done
		o.mu.Unlock()
		if !d {
			return false
		}
	}
	return true
}

// seqState is the scheduler's view of one running choice.
//
// The choices of a request share one prefill: the first choice (the group's
// leader) is admitted with the prompt pending and holds the others in
// clones; they have no sequence yet and are not in the running batch. When
// the leader's prompt is complete, each clone gets a copy of its sequence
// (KV cache and the prompt's final logits, engine.Seq.Clone), joins the
// batch and samples its first token from those logits with its own sampler,
// exactly as if it had prefilled the prompt itself.
type seqState struct {
	req     *genRequest
	out     *seqOut
	seq     *engine.Seq // nil for a clone until its leader's prompt is prefilled
	clones  []*seqState // choices waiting for this leader's prefill
	sampler tokenSampler
	pending []int // prompt tokens not yet fed
	next    int   // token to feed at the next step when pending is empty
	gen     int   // tokens generated
	dec     *tokenizer.StreamDecoder
	held    string // text held back while it may begin a stop string
	gm      gmachine
	masked  []float32
	// results of this step's sampling
	tok     int
	lp      float32
	top     []topLP
	sampled bool
}

// scheduler runs the continuous-batching loop of one base model.
type scheduler struct {
	lm   *lmodel
	opts *Options

	mu      sync.Mutex
	waiting []*genRequest
	closed  bool
	wake    chan struct{}
	quit    chan struct{}
	stopped chan struct{}

	active []*seqState

	// counters for tests and metrics
	steps      atomic.Int64
	maxBatch   atomic.Int64
	activeSeqs atomic.Int64
	computeNs  atomic.Int64 // time in steps: forward passes, sampling, bookkeeping
	forwardNs  atomic.Int64 // time in engine forward passes
	genTokens  atomic.Int64 // tokens sampled
	promptToks atomic.Int64 // prompt tokens prefilled (once per request, not per choice)
}

func newScheduler(lm *lmodel, opts *Options) *scheduler {
	s := &scheduler{lm: lm, opts: opts, wake: make(chan struct{}, 1), quit: make(chan struct{}), stopped: make(chan struct{})}
	go s.run()
	return s
}

func (s *scheduler) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// submit queues a request; errQueueFull when the queue is at its limit.
func (s *scheduler) submit(r *genRequest) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("serve: server is shutting down")
	}
	if len(s.waiting) >= s.opts.MaxQueue {
		s.mu.Unlock()
		return errQueueFull
	}
	r.enqueued = time.Now()
	s.waiting = append(s.waiting, r)
	s.mu.Unlock()
	s.signal()
	return nil
}

func (s *scheduler) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	close(s.quit)
	<-s.stopped
}

// queued returns the number of requests waiting for admission.
func (s *scheduler) queued() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting)
}

func (s *scheduler) run() {
	defer close(s.stopped)
	defer func() {
		// fail whatever is left
		for _, st := range s.active {
			s.finish(st, "", errors.New("server shutting down"))
		}
		s.mu.Lock()
		w := s.waiting
		s.waiting = nil
		s.mu.Unlock()
		for _, r := range w {
			for _, o := range r.outs {
				o.mu.Lock()
				o.done, o.err = true, errors.New("server shutting down")
				o.mu.Unlock()
			}
			r.signal()
		}
	}()
	for {
		select {
		case <-s.quit:
			return
		default:
		}
		s.admit()
		s.dropCancelled()
		if len(s.active) == 0 {
			select {
			case <-s.wake:
			case <-s.quit:
				return
			}
			continue
		}
		s.safeStep()
	}
}

// safeStep runs a step; a panic (an engine bug) fails the running
// sequences instead of taking the server down.
func (s *scheduler) safeStep() {
	defer func() {
		if p := recover(); p != nil {
			err := fmt.Errorf("serve: scheduler step panicked: %v", p)
			s.opts.Logger.Error("serve: scheduler step panicked", "model", s.lm.id, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			for _, st := range s.active {
				s.finish(st, "", err)
			}
			s.removeDone()
		}
	}()
	s.step()
}

// admit moves waiting requests into the running batch, in arrival order,
// while the batch has room.
func (s *scheduler) admit() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.waiting) > 0 {
		r := s.waiting[0]
		if r.ctx.Err() != nil {
			s.waiting = s.waiting[1:]
			for _, o := range r.outs {
				o.mu.Lock()
				o.done, o.finish = true, finishCancelled
				o.mu.Unlock()
			}
			r.signal()
			continue
		}
		running := s.running()
		if running > 0 && running+len(r.outs) > s.opts.MaxBatch {
			return
		}
		s.waiting = s.waiting[1:]
		var lead *seqState
		for i, o := range r.outs {
			st := &seqState{
				req:     r,
				out:     o,
				sampler: r.newSampler(r.params[i]),
				dec:     s.lm.tok.NewStreamDecoder(),
			}
			if r.grammar != nil {
				st.gm = newMachine(r.grammar)
			}
			if lead == nil {
				lead = st
				st.seq = s.lm.m.NewSeq(r.adapter)
				st.pending = r.prompt
				s.active = append(s.active, st)
			} else {
				lead.clones = append(lead.clones, st)
			}
		}
	}
	s.activeSeqs.Store(int64(s.running()))
}

// running returns the number of choices in the batch, counting the clones
// waiting for their leader's prefill.
func (s *scheduler) running() int {
	n := 0
	for _, st := range s.active {
		n += 1 + len(st.clones)
	}
	return n
}

// startClones gives each clone waiting on st, whose prompt is now
// prefilled, a copy of st's sequence and moves it into the running batch;
// it returns the clones.
func (s *scheduler) startClones(st *seqState) []*seqState {
	cs := st.clones
	for _, c := range cs {
		c.seq = st.seq.Clone()
	}
	st.clones = nil
	s.active = append(s.active, cs...)
	return cs
}

func (s *scheduler) dropCancelled() {
	kept := s.active[:0]
	for _, st := range s.active {
		if st.req.ctx.Err() != nil {
			s.finish(st, finishCancelled, nil)
			continue
		}
		kept = append(kept, st)
	}
	clear(s.active[len(kept):])
	s.active = kept
	s.activeSeqs.Store(int64(s.running()))
}

// step runs one batched forward pass over the running sequences: decode
// rows for those generating and prompt chunks for those prefilling, then
// samples a token for every sequence whose prompt is complete.
func (s *scheduler) step() {
	budget := s.opts.PrefillChunk
	var seqs []*engine.Seq
	var toks [][]int
	var batch []*seqState
	for _, st := range s.active {
		st.sampled = false
		if len(st.pending) == 0 {
			seqs = append(seqs, st.seq)
			toks = append(toks, []int{st.next})
			batch = append(batch, st)
			continue
		}
		if budget <= 0 {
			continue
		}
		n := min(len(st.pending), budget)
		budget -= n
		s.promptToks.Add(int64(n))
		seqs = append(seqs, st.seq)
		toks = append(toks, st.pending[:n])
		st.pending = st.pending[n:]
		batch = append(batch, st)
	}
	if len(batch) == 0 {
		return
	}
	s.steps.Add(1)
	if int64(len(batch)) > s.maxBatch.Load() {
		s.maxBatch.Store(int64(len(batch)))
	}
	t0 := time.Now()
	defer func() { s.computeNs.Add(int64(time.Since(t0))) }()
	logits, err := s.lm.m.Forward(seqs, toks)
	s.forwardNs.Add(int64(time.Since(t0)))
	if err != nil {
		for _, st := range batch {
			s.finish(st, "", err)
		}
		s.removeDone()
		return
	}
	// Sequences whose prompt is complete sample; a group leader whose
	// prompt just completed brings in its clones, which sample their first
	// token from their copy of the prompt's final logits.
	var ready []int
	for i, nb := 0, len(batch); i < nb; i++ {
		if len(batch[i].pending) > 0 {
			continue
		}
		ready = append(ready, i)
		for _, c := range s.startClones(batch[i]) {
			ready = append(ready, len(batch))
			batch = append(batch, c)
			logits = append(logits, c.seq.Logits())
		}
	}
	// sample, in parallel across sequences
	sampleOne := func(k int) {
		i := ready[k]
		st := batch[i]
		lg := logits[i]
		if st.req.grammar != nil {
			lg = s.maskGrammar(st, lg)
		}
		st.tok, st.lp, st.top = st.sampler.sample(lg)
		st.sampled = true
	}
	parallelFor(len(ready), sampleOne)
	s.genTokens.Add(int64(len(ready)))
	for _, i := range ready {
		s.afterSample(batch[i])
	}
	s.removeDone()
}

func parallelFor(n int, f func(i int)) {
	w := min(runtime.GOMAXPROCS(0), n)
	if w <= 1 {
		for i := 0; i < n; i++ {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var panicked atomic.Value
	for range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					panicked.Store(fmt.Sprint(p))
				}
			}()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				f(i)
			}
		}()
	}
	wg.Wait()
	if p := panicked.Load(); p != nil {
		panic(p)
	}
}

// maskGrammar returns logits where every token that would break the forced
// tool-call grammar is -Inf.
func (s *scheduler) maskGrammar(st *seqState, lg []float32) []float32 {
	if cap(st.masked) < len(lg) {
		st.masked = make([]float32, len(lg))
	}
	m := st.masked[:len(lg)]
	neg := float32(math.Inf(-1))
	for i := range m {
		m[i] = neg
	}
	any := false
	if st.gm.done() {
		for _, id := range s.lm.endIDs {
			if id >= 0 && id < len(m) {
				m[id] = lg[id]
				any = true
			}
		}
	} else if id, ok := s.lm.markerFor(st.gm.pendingLiteral()); ok && id < len(m) {
		// A tool-call marker (e.g. <tool_call>, an added token) is
		// produced as its own token, as the template renders it, never
		// spelled out in pieces.
		m[id] = lg[id]
		any = true
	} else if rem, ok := st.gm.inString(); ok {
		// Fast path inside a string body: a token of plain string bytes
		// fits while there is room; only tokens that close the string
		// need a trial through the machine.
		g := s.lm.grammarVocab()
		for _, id := range g.ids {
			b := g.bytes[id]
			pl := int(g.plain[id])
			if pl > rem || int(id) >= len(m) {
				continue
			}
			if pl == len(b) {
				m[id] = lg[id]
				any = true
				continue
			}
			if b[pl] != '"' {
				continue
			}
			t2 := st.gm
			if t2.feedBytes(b) {
				m[id] = lg[id]
				any = true
			}
		}
	} else {
		g := s.lm.grammarVocab()
		for b := 0; b < 256; b++ {
			ids := g.byFirst[b]
			if len(ids) == 0 {
				continue
			}
			trial := st.gm
			if !trial.feed(byte(b)) {
				continue
			}
			for _, id := range ids {
				t2 := st.gm
				if t2.feedBytes(g.bytes[id]) && int(id) < len(m) {
					m[id] = lg[id]
					any = true
				}
			}
		}
	}
	if !any { // nothing fits (e.g. a vocabulary without the needed bytes): leave unconstrained
		return lg
	}
	return m
}

// afterSample records the sampled token, decodes its text, applies stop
// conditions and finishes the sequence when one holds.
func (s *scheduler) afterSample(st *seqState) {
	r := st.req
	tok := st.tok
	st.gen++
	st.next = tok
	finish := ""
	var text string
	isEOS := !r.ignoreEOS && s.lm.isEOS(tok)
	if r.grammar != nil {
		if st.gm.done() && s.lm.isEOS(tok) {
			isEOS = true
		} else {
			st.gm.feedBytes(s.lm.tok.TokenBytes(tok))
		}
	}
	switch {
	case isEOS || r.stopIDs[tok]:
		finish = finishStop
	default:
		if !s.lm.skipToken(tok) {
			text = st.dec.Add(tok)
		}
		if len(r.stop) > 0 {
			var stopped bool
			text, stopped = st.stopFilter(text)
			if stopped {
				finish = finishStop
			}
		}
	}
	if finish == "" && (st.gen >= r.maxTokens || st.seq.Len()+1 > s.lm.maxLen) {
		finish = finishLength
	}
	// Ended by length, EOS or a stop id: text held back (an incomplete
	// character, a possible stop-string start) is emitted after all.
	if finish == finishLength || (finish == finishStop && (isEOS || r.stopIDs[tok])) {
		text += st.dec.Flush()
		text += st.held
		st.held = ""
	}
	o := st.out
	o.mu.Lock()
	o.toks = append(o.toks, genToken{id: tok, lp: st.lp, top: st.top})
	o.text.WriteString(text)
	o.mu.Unlock()
	if finish != "" {
		s.finish(st, finish, nil)
	} else {
		r.signal()
	}
}

// stopFilter passes text through the stop-string matcher: it returns the
// text that is safe to emit and whether a stop string was found (the text up
// to it is emitted; the stop string and what follows are dropped).
func (st *seqState) stopFilter(delta string) (string, bool) {
	st.held += delta
	best := -1
	for _, stop := range st.req.stop {
		if i := strings.Index(st.held, stop); i >= 0 && (best < 0 || i < best) {
			best = i
		}
	}
	if best >= 0 {
		out := st.held[:best]
		st.held = ""
		return out, true
	}
	keep := 0
	for _, stop := range st.req.stop {
		keep = max(keep, partialSuffix(st.held, stop))
	}
	out := st.held[:len(st.held)-keep]
	st.held = st.held[len(st.held)-keep:]
	return out, false
}

// finish ends a sequence: records the reason (or error), frees its cache.
// A group leader that ends before its prompt is prefilled (cancellation,
// error, shutdown) ends its waiting clones the same way.
func (s *scheduler) finish(st *seqState, reason string, err error) {
	o := st.out
	o.mu.Lock()
	if !o.done {
		o.done = true
		o.finish = reason
		o.err = err
	}
	o.mu.Unlock()
	if st.seq != nil {
		st.seq.Release()
	}
	st.pending = nil
	for _, c := range st.clones {
		s.finish(c, reason, err)
	}
	st.clones = nil
	st.req.signal()
}

func (s *scheduler) removeDone() {
	kept := s.active[:0]
	for _, st := range s.active {
		st.out.mu.Lock()
		d := st.out.done
		st.out.mu.Unlock()
		if !d {
			kept = append(kept, st)
		}
	}
	clear(s.active[len(kept):])
	s.active = kept
	s.activeSeqs.Store(int64(s.running()))
}

// adapterCache is an LRU cache of loaded LoRA adapters keyed by folder.
type adapterCache struct {
	mu      sync.Mutex
	cap     int
	entries map[string]*adapterEntry
	order   *list.List // front: most recently used
	loads   atomic.Int64
}

type adapterEntry struct {
	key   string
	ready chan struct{}
	a     *engine.Adapter
	err   error
	elem  *list.Element
}

func newAdapterCache(capacity int) *adapterCache {
	return &adapterCache{cap: max(capacity, 1), entries: map[string]*adapterEntry{}, order: list.New()}
}

// get returns the adapter of dir for a model of shape cfg, loading it once
// however many requests ask at the same time.
func (c *adapterCache) get(key, dir string, cfg *engine.Config) (*engine.Adapter, error) {
	c.mu.Lock()
	if e, ok := c.entries[key]; ok {
		c.order.MoveToFront(e.elem)
		c.mu.Unlock()
		<-e.ready
		return e.a, e.err
	}
	e := &adapterEntry{key: key, ready: make(chan struct{})}
	e.elem = c.order.PushFront(e)
	c.entries[key] = e
	for c.order.Len() > c.cap {
		old := c.order.Back().Value.(*adapterEntry)
		c.order.Remove(old.elem)
		delete(c.entries, old.key)
	}
	c.mu.Unlock()
	c.loads.Add(1)
	e.a, e.err = engine.LoadAdapter(dir, cfg)
	close(e.ready)
	if e.err != nil {
		c.mu.Lock()
		if cur, ok := c.entries[key]; ok && cur == e {
			c.order.Remove(e.elem)
			delete(c.entries, key)
		}
		c.mu.Unlock()
	}
	return e.a, e.err
}
