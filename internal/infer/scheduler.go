package infer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"flywheel/internal/engine"
	"flywheel/internal/engine/tokenizer"
	"flywheel/internal/par"
)

// The scheduler's defaults (an Options field left at zero takes them).
const (
	DefaultMaxBatch     = 32
	DefaultMaxQueue     = 256
	DefaultPrefillChunk = 512
)

// Options tune a scheduler. Zero values take the defaults.
type Options struct {
	MaxBatch     int // sequences run per step (default 32)
	MaxQueue     int // requests waiting for a batch slot before ErrQueueFull (default 256)
	PrefillChunk int // prompt tokens fed per step across sequences (default 512)
	// MaxLen caps the context length (prompt and generated tokens); 0 or
	// more than the model's: the model's (engine.Model.MaxContext).
	MaxLen int
	// TenantShare is the most choices of one named tenant (Request.Tenant)
	// in the batch at once (default MaxBatch - MaxBatch/4): the rest is kept
	// for other tenants, whose requests then start at the next step instead
	// of waiting for one of the burst's choices to end.
	TenantShare int
	// PrefixCache, when not nil, keeps prompts' KV blocks across requests
	// (it may be shared by the schedulers of several base models).
	PrefixCache *PrefixCache
	Logger      *slog.Logger
}

