package infer

import "math"

// Penalties adjust a choice's logits before its constraint and sampler, as
// OpenAI and vLLM define them, in vLLM's order:
//
//  1. LogitBias: bias[id] is added to the logit of token id.
//  2. Repetition (vLLM's repetition_penalty): the logit l of every token
//     that occurs in the prompt or in the choice's output so far becomes
//     l/Repetition when l > 0, else l·Repetition. 1 (or 0) is off.
//  3. Frequency: Frequency·c[id] is subtracted, c[id] the number of times
//     the choice has generated token id so far (the prompt does not count).
//  4. Presence: Presence is subtracted from every token the choice has
//     generated at least once.
//
// Temperature and truncation (top-k, top-p, min-p) come after, in the
// sampler, so the reported logprobs are those of the penalised logits.
type Penalties struct {
	Presence, Frequency, Repetition float64
	LogitBias                       map[int]float64
}

// active reports whether p changes any logits.
func (p *Penalties) active() bool {
	return p.Presence != 0 || p.Frequency != 0 || (p.Repetition != 0 && p.Repetition != 1) || len(p.LogitBias) > 0
}

// penaltyState is one choice's Penalties and the counts they need.
type penaltyState struct {
	p      *Penalties
	counts map[int]int  // generated tokens by id
	seen   map[int]bool // prompt and generated tokens (repetition penalty)
	buf    []float32
}

// newPenaltyState returns the state of one choice of a request with prompt,
// nil when p changes nothing.
func newPenaltyState(p *Penalties, prompt []int) *penaltyState {
	if p == nil || !p.active() {
		return nil
	}
	st := &penaltyState{p: p, counts: map[int]int{}}
	if p.Repetition != 0 && p.Repetition != 1 {
		st.seen = make(map[int]bool, len(prompt))
		for _, id := range prompt {
			st.seen[id] = true
		}
	}
	return st
}

// add counts a generated token.
func (st *penaltyState) add(tok int) {
	st.counts[tok]++
	if st.seen != nil {
		st.seen[tok] = true
	}
}

// apply returns the penalised logits in a buffer of the state's own (valid
// until the next call); logits is not modified. Arithmetic is in float64,
// rounded once to float32.
func (st *penaltyState) apply(logits []float32) []float32 {
	if cap(st.buf) < len(logits) {
		st.buf = make([]float32, len(logits))
	}
	out := st.buf[:len(logits)]
	copy(out, logits)
	p := st.p
	V := len(out)
	// touched: every id whose logit changes; the rest stay exact copies.
	adj := func(id int) {
		if id < 0 || id >= V {
			return
		}
		l := float64(logits[id])
		if b, ok := p.LogitBias[id]; ok {
			l += b
		}
		if st.seen != nil && st.seen[id] {
			if l > 0 {
				l /= p.Repetition
			} else {
				l *= p.Repetition
			}
		}
		if c := st.counts[id]; c > 0 {
			l -= p.Frequency * float64(c)
			l -= p.Presence
		}
		if math.IsNaN(l) {
			l = math.Inf(-1)
		}
		out[id] = float32(l)
	}
	for id := range p.LogitBias {
		adj(id)
	}
	for id := range st.seen {
		if _, ok := p.LogitBias[id]; !ok {
			adj(id)
		}
	}
	for id := range st.counts {
		if _, ok := p.LogitBias[id]; !ok && !st.seen[id] {
			adj(id)
		}
	}
	return out
}
