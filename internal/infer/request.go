package infer

import (
	"context"
	"errors"
	"strings"
	"sync"

	"flywheel/internal/engine"
)

// Finish reasons of a choice.
const (
	FinishStop      = "stop"      // end-of-sequence token, stop id or stop string
	FinishLength    = "length"    // Request.MaxTokens or the context length reached
	FinishCancelled = "cancelled" // the request's context was cancelled
)

var (
	// ErrQueueFull is Submit's answer when Options.MaxQueue requests are
	// already waiting; the caller should retry later.
	ErrQueueFull = errors.New("infer: queue full")
	// ErrClosed is Submit's answer after Close, and the error of the
	// choices Close ends.
	ErrClosed = errors.New("infer: scheduler closed")
)

// Constraint restricts the tokens one choice may generate (e.g. to a
// grammar). A constraint belongs to one choice; the constraints of
// different choices are called concurrently.
type Constraint interface {
	// Mask returns the logits to sample the next token from: logits with
	// every token the constraint forbids at this point set to -Inf. It must
	// not modify logits; it may return logits itself (nothing forbidden)
	// or a buffer of its own, valid until the next call.
	Mask(logits []float32) []float32
	// Advance moves the constraint past the sampled token tok. end reports
	// that tok ends the choice as an end-of-sequence token does (finish
	// FinishStop, no text), even when Request.IgnoreEOS is set.
	Advance(tok int) (end bool)
}

// Request is one generation request: n choices (len(Sampling)) of one
// prompt, each generating until a stop condition.
type Request struct {
	Prompt   []int                   // prompt token ids, not empty
	Adapter  *engine.Adapter         // LoRA adapter; nil: the base model
	Sampling []engine.SamplingParams // one per choice; n = len(Sampling) ≥ 1
	// MaxTokens caps the tokens generated per choice (≥ 1); generation also
	// stops at the context length.
	MaxTokens int
	Stop      []string     // stop strings, not part of the output
	StopIDs   map[int]bool // tokens that end a choice (included in Tokens, no text)
	IgnoreEOS bool         // keep generating past end-of-sequence tokens
	// Penalties apply to every choice's logits before its constraint and
	// sampler (each choice counts its own generated tokens); nil: none.
	Penalties *Penalties
	// PromptLogits, when not nil, is called with the model's logits at each
	// prompt position but the last, in order (row predicts Prompt[pos+1];
	// temperature 1, no penalties), from the scheduler's goroutine; it must
	// not keep row. Such a prompt is prefilled in full (the positions the
	// prefix cache holds need their logits too) in passes of its own of at
	// most PromptLogitsChunk tokens; its blocks still go to the prefix
	// cache, so later requests reuse them.
	PromptLogits func(pos int, row []float32)
	// NewConstraint makes each choice's constraint; nil: unconstrained.
	NewConstraint func() Constraint
	// CacheScope keeps the prefix cache's blocks apart: a request reuses
	// only blocks that requests of the same scope computed (the server sets
	// the caller's user, so whether a prompt hits the cache, and how fast
	// its first token comes, tells nothing about other tenants' prompts).
	CacheScope string
	// Tenant names whose request this is (the server sets the API key): the
	// waiting requests of different tenants are admitted round robin, and
	// one named tenant holds at most Options.TenantShare of the batch, so
	// one tenant's burst cannot keep another's first token waiting. ""
	// (library use) is one tenant without a share cap.
	Tenant string
}

// Token is one sampled token.
type Token struct {
	ID      int
	Logprob float32               // under the (masked) distribution it was sampled from
	Top     []engine.TokenLogprob // most likely alternatives, when asked for
}

// Event is what a choice produced over some span (since the previous Poll,
// or since the start), and its state at the end of it.
type Event struct {
	Tokens []Token // sampled tokens, in order; read only
	Text   string  // output text of those tokens (see the package doc)
	Done   bool    // the choice has ended
	Finish string  // when Done without Err: FinishStop, FinishLength or FinishCancelled
	Err    error   // when Done: generation failed (an engine error, Close)
}

// Generation is a submitted request: the choices' output as the scheduler
// produces it. The scheduler only appends; readers poll. Poll of one choice
// must not be called concurrently; everything else may.
type Generation struct {
	ctx     context.Context
	req     Request
	outs    []*choiceOut
	polled  []polled
	changed chan struct{} // cap 1: some choice has new output
}

type polled struct{ toks, text int }

// choiceOut is what one choice has produced so far.
type choiceOut struct {
	mu     sync.Mutex
	toks   []Token
	text   strings.Builder
	finish string
	err    error
	done   bool
}

func newGeneration(ctx context.Context, r Request) *Generation {
	g := &Generation{ctx: ctx, req: r, outs: make([]*choiceOut, len(r.Sampling)), polled: make([]polled, len(r.Sampling)), changed: make(chan struct{}, 1)}
	for i := range g.outs {
		g.outs[i] = &choiceOut{}
	}
	return g
}

// N is the number of choices.
func (g *Generation) N() int { return len(g.outs) }

// Changed is signalled when some choice has new output or has ended since
// the last receive. Signals coalesce: after a receive, Poll every choice.
func (g *Generation) Changed() <-chan struct{} { return g.changed }

// Poll returns what choice i produced since the previous Poll of i.
func (g *Generation) Poll(i int) Event {
	p := &g.polled[i]
	ev := g.outs[i].since(p.toks, p.text)
	p.toks += len(ev.Tokens)
	p.text += len(ev.Text)
	return ev
}

// Result returns everything choice i has produced so far.
func (g *Generation) Result(i int) Event { return g.outs[i].since(0, 0) }

// Done reports whether every choice has ended.
func (g *Generation) Done() bool {
	for _, o := range g.outs {
		o.mu.Lock()
		d := o.done
		o.mu.Unlock()
		if !d {
			return false
		}
	}
	return true
}

// Wait blocks until every choice has ended or ctx is done (its error).
func (g *Generation) Wait(ctx context.Context) error {
	for !g.Done() {
		select {
		case <-g.changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// TokenCount is the number of tokens generated so far, over all choices.
func (g *Generation) TokenCount() int {
	n := 0
	for _, o := range g.outs {
		o.mu.Lock()
		n += len(o.toks)
		o.mu.Unlock()
	}
	return n
}

func (g *Generation) signal() {
	select {
	case g.changed <- struct{}{}:
	default:
	}
}

// since returns the tokens from tok and the text from text on, and the
// choice's state.
func (o *choiceOut) since(tok, text int) Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := len(o.toks)
	// capped, so that a caller's append copies instead of writing where
	// the scheduler appends next
	return Event{Tokens: o.toks[tok:n:n], Text: o.text.String()[text:], Done: o.done, Finish: o.finish, Err: o.err}
}

// end marks the choice ended, unless it already is.
func (o *choiceOut) end(finish string, err error) {
	o.mu.Lock()
	if !o.done {
		o.done, o.finish, o.err = true, finish, err
	}
	o.mu.Unlock()
}