func (o *Options) defaults() {
	o.MaxBatch = positiveOr(o.MaxBatch, DefaultMaxBatch)
	o.MaxQueue = positiveOr(o.MaxQueue, DefaultMaxQueue)
	o.PrefillChunk = positiveOr(o.PrefillChunk, DefaultPrefillChunk)
	o.TenantShare = min(positiveOr(o.TenantShare, max(o.MaxBatch-o.MaxBatch/4, 1)), o.MaxBatch)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// positiveOr is v, or def when v is not positive.
func positiveOr(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// Stats describes a scheduler's work so far (tests, metrics).
type Stats struct {
	Steps    int64         // forward passes run
	MaxBatch int64         // largest batch seen
	Active   int64         // sequences running now
	Queued   int           // requests waiting
	Compute  time.Duration // total time in steps: forward passes, sampling, token bookkeeping
	Forward  time.Duration // total time in engine forward passes
	// PromptTokens counts prompt tokens prefilled: once per request, not
	// per choice (the other choices clone the prefilled sequence), and not
	// those taken from the prefix cache.
	PromptTokens int64
	GenTokens    int64 // tokens sampled
	// Prefix cache: requests that looked their prompt up, those that found
	// at least one block, and the prompt tokens taken from the cache
	// instead of prefilled.
	PrefixLookups, PrefixHits, PrefixHitTokens int64
}

// Scheduler runs the continuous-batching loop of one base model (see the
// package doc). It is safe for concurrent use.
type Scheduler struct {
	m      *engine.Model
	tok    *tokenizer.Tokenizer
	rules  *Rules
	maxLen int          // rules.MaxLen()
	eos    map[int]bool // rules' end tokens
	keep   map[int]bool // rules' kept special tokens
	opts   Options

	mu      sync.Mutex
	waiting []*Generation
	// served orders the tenants for round-robin admission: the admission
	// count at each tenant's last admission (loop goroutine, under mu).
	served   map[string]int64
	admitted int64
	closed   bool
	wake     chan struct{}
	quit     chan struct{}
	stopped  chan struct{}

	active []*seqState // owned by the loop goroutine
	rows   []float32   // PromptLogits passes' logits (loop goroutine)

	steps      atomic.Int64
	maxBatch   atomic.Int64
	activeSeqs atomic.Int64
	computeNs  atomic.Int64
	forwardNs  atomic.Int64
	genTokens  atomic.Int64
	promptToks atomic.Int64
	prefixLook atomic.Int64
	prefixHits atomic.Int64
	prefixToks atomic.Int64
}

// NewScheduler starts the scheduler of base model m (with a tokenizer),
// deciding its generation rules (Rules); Close stops it.
func NewScheduler(m *engine.Model, opts Options) (*Scheduler, error) {
	if m == nil || m.Tokenizer == nil {
		return nil, errors.New("infer: the model has no tokenizer")
	}
	opts.defaults()
	s := newScheduler(m, opts)
	go s.run()
	return s, nil
}

// newScheduler builds a scheduler without starting its loop.
func newScheduler(m *engine.Model, opts Options) *Scheduler {
	r := newRules(m, opts.MaxLen)
	return &Scheduler{m: m, tok: m.Tokenizer, rules: r, maxLen: r.maxLen, eos: r.eosSet, keep: r.keep, opts: opts,
		wake: make(chan struct{}, 1), quit: make(chan struct{}), stopped: make(chan struct{})}
}

// Submit queues a request; its choices join the batch in arrival order as
// it has room. Cancelling ctx ends them (FinishCancelled). Errors:
// ErrQueueFull, ErrClosed, or an invalid request.
func (s *Scheduler) Submit(ctx context.Context, r Request) (*Generation, error) {
	switch {
	case len(r.Prompt) == 0:
		return nil, errors.New("infer: empty prompt")
	case len(r.Sampling) == 0:
		return nil, errors.New("infer: no choices (Request.Sampling is empty)")
	case r.MaxTokens < 1:
		return nil, fmt.Errorf("infer: MaxTokens %d, want at least 1", r.MaxTokens)
	case len(r.Prompt) >= s.maxLen:
		return nil, fmt.Errorf("infer: a %d-token prompt leaves no room in the context length %d", len(r.Prompt), s.maxLen)
	case slices.Contains(r.Stop, ""):
		return nil, errors.New("infer: empty stop string")
	}
	g := newGeneration(ctx, r)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	if len(s.waiting) >= s.opts.MaxQueue {
		s.mu.Unlock()
		return nil, ErrQueueFull
	}
	s.waiting = append(s.waiting, g)
	s.mu.Unlock()
	s.signal()
	return g, nil
}

// Close stops the loop; the choices still running or waiting end with
// ErrClosed.
func (s *Scheduler) Close() {
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

// Options returns the scheduler's options, defaults filled in.
func (s *Scheduler) Options() Options { return s.opts }

// Rules are the generation rules the scheduler enforces.
func (s *Scheduler) Rules() *Rules { return s.rules }

// Stats returns the scheduler's counters.
func (s *Scheduler) Stats() Stats {
	s.mu.Lock()
	queued := len(s.waiting)
	s.mu.Unlock()
	return Stats{Steps: s.steps.Load(), MaxBatch: s.maxBatch.Load(), Active: s.activeSeqs.Load(), Queued: queued,
		Compute: time.Duration(s.computeNs.Load()), Forward: time.Duration(s.forwardNs.Load()),
		PromptTokens: s.promptToks.Load(), GenTokens: s.genTokens.Load(),
		PrefixLookups: s.prefixLook.Load(), PrefixHits: s.prefixHits.Load(), PrefixHitTokens: s.prefixToks.Load()}
}

func (s *Scheduler) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// seqState is the loop's view of one running choice.
//
// The choices of a request share one prefill: the first choice (the group's
// leader) is admitted with the prompt pending and holds the others in
// clones; they have no sequence yet and are not in the running batch. When
// the leader's prompt is complete, each clone gets a copy of its sequence
// (KV cache and the prompt's final logits, engine.Seq.Clone), joins the
// batch and samples its first token from those logits with its own sampler,
// exactly as if it had prefilled the prompt itself.
type seqState struct {
	gen     *Generation
	out     *choiceOut
	seq     *engine.Seq // nil for a clone until its leader's prompt is prefilled
	clones  []*seqState // choices waiting for this leader's prefill
	sampler *engine.Sampler
	cons    Constraint    // nil: unconstrained
	pen     *penaltyState // nil: no penalties or bias
	pending []int         // prompt tokens not yet fed
	next    int           // token to feed at the next step when pending is empty
	n       int           // tokens generated
	text    textOutput
	// results of this step's sampling
	tok Token
	// prefix cache (prefixcache.go)
	hashes   []prefixHash // chained hashes of the prompt's full blocks
	cached   int          // blocks of the sequence known to be in the cache
	looked   bool         // the prompt has been looked up
	hit      bool         // ... and found in part
	prefills bool         // fed prompt tokens in this step
}

func (s *Scheduler) run() {
	defer close(s.stopped)
	defer func() {
		// fail whatever is left
		for _, st := range s.active {
			s.finish(st, "", ErrClosed)
		}
		s.mu.Lock()
		w := s.waiting
		s.waiting = nil
		s.mu.Unlock()
		for _, g := range w {
			for _, o := range g.outs {
				o.end("", ErrClosed)
			}
			g.signal()
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
// sequences instead of taking the process down.
func (s *Scheduler) safeStep() {
	defer func() {
		if p := recover(); p != nil {
			err := fmt.Errorf("infer: scheduler step panicked: %v", p)
			s.opts.Logger.Error("infer: scheduler step panicked", "model", s.m.ID, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			for _, st := range s.active {
				s.finish(st, "", err)
			}
			s.removeDone()
		}
	}()
	s.step()
}

// admit moves waiting requests into the running batch while it has room:
// round robin by tenant (see next), each tenant's requests in arrival order.
func (s *Scheduler) admit() {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.waiting[:0]
	for _, g := range s.waiting {
		if g.ctx.Err() != nil {
			for _, o := range g.outs {
				o.end(FinishCancelled, nil)
			}
			g.signal()
			continue
		}
		kept = append(kept, g)
	}
	clear(s.waiting[len(kept):])
	s.waiting = kept
	for len(s.waiting) > 0 {
		i := s.next()
		if i < 0 {
			break
		}
		g := s.waiting[i]
		running := s.running()
		if running > 0 && running+len(g.outs) > s.opts.MaxBatch {
			break
		}
		s.waiting = slices.Delete(s.waiting, i, i+1)
		if s.served == nil || len(s.served) > 4*s.opts.MaxQueue {
			s.served = map[string]int64{} // forget tenants long gone (bounded)
		}
		s.admitted++
		s.served[g.req.Tenant] = s.admitted
		var lead *seqState
		for i, o := range g.outs {
			st := &seqState{
				gen:     g,
				out:     o,
				sampler: engine.NewSampler(g.req.Sampling[i]),
				text:    textOutput{dec: s.tok.NewStreamDecoder(), stop: g.req.Stop},
			}
			if g.req.NewConstraint != nil {
				st.cons = g.req.NewConstraint()
			}
			st.pen = newPenaltyState(g.req.Penalties, g.req.Prompt)
			if lead == nil {
				lead = st
				st.seq = s.m.NewSeq(g.req.Adapter)
				st.pending = g.req.Prompt
				s.active = append(s.active, st)
			} else {
				lead.clones = append(lead.clones, st)
			}
		}
	}
	s.activeSeqs.Store(int64(s.running()))
}

// next returns the index in s.waiting of the request to admit next, or -1:
// the oldest request of the tenant admitted least recently (one never
// admitted first, then in queue order), among the tenants not at their
// TenantShare of the batch. Called with s.mu held.
func (s *Scheduler) next() int {
	held := map[string]int{}
	for _, st := range s.active {
		held[st.gen.req.Tenant] += 1 + len(st.clones)
	}
	best, bestServed := -1, int64(0)
	seen := map[string]bool{}
	for i, g := range s.waiting {
		t := g.req.Tenant
		if seen[t] {
			continue
		}
		seen[t] = true
		if t != "" && held[t] > 0 && held[t]+len(g.outs) > s.opts.TenantShare {
			continue
		}
		if sv := s.served[t]; best < 0 || sv < bestServed {
			best, bestServed = i, sv
		}
	}
	return best
}

// running returns the number of choices in the batch, counting the clones
// waiting for their leader's prefill.
func (s *Scheduler) running() int {
	n := 0
	for _, st := range s.active {
		n += 1 + len(st.clones)
	}
	return n
}

// startClones gives each clone waiting on st, whose prompt is now
// prefilled, a copy of st's sequence and moves it into the running batch;
// it returns the clones.
func (s *Scheduler) startClones(st *seqState) []*seqState {
	cs := st.clones
	for _, c := range cs {
		c.seq = st.seq.Clone()
		c.hashes, c.cached = slices.Clone(st.hashes), st.cached
	}
	st.clones = nil
	s.active = append(s.active, cs...)
	return cs
}

func (s *Scheduler) dropCancelled() {
	kept := s.active[:0]
	for _, st := range s.active {
		if st.gen.ctx.Err() != nil {
			s.finish(st, FinishCancelled, nil)
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
func (s *Scheduler) step() {
	if s.opts.PrefixCache != nil {
		for _, st := range s.active {
			if len(st.pending) > 0 && st.gen.req.PromptLogits == nil {
				s.reusePrefix(st)
			}
		}
	}
	budget := s.opts.PrefillChunk
	var seqs []*engine.Seq
	var toks [][]int
	var batch []*seqState
	var full []*seqState // prompt chunks whose every position's logits are wanted
	var fullToks [][]int
	for _, st := range s.active {
		st.prefills = false
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
		if st.gen.req.PromptLogits != nil {
			n = min(n, PromptLogitsChunk)
		}
		if s.opts.PrefixCache != nil { // without a cache no later request can take part of a prompt
			n = st.cutAtLastBlock(n)
		}
		budget -= n
		s.promptToks.Add(int64(n))
		chunk := st.pending[:n]
		st.pending = st.pending[n:]
		st.prefills = true
		if st.gen.req.PromptLogits != nil {
			full, fullToks = append(full, st), append(fullToks, chunk)
			continue
		}
		seqs = append(seqs, st.seq)
		toks = append(toks, chunk)
		batch = append(batch, st)
	}
	if len(batch) == 0 && len(full) == 0 {
		return
	}
	s.steps.Add(1)
	if int64(len(batch)) > s.maxBatch.Load() {
		s.maxBatch.Store(int64(len(batch)))
	}
	t0 := time.Now()
	defer func() { s.computeNs.Add(int64(time.Since(t0))) }()
	nb := len(batch) // in the batched pass; then the full-logits chunks
	for k, st := range full {
		if err := s.promptPass(st, fullToks[k]); err != nil {
			s.finish(st, "", fmt.Errorf("infer: forward pass of %s: %w", s.m.ID, err))
			continue
		}
		batch = append(batch, st)
	}
	var logits [][]float32
	var err error
	if nb > 0 {
		logits, err = s.m.Forward(seqs, toks)
	}
	s.forwardNs.Add(int64(time.Since(t0)))
	if err != nil {
		err = fmt.Errorf("infer: forward pass of %s: %w", s.m.ID, err)
		for _, st := range batch {
			s.finish(st, "", err)
		}
		s.removeDone()
		return
	}
	for _, st := range batch[len(logits):] {
		logits = append(logits, st.seq.Logits())
	}
	if s.opts.PrefixCache != nil {
		for _, st := range batch {
			if st.prefills {
				s.cachePrompt(st)
			}
		}
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
	par.Tasks(len(ready), false, func(_, k int) {
		i := ready[k]
		st := batch[i]
		lg := logits[i]
		if st.pen != nil {
			lg = st.pen.apply(lg)
		}
		if st.cons != nil {
			lg = st.cons.Mask(lg)
		}
		st.tok.ID, st.tok.Logprob, st.tok.Top = st.sampler.Sample(lg)
	})
	s.genTokens.Add(int64(len(ready)))
	for _, i := range ready {
		s.afterSample(batch[i])
	}
	s.removeDone()
}

// PromptLogitsChunk is the most prompt tokens a request with
// Request.PromptLogits prefills in one pass (its logits are that many rows
// of the vocabulary).
const PromptLogitsChunk = 64

// promptPass prefills toks, a chunk of st's prompt, in a pass of its own
// that keeps every position's logits, and hands them to PromptLogits.
func (s *Scheduler) promptPass(st *seqState, toks []int) error {
	V := s.m.Config.VocabSize
	if cap(s.rows) < len(toks)*V {
		s.rows = make([]float32, PromptLogitsChunk*V)
	}
	rows := s.rows[:len(toks)*V]
	pos := st.seq.Len()
	if err := s.m.LogitsAt(st.seq, toks, rows); err != nil {
		return err
	}
	p := st.gen.req.Prompt
	for r := range toks {
		if pos+r+1 < len(p) {
			st.gen.req.PromptLogits(pos+r, rows[r*V:(r+1)*V])
		}
	}
	return nil
}

// afterSample records the sampled token, decodes its text, applies the stop
// conditions and ends the choice when one holds.
func (s *Scheduler) afterSample(st *seqState) {
	r := &st.gen.req
	tok := st.tok.ID
	st.n++
	st.next = tok
	if st.pen != nil {
		st.pen.add(tok)
	}
	end := !r.IgnoreEOS && s.eos[tok]
	if st.cons != nil && st.cons.Advance(tok) {
		end = true
	}
	finish := ""
	var text string
	if end || r.StopIDs[tok] {
		finish = FinishStop
	} else {
		var stopped bool
		text, stopped = st.text.add(tok, s.tok.IsSpecial(tok) && !s.keep[tok])
		if stopped {
			finish = FinishStop
		}
	}
	if finish == "" && (st.n >= r.MaxTokens || st.seq.Len()+1 > s.maxLen) {
		finish = FinishLength
	}
	// Ended by length, EOS or a stop id: text held back (an incomplete
	// character, a possible stop-string start) is output after all.
	if finish == FinishLength || end || r.StopIDs[tok] {
		text += st.text.flush()
	}
	o := st.out
	o.mu.Lock()
	o.toks = append(o.toks, st.tok)
	o.text.WriteString(text)
	o.mu.Unlock()
	if finish != "" {
		s.finish(st, finish, nil)
	} else {
		st.gen.signal()
	}
}

// finish ends a sequence: records the reason (or error), frees its cache.
// A group leader that ends before its prompt is prefilled (cancellation,
// error, shutdown) ends its waiting clones the same way.
func (s *Scheduler) finish(st *seqState, reason string, err error) {
	st.out.end(reason, err)
	if st.seq != nil {
		if err == nil && s.opts.PrefixCache != nil {
			s.cacheSequence(st)
		}
		st.seq.Release()
	}
	st.pending = nil
	for _, c := range st.clones {
		s.finish(c, reason, err)
	}
	st.clones = nil
	st.gen.signal()
}

func (s *Scheduler) removeDone() {
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
