package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"flywheel/internal/auth"
	"flywheel/internal/httpx"
	"flywheel/internal/infer"
	"flywheel/internal/rl"
)

// Limits of /v1/completions.
const (
	MaxCompletionPrompts = 64 // prompts of one batched request
	// DefaultCompletionMaxTokens is max_tokens when a completion request
	// leaves it out (OpenAI's and vLLM's 16).
	DefaultCompletionMaxTokens = 16
	completionsOp              = "completions"
)

// CompletionRequest is the body of POST /v1/completions.
type CompletionRequest struct {
	SamplingRequest
	Prompt   json.RawMessage `json:"prompt"` // string, [string], [int] or [[int]]
	Suffix   *string         `json:"suffix"`
	Echo     *bool           `json:"echo"`
	Logprobs *int            `json:"logprobs"`
	BestOf   *int            `json:"best_of"`

	// vLLM extensions.
	AddSpecialTokens *bool `json:"add_special_tokens"`
}

// Completion is the non-streaming response of POST /v1/completions (and,
// with object "text_completion" on each chunk, its stream).
type Completion struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	SystemFingerprint string             `json:"system_fingerprint"`
	Choices           []CompletionChoice `json:"choices"`
	Usage             *Usage             `json:"usage,omitempty"`
}

// CompletionChoice is one completion of one prompt; choice i*n+j is the
// j-th of prompt i.
type CompletionChoice struct {
	Index          int                 `json:"index"`
	Text           string              `json:"text"`
	Logprobs       *CompletionLogprobs `json:"logprobs"`
	FinishReason   *string             `json:"finish_reason"`
	PromptLogprobs []PromptLogprob     `json:"prompt_logprobs,omitempty"`
}

// CompletionLogprobs is the legacy logprobs shape: per token its text,
// logprob (null for the first echoed prompt token), up to logprobs most
// likely alternatives (with the token itself) and its byte offset in text.
type CompletionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float64           `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// PromptLogprob is vLLM's prompt_logprobs entry of one prompt token: the
// token and its top alternatives by id ("123"), each with its logprob under
// the model (temperature 1, no penalties), its rank (1 = most likely) and
// its text. The first token's entry is null.
type PromptLogprob map[string]PromptTokenLogprob

// PromptTokenLogprob is one token of a PromptLogprob.
type PromptTokenLogprob struct {
	Logprob      float64 `json:"logprob"`
	Rank         int     `json:"rank"`
	DecodedToken string  `json:"decoded_token"`
}

// completionPlan is a validated completion request.
type completionPlan struct {
	samplePlan
	req        *CompletionRequest
	texts      []string // prompts given as text
	ids        [][]int  // prompts given as token ids
	echo       bool
	addSpecial bool
}

func parseCompletion(req *CompletionRequest, opts *Options) (*completionPlan, error) {
	if req.Model == "" {
		return nil, httpx.Invalid("model", "missing_field", "model is required")
	}
	sp, err := parseSampling(&req.SamplingRequest, opts, "max_tokens")
	if err != nil {
		return nil, err
	}
	pl := &completionPlan{samplePlan: *sp, req: req, addSpecial: true}
	if req.Suffix != nil && *req.Suffix != "" {
		return nil, unsupported("suffix", "suffix is not supported: flywheel's models have no fill-in-the-middle format; put the text in the prompt")
	}
	if req.BestOf != nil && *req.BestOf != pl.n {
		return nil, unsupported("best_of", "best_of must equal n (%d) when given: choosing the best of several samples is not supported", pl.n)
	}
	if req.Echo != nil {
		pl.echo = *req.Echo
	}
	if req.AddSpecialTokens != nil {
		pl.addSpecial = *req.AddSpecialTokens
	}
	if req.Logprobs != nil {
		if *req.Logprobs < 0 || *req.Logprobs > opts.MaxTopLogprobs {
			return nil, unsupported("logprobs", "logprobs must be between 0 and %d, got %d", opts.MaxTopLogprobs, *req.Logprobs)
		}
		pl.logprobs, pl.topLogprobs = true, *req.Logprobs
	}
	if err := pl.parsePrompt(req.Prompt); err != nil {
		return nil, err
	}
	return pl, nil
}

// parsePrompt reads prompt: a string, an array of strings, an array of
// token ids or an array of arrays of them.
func (pl *completionPlan) parsePrompt(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	bad := httpx.Invalid("prompt", "invalid_type", "prompt: expected a string, an array of strings, an array of token ids or an array of arrays of token ids")
	if isNull(raw) {
		return httpx.Invalid("prompt", "missing_field", "prompt is required")
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		pl.texts = []string{one}
	} else {
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return bad
		}
		if len(items) == 0 {
			return httpx.Invalid("prompt", "invalid_value", "prompt is an empty array")
		}
		switch t := bytes.TrimSpace(items[0]); t[0] {
		case '"':
			if err := json.Unmarshal(raw, &pl.texts); err != nil {
				return bad
			}
		case '[':
			if err := json.Unmarshal(raw, &pl.ids); err != nil {
				return bad
			}
		default:
			var ids []int
			if err := json.Unmarshal(raw, &ids); err != nil {
				return bad
			}
			pl.ids = [][]int{ids}
		}
	}
	if n := len(pl.texts) + len(pl.ids); n > MaxCompletionPrompts {
		return tooLong("prompt", "prompt holds %d prompts; at most %d are allowed in one request", n, MaxCompletionPrompts)
	}
	for i, ids := range pl.ids {
		if len(ids) == 0 {
			return httpx.Invalid(fmt.Sprintf("prompt[%d]", i), "invalid_value", "prompt[%d] is empty", i)
		}
	}
	return nil
}

// completionRun is a submitted completion request: one generation per
// prompt.
type completionRun struct {
	plan    *completionPlan
	target  Target
	lm      *servedModel
	ctx     context.Context
	prompts [][]int
	reqs    []infer.Request
	gens    []*infer.Generation
	plps    []*promptLPs // per prompt, when prompt_logprobs or echo with logprobs
}

// promptLogprobsOut is prompt i's prompt_logprobs as the response shows
// them: the token and the prompt_logprobs most likely (plps may hold more
// for the legacy logprobs of an echo).
func (run *completionRun) promptLogprobsOut(i int) []PromptLogprob {
	if run.plps == nil || run.plan.promptLogprobs < 0 {
		return nil
	}
	k := run.plan.promptLogprobs
	entries := run.plps[i].get()
	out := make([]PromptLogprob, len(entries))
	for t, e := range entries {
		if e == nil {
			continue
		}
		own := strconv.Itoa(run.prompts[i][t])
		out[t] = PromptLogprob{}
		for id, v := range e {
			if v.Rank <= k || id == own {
				out[t][id] = v
			}
		}
	}
	return out
}

func (s *Server) prepareCompletion(ctx context.Context, p *auth.Principal, req *CompletionRequest) (*completionRun, error) {
	pl, err := parseCompletion(req, &s.opts)
	if err != nil {
		return nil, err
	}
	target, lm, err := s.resolveModel(ctx, p, req.Model)
	if err != nil {
		return nil, err
	}
	if err := pl.checkVocab(lm); err != nil {
		return nil, err
	}
	run := &completionRun{plan: pl, target: target, lm: lm, ctx: ctx}
	for i, text := range pl.texts {
		param := "prompt"
		if len(pl.texts) > 1 {
			param = fmt.Sprintf("prompt[%d]", i)
		}
		if err := lm.checkPromptBytes(param, "the prompt is", len(text)); err != nil {
			return nil, err
		}
		ids := lm.tok.Encode(text, pl.addSpecial)
		if len(ids) == 0 {
			return nil, httpx.Invalid(param, "invalid_value", "the prompt is empty once tokenized")
		}
		run.prompts = append(run.prompts, ids)
	}
	V := lm.m.Config.VocabSize
	for i, ids := range pl.ids {
		for j, id := range ids {
			if id < 0 || id >= V {
				return nil, httpx.Invalid(fmt.Sprintf("prompt[%d][%d]", i, j), "invalid_value", "token id %d is out of range [0, %d)", id, V)
			}
		}
		run.prompts = append(run.prompts, ids)
	}
	for i, prompt := range run.prompts {
		param := "prompt"
		if len(run.prompts) > 1 {
			param = fmt.Sprintf("prompt[%d]", i)
		}
		ir, err := s.inferRequest(ctx, p, &pl.samplePlan, target, lm, prompt, param, DefaultCompletionMaxTokens)
		if err != nil {
			return nil, err
		}
		if pl.promptLogprobs >= 0 || pl.echo && pl.logprobs {
			c := newPromptLPs(lm, prompt, max(pl.promptLogprobs, pl.topLogprobs))
			ir.PromptLogits = c.add
			run.plps = append(run.plps, c)
		}
		run.reqs = append(run.reqs, ir)
	}
	return run, nil
}

// handleCompletions is POST /v1/completions.
func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) error {
	started := time.Now()
	var req CompletionRequest
	p, body, err := readRequest(r, &req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	run, err := s.prepareCompletion(ctx, p, &req)
	if err != nil {
		return err
	}
	for _, ir := range run.reqs {
		g, err := run.lm.sched.Submit(ctx, ir)
		if err != nil {
			cancel() // ends the prompts already submitted
			return s.submitError(w, err, run.lm, run.target)
		}
		run.gens = append(run.gens, g)
	}
	id := randomID("cmpl-", 24)
	created := started.Unix()
	if run.plan.stream {
		s.streamCompletion(w, run, p, id, created, started, body)
		return nil
	}
	for _, g := range run.gens {
		if g.Wait(ctx) != nil || ctx.Err() != nil {
			s.recordCompletion(run, p, started, body, nil, "client disconnected")
			return nil
		}
	}
	resp, err := s.buildCompletion(run, id, created)
	return s.answer(w, run.target, resp, err, func(exception string) string {
		if exception != "" {
			return s.recordCompletion(run, p, started, body, nil, exception)
		}
		return s.recordCompletion(run, p, started, body, resp, "")
	})
}

// submitError is the answer to a failed Submit: 429 when the queue is
// full (with retry-after), else 503.
func (s *Server) submitError(w http.ResponseWriter, err error, lm *servedModel, target Target) error {
	if errors.Is(err, infer.ErrQueueFull) {
		secs := int(math.Ceil(s.opts.RetryAfter.Seconds()))
		w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
		return &httpx.Error{Status: http.StatusTooManyRequests, Code: "queue_full",
			Message: fmt.Sprintf("the server is at capacity (%d requests queued for %s); retry later", lm.sched.Options().MaxQueue, target.BaseModel)}
	}
	if !errors.Is(err, infer.ErrClosed) {
		s.log.Error("serve: submit", "model", target.Name, "err", err)
	}
	return httpx.Errorf(http.StatusServiceUnavailable, "server is shutting down")
}

// buildCompletion assembles the finished choices.
func (s *Server) buildCompletion(run *completionRun, id string, created int64) (*Completion, error) {
	pl := run.plan
	resp := &Completion{ID: id, Object: "text_completion", Created: created, Model: pl.req.Model, SystemFingerprint: run.target.fingerprint()}
	usage := &Usage{}
	for i, g := range run.gens {
		usage.PromptTokens += len(run.prompts[i])
		for j := 0; j < g.N(); j++ {
			ev := g.Result(j)
			if ev.Err != nil {
				return nil, ev.Err
			}
			usage.CompletionTokens += len(ev.Tokens)
			finish := ev.Finish
			ch := CompletionChoice{Index: i*pl.n + j, FinishReason: &finish}
			var lp *CompletionLogprobs
			if pl.logprobs {
				lp = &CompletionLogprobs{Tokens: []string{}, TokenLogprobs: []*float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
			}
			if pl.echo {
				ch.Text = run.lm.tok.Decode(run.prompts[i], true)
				if lp != nil {
					s.appendPromptLegacy(run, lp, i)
				}
			}
			if lp != nil {
				s.appendLegacy(run, lp, len(ch.Text), ev.Tokens)
			}
			ch.Text += ev.Text
			ch.Logprobs = lp
			ch.PromptLogprobs = run.promptLogprobsOut(i)
			resp.Choices = append(resp.Choices, ch)
		}
	}
	usage.TotalTokens = usage.PromptTokens + usage.CompletionTokens
	resp.Usage = usage
	return resp, nil
}

// appendLegacy appends generated tokens to legacy logprobs; offset is the
// byte offset of the first one in the choice's text.
func (s *Server) appendLegacy(run *completionRun, lp *CompletionLogprobs, offset int, toks []infer.Token) {
	lm, asIDs := run.lm, run.plan.asIDs
	if len(lp.TextOffset) > 0 {
		last := len(lp.TextOffset) - 1
		offset = lp.TextOffset[last] + len(lp.Tokens[last])
	}
	for _, t := range toks {
		str := lm.tokenString(t.ID, asIDs)
		v := clampLP(t.Logprob)
		top := map[string]float64{}
		for _, alt := range t.Top {
			top[lm.tokenString(alt.ID, asIDs)] = clampLP(alt.Logprob)
		}
		top[str] = v
		lp.Tokens = append(lp.Tokens, str)
		lp.TokenLogprobs = append(lp.TokenLogprobs, &v)
		lp.TopLogprobs = append(lp.TopLogprobs, top)
		lp.TextOffset = append(lp.TextOffset, offset)
		offset += len(lm.tok.TokenBytes(t.ID))
	}
}

// appendPromptLegacy appends prompt i's tokens (echo) to legacy logprobs:
// the first with a null logprob, the others with their prompt logprobs.
func (s *Server) appendPromptLegacy(run *completionRun, lp *CompletionLogprobs, i int) {
	lm, asIDs := run.lm, run.plan.asIDs
	offset := 0
	for t, id := range run.prompts[i] {
		str := lm.tokenString(id, asIDs)
		lp.Tokens = append(lp.Tokens, str)
		lp.TextOffset = append(lp.TextOffset, offset)
		offset += len(lm.tok.TokenBytes(id))
		if t == 0 {
			lp.TokenLogprobs = append(lp.TokenLogprobs, nil)
			lp.TopLogprobs = append(lp.TopLogprobs, nil)
			continue
		}
		entry := run.plps[i].get()[t]
		top := map[string]float64{}
		var own float64
		for tid, e := range entry {
			n, _ := strconv.Atoi(tid)
			if n == id {
				own = e.Logprob
			}
			if e.Rank <= run.plan.topLogprobs || n == id {
				top[lm.tokenString(n, asIDs)] = e.Logprob
			}
		}
		lp.TokenLogprobs = append(lp.TokenLogprobs, &own)
		lp.TopLogprobs = append(lp.TopLogprobs, top)
	}
}

// promptLPs collects a prompt's prompt_logprobs as the scheduler prefills
// it (infer.Request.PromptLogits).
type promptLPs struct {
	lm      *servedModel
	prompt  []int
	k       int
	mu      sync.Mutex
	entries []PromptLogprob
}

func newPromptLPs(lm *servedModel, prompt []int, k int) *promptLPs {
	return &promptLPs{lm: lm, prompt: prompt, k: k, entries: make([]PromptLogprob, len(prompt))}
}

// add is the infer.Request.PromptLogits callback.
func (c *promptLPs) add(pos int, row []float32) {
	e := c.lm.promptEntry(row, c.prompt[pos+1], c.k)
	c.mu.Lock()
	c.entries[pos+1] = e
	c.mu.Unlock()
}

// get returns the entries collected so far (all of them once a token has
// been sampled).
func (c *promptLPs) get() []PromptLogprob {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entries
}

// promptEntry is the PromptLogprob of token id at a position with logits
// row: id and the k most likely tokens.
func (l *servedModel) promptEntry(row []float32, id, k int) PromptLogprob {
	mx := math.Inf(-1)
	for _, v := range row {
		mx = math.Max(mx, float64(v))
	}
	var sum float64
	for _, v := range row {
		sum += math.Exp(float64(v) - mx)
	}
	lse := mx + math.Log(sum)
	rank := 1
	for j, v := range row {
		if v > row[id] || v == row[id] && j < id {
			rank++
		}
	}
	e := PromptLogprob{}
	add := func(tok, rk int) {
		e[strconv.Itoa(tok)] = PromptTokenLogprob{Logprob: clampLP(float32(float64(row[tok]) - lse)), Rank: rk, DecodedToken: string(l.tok.TokenBytes(tok))}
	}
	add(id, rank)
	// the k most likely, highest first (ties: lower id), kept in a small
	// sorted list
	best := make([]int, 0, k+1)
	higher := func(a, b int) bool { return row[a] > row[b] || row[a] == row[b] && a < b }
	for j := range row {
		if k == 0 || len(best) == k && !higher(j, best[k-1]) {
			continue
		}
		at := sort.Search(len(best), func(x int) bool { return higher(j, best[x]) })
		best = append(best, 0)
		copy(best[at+1:], best[at:])
		best[at] = j
		if len(best) > k {
			best = best[:k]
		}
	}
	for r, tok := range best {
		add(tok, r+1)
	}
	return e
}

// recordCompletion stores the completion in the call store (op
// "completions") and returns its id.
func (s *Server) recordCompletion(run *completionRun, p *auth.Principal, started time.Time, body []byte, resp *Completion, exception string) string {
	var u Usage
	var output any
	var fps []string
	if resp != nil {
		output, u = resp, *resp.Usage
		if run.plan.logprobs && !run.plan.echo {
			fps = make([]string, len(resp.Choices))
			for i, ch := range resp.Choices {
				lp := ch.Logprobs
				fps[i] = rl.ChoiceFingerprint(len(lp.Tokens), func(j int) (string, float64) { return lp.Tokens[j], *lp.TokenLogprobs[j] })
			}
		}
	} else {
		for i, g := range run.gens {
			u.PromptTokens += len(run.prompts[i])
			u.CompletionTokens += g.TokenCount()
		}
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
	}
	return s.recordCall(run.ctx, p, run.target, run.plan.req.Model, completionsOp, started, body, output, u, fps, exception)
}

// streamCompletion sends the completion as SSE chunks: text (and legacy
// logprobs) deltas per choice as tokens arrive (with echo, the prompt
// first), a finish chunk per choice, an optional usage chunk, then [DONE].
func (s *Server) streamCompletion(w http.ResponseWriter, run *completionRun, p *auth.Principal, id string, created int64, started time.Time, body []byte) {
	sw := s.startSSE(w)
	pl := run.plan
	chunk := func(ch CompletionChoice) *Completion {
		return &Completion{ID: id, Object: "text_completion", Created: created, Model: pl.req.Model, SystemFingerprint: run.target.fingerprint(), Choices: []CompletionChoice{ch}}
	}
	type state struct {
		lp       *CompletionLogprobs // what was sent, for the offsets
		text     int
		started  bool
		finished bool
	}
	states := make([][]state, len(run.gens))
	for i, g := range run.gens {
		states[i] = make([]state, g.N())
		for j := range states[i] {
			states[i][j].lp = &CompletionLogprobs{}
		}
	}
	// The echoed prompt (and prompt_logprobs) go first, with the choice's
	// first output: by then the prompt is prefilled.
	head := func(i, j int) {
		st := &states[i][j]
		st.started = true
		if !pl.echo && pl.promptLogprobs < 0 {
			return
		}
		ch := CompletionChoice{Index: i*pl.n + j}
		if pl.echo {
			ch.Text = run.lm.tok.Decode(run.prompts[i], true)
		}
		if pl.logprobs && pl.echo {
			s.appendPromptLegacy(run, st.lp, i)
			ch.Logprobs = st.lp
		}
		ch.PromptLogprobs = run.promptLogprobsOut(i)
		st.text = len(ch.Text)
		sw.event(chunk(ch))
	}
	sw.flush()
	ctx := run.ctx
	stop := make(chan struct{})
	defer close(stop)
	changed := run.changed(stop)
	var genErr error
	for {
		if ctx.Err() != nil {
			s.recordCompletion(run, p, started, body, nil, "client disconnected")
			return
		}
		allDone := true
		for i, g := range run.gens {
			for j := range states[i] {
				st := &states[i][j]
				if st.finished {
					continue
				}
				ev := g.Poll(j)
				if ev.Err != nil {
					genErr = ev.Err
					st.finished = true
					continue
				}
				if !st.started && (len(ev.Tokens) > 0 || ev.Done) {
					head(i, j)
				}
				if ev.Text != "" || len(ev.Tokens) > 0 {
					ch := CompletionChoice{Index: i*pl.n + j, Text: ev.Text}
					if pl.logprobs {
						delta := &CompletionLogprobs{}
						if n := len(st.lp.Tokens); n > 0 {
							// offsets continue from what was sent
							delta.Tokens, delta.TextOffset = st.lp.Tokens[n-1:], st.lp.TextOffset[n-1:]
						}
						s.appendLegacy(run, delta, st.text, ev.Tokens)
						if len(st.lp.Tokens) > 0 {
							delta.Tokens, delta.TextOffset = delta.Tokens[1:], delta.TextOffset[1:]
						}
						st.lp = delta
						ch.Logprobs = delta
					}
					st.text += len(ev.Text)
					sw.event(chunk(ch))
				}
				if ev.Done {
					st.finished = true
					fr := ev.Finish
					if fr == "" {
						fr = infer.FinishStop
					}
					sw.event(chunk(CompletionChoice{Index: i*pl.n + j, FinishReason: &fr}))
				} else {
					allDone = false
				}
			}
		}
		sw.flush()
		if sw.err != nil {
			s.recordCompletion(run, p, started, body, nil, "client disconnected")
			return
		}
		if allDone || genErr != nil {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			s.recordCompletion(run, p, started, body, nil, "client disconnected")
			return
		}
	}
	if genErr != nil {
		s.log.Error("serve: generation failed", "model", run.target.Name, "err", genErr)
		sw.event(map[string]any{"error": map[string]any{"message": "generation failed", "type": "server_error", "param": nil, "code": "generation_failed"}})
		sw.done()
		sw.flush()
		s.recordCompletion(run, p, started, body, nil, "generation failed")
		return
	}
	resp, err := s.buildCompletion(run, id, created)
	if err == nil && pl.includeUsage {
		sw.event(&Completion{ID: id, Object: "text_completion", Created: created, Model: pl.req.Model, SystemFingerprint: run.target.fingerprint(), Choices: []CompletionChoice{}, Usage: resp.Usage})
	}
	sw.done()
	sw.flush()
	if callID := s.recordCompletion(run, p, started, body, resp, ""); callID != "" {
		w.Header().Set("x-call-id", callID)
	}
}

// changed returns a channel signalled when any of the run's generations
// has new output (signals coalesce: poll every choice after a receive),
// until stop is closed.
func (run *completionRun) changed(stop <-chan struct{}) <-chan struct{} {
	if len(run.gens) == 1 {
		return run.gens[0].Changed()
	}
	c := make(chan struct{}, 1)
	for _, g := range run.gens {
		go func(g *infer.Generation) {
			for {
				select {
				case <-g.Changed():
					select {
					case c <- struct{}{}:
					default:
					}
				case <-stop:
					return
				}
			}
		}(g)
	}
	return c
}
