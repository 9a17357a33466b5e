package train

// Trajectory preparation (rl.md "From trajectories to tokens"), with the
// advantages and weights of rl.md "Advantages" computed by package rl.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"flywheel/internal/engine"
	"flywheel/internal/engine/chattmpl"
	"flywheel/internal/rl"
)

// codec is what preparation needs from a model: its chat template and its
// tokenizer.
type codec interface {
	// Render renders messages and tools without a generation prompt,
	// continuing the final message when continueFinal is set; kwargs (a
	// JSON object or nil) are chat_template_kwargs, extra template variables.
	Render(msgs, tools []json.RawMessage, kwargs json.RawMessage, continueFinal bool) (string, error)
	// Encode tokenizes text without adding special tokens.
	Encode(text string) []int
	// LookupToken maps a sampled token string (or, failing that, its bytes)
	// to its id.
	LookupToken(tok string, b []byte) (int, bool)
}

// modelCodec adapts an engine.Model.
type modelCodec struct {
	m       *engine.Model
	ctx     context.Context // the job's: a cancelled job stops its renders (nil: none)
	once    sync.Once
	byBytes map[string]int
}

func (c *modelCodec) Render(msgs, tools []json.RawMessage, kwargs json.RawMessage, cont bool) (string, error) {
	if c.m.Template == nil {
		if c.m.TemplateErr != nil {
			return "", c.m.TemplateErr
		}
		return "", fmt.Errorf("model %s has no chat template", c.m.ID)
	}
	ctx := c.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	in := chattmpl.Input{Messages: msgs, Tools: tools, ContinueFinalMessage: cont}
	if len(kwargs) > 0 {
		var extra map[string]json.RawMessage
		if err := json.Unmarshal(kwargs, &extra); err != nil {
			return "", fmt.Errorf("chat_template_kwargs: %w", err)
		}
		in.Extra = make(map[string]any, len(extra))
		for k, v := range extra {
			in.Extra[k] = v
		}
	}
	// The template is untrusted code: rendered within chattmpl.DefaultLimits.
	return c.m.Template.RenderContext(ctx, in)
}

func (c *modelCodec) Encode(text string) []int { return c.m.Tokenizer.Encode(text, false) }

func (c *modelCodec) LookupToken(tok string, b []byte) (int, bool) {
	if id, ok := c.m.Tokenizer.TokenToID(tok); ok {
		return id, true
	}
	c.once.Do(func() {
		c.byBytes = map[string]int{}
		for id := c.m.Tokenizer.VocabSize() - 1; id >= 0; id-- {
			if tb := c.m.Tokenizer.TokenBytes(id); len(tb) > 0 && !c.m.Tokenizer.IsSpecial(id) {
				c.byBytes[string(tb)] = id
			}
		}
	})
	if b == nil {
		b = []byte(tok)
	}
	id, ok := c.byBytes[string(b)]
	return id, ok
}

// sequence is one tokenized history ready for training.
type sequence struct {
	Tokens []int
	Mask   []bool    // trainable (assistant-sampled) tokens
	OldLP  []float64 // recorded logprob per token; NaN where none
	Traj   int       // global trajectory index
	A, W   float64   // trajectory advantage and weight
	NTrain int       // trainable tokens (positions ≥ 1 with Mask)
	// OnPolicy: some choice had no logprobs, so its content was tokenized
	// and is trained on-policy (old logprob = the current policy's).
	OnPolicy bool
}

// errNoChoice marks a history without any assistant choice.
var errNoChoice = errors.New("no assistant choice")

const sentinelFmt = "\ue000fwchoice%d\ue001"

// tokenizeHistory implements rl.md steps 1–5 for one history.
func tokenizeHistory(c codec, h rl.History, maxLen int) (*sequence, bool, error) {
	items := h.MessagesAndChoices
	els := make([]rl.Element, len(items))
	last := -1
	for i, raw := range items {
		if err := json.Unmarshal(raw, &els[i]); err != nil {
			return nil, false, fmt.Errorf("messages_and_choices[%d]: %w", i, err)
		}
		if els[i].IsChoice() {
			last = i
		}
	}
	if last < 0 {
		return nil, false, errNoChoice
	}
	// 1. drop everything after the last choice.
	items, els = items[:last+1], els[:last+1]
	// 2. choices -> assistant messages; every choice is trainable and gets a
	// sentinel content.
	msgs := make([]json.RawMessage, len(items))
	var slots []int // element index of each choice, in order
	for i := range els {
		e := &els[i]
		if !e.IsChoice() {
			msgs[i] = items[i]
			continue
		}
		content := fmt.Sprintf(sentinelFmt, len(slots))
		slots = append(slots, i)
		var buf bytes.Buffer
		buf.WriteString(`{"role":"assistant","content":`)
		cj, _ := json.Marshal(content)
		buf.Write(cj)
		if tc := bytes.TrimSpace(e.Message.ToolCalls); len(tc) > 0 && string(tc) != "null" {
			buf.WriteString(`,"tool_calls":`)
			buf.Write(tc)
		}
		buf.WriteByte('}')
		msgs[i] = buf.Bytes()
	}
	spl := make([]splice, len(slots))
	onPolicy := false
	for k, ei := range slots {
		samp := els[ei].Sampled()
		if len(samp) == 0 {
			// Sampled without logprobs: train it on-policy. Its tokens are the
			// tokenization of its content (the one case where text is
			// tokenized), followed, when it stopped, by the token that closes
			// it, as SFT does; no old logprobs (rl.Loss: old = stop-grad(new),
			// ratio 1).
			content := ""
			if m := els[ei].Message; m.Content != nil {
				content = *m.Content
			}
			spl[k] = splice{Msg: ei, IDs: c.Encode(content), Mask: true, MaskEnd: els[ei].Stopped()}
			onPolicy = true
			continue
		}
		sp := splice{Msg: ei, IDs: make([]int, len(samp)), LPs: make([]float64, len(samp)), Mask: true}
		for j, tl := range samp {
			id, err := sampledID(c, tl)
			if err != nil {
				return nil, false, fmt.Errorf("messages_and_choices[%d].logprobs.content[%d]: %w", ei, j, err)
			}
			sp.IDs[j] = id
			sp.LPs[j] = math.NaN()
			if tl.Logprob != nil && !math.IsInf(*tl.Logprob, 0) && !math.IsNaN(*tl.Logprob) {
				sp.LPs[j] = *tl.Logprob
			}
		}
		spl[k] = sp
	}
	// 3.–4. render with tools, no generation prompt, continuing the final
	// message; splice the sampled ids where each choice's content renders.
	// A final choice trained on-policy that stopped is closed instead, so
	// its end-of-turn token is trained too (a sampled one is in its ids).
	cont := spl[len(spl)-1].LPs != nil || !els[last].Stopped()
	seq, err := spliceRender(c, msgs, wrapTools(h.Tools), h.ChatTemplateKwargs, spl, cont)
	if err != nil {
		return nil, false, err
	}
	seq.OnPolicy = onPolicy
	// 5. truncate to the context.
	truncated := seq.truncate(maxLen)
	return seq, truncated, nil
}

// splice is what goes where message Msg's content renders: token ids, their
// recorded logprobs (nil: none) and whether they are trainable. With
// MaskEnd, the first token after the content (the end-of-turn token) is
// trainable too (SFT teaches the model to stop).
type splice struct {
	Msg     int
	IDs     []int
	LPs     []float64
	Mask    bool
	MaskEnd bool
}

// spliceRender renders msgs whose spliced contents are sentinels, cuts the
// text at the sentinels, tokenizes the literal pieces and puts each
// splice's ids in place of its sentinel. A sampled end token that the
// template repeats right after the content is not duplicated.
func spliceRender(c codec, msgs, tools []json.RawMessage, kwargs json.RawMessage, spl []splice, cont bool) (*sequence, error) {
	text, err := c.Render(msgs, tools, kwargs, cont)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	seq := &sequence{}
	add := func(ids []int, mask bool, lps []float64) {
		seq.Tokens = append(seq.Tokens, ids...)
		for k := range ids {
			seq.Mask = append(seq.Mask, mask)
			if lps != nil {
				seq.OldLP = append(seq.OldLP, lps[k])
			} else {
				seq.OldLP = append(seq.OldLP, math.NaN())
			}
		}
	}
	rest := text
	pendingEnd, maskEnd := -1, false
	literal := func(s string) {
		ids := c.Encode(s)
		if pendingEnd >= 0 && len(ids) > 0 && ids[0] == pendingEnd {
			ids = ids[1:] // the spliced end token is already there
		} else if maskEnd && len(ids) > 0 {
			add(ids[:1], true, nil)
			ids = ids[1:]
		}
		add(ids, false, nil)
	}
	for k, sp := range spl {
		s := fmt.Sprintf(sentinelFmt, k)
		if n := strings.Count(rest, s); n != 1 {
			return nil, fmt.Errorf("chat template does not render the content of message %d verbatim (found %d times)", sp.Msg, n)
		}
		at := strings.Index(rest, s)
		literal(rest[:at])
		rest = rest[at+len(s):]
		add(sp.IDs, sp.Mask, sp.LPs)
		pendingEnd, maskEnd = -1, sp.MaskEnd
		if sp.Mask && len(sp.IDs) > 0 && sp.LPs != nil {
			pendingEnd = sp.IDs[len(sp.IDs)-1]
		}
	}
	if rest != "" {
		literal(rest)
	}
	seq.count()
	return seq, nil
}

func (s *sequence) count() {
	if len(s.Mask) > 0 {
		s.Mask[0] = false // nothing predicts the first token
	}
	s.NTrain = 0
	for _, m := range s.Mask {
		if m {
			s.NTrain++
		}
	}
}

// truncate cuts the sequence to maxLen tokens (0: no limit).
func (s *sequence) truncate(maxLen int) bool {
	if maxLen <= 0 || len(s.Tokens) <= maxLen {
		return false
	}
	s.Tokens, s.Mask, s.OldLP = s.Tokens[:maxLen], s.Mask[:maxLen], s.OldLP[:maxLen]
	s.count()
	return true
}

func sampledID(c codec, tl rl.TokenLogprob) (int, error) {
	if s, ok := strings.CutPrefix(tl.Token, "token_id:"); ok {
		id, err := strconv.Atoi(s)
		if err != nil || id < 0 {
			return 0, fmt.Errorf("invalid token %q", tl.Token)
		}
		return id, nil
	}
	var b []byte
	if tl.Bytes != nil {
		b = make([]byte, len(tl.Bytes))
		for i, v := range tl.Bytes {
			b[i] = byte(v)
		}
	}
	id, ok := c.LookupToken(tl.Token, b)
	if !ok {
		return 0, fmt.Errorf("token %q is not in the vocabulary", tl.Token)
	}
	return id, nil
}

// wrapTools gives every tool the {"type": "function", "function": {...}}
// shape (a bare function schema is wrapped).
func wrapTools(tools []json.RawMessage) []json.RawMessage {
	if len(tools) == 0 {
		return nil
	}
	out := make([]json.RawMessage, len(tools))
	for i, t := range tools {
		var probe struct {
			Type     *string         `json:"type"`
			Function json.RawMessage `json:"function"`
		}
		if json.Unmarshal(t, &probe) == nil && probe.Function == nil {
			out[i] = append(append([]byte(`{"type":"function","function":`), t...), '}')
		} else {
			out[i] = t
		}
	}
	return out
}

// firstOccurrence is ART's _FirstOccurrenceTrie over the histories of one
// trajectory of exchanges: a sampled token is trained in the first history
// where it follows its prefix, not again where a later history repeats that
// prefix (a call that re-sent earlier turns in a history of its own, a
// regeneration, two choices that sampled the same tokens).
type firstOccurrence struct {
	tokens  [][]int  // earlier histories' tokens
	sampled [][]bool // and their trainable tokens before this check
}

// mask clears seq's trainable tokens that an earlier history with the same
// tokens up to them had trainable, and recounts seq.
func (f *firstOccurrence) mask(seq *sequence) {
	sampled := slices.Clone(seq.Mask)
	for k, toks := range f.tokens {
		for i := range commonPrefix(toks, seq.Tokens) {
			if f.sampled[k][i] {
				seq.Mask[i] = false
			}
		}
	}
	f.tokens, f.sampled = append(f.tokens, seq.Tokens), append(f.sampled, sampled)
	seq.count()
}

// prepared is a job's trajectories turned into weighted sequences.
type prepared struct {
	Seqs            []*sequence
	NumTrajectories int
	NumSkipped      int // no trainable tokens or zero advantage
	NumNoLogprobs   int // a choice without logprobs, trained on-policy
	NumTruncated    int
	Rewards         rl.RewardStats // the job's reward and reward_std_dev
}

// prepareRL tokenizes every trajectory and history and assigns advantages
// and weights (rl.md). It fails when no trajectory has an assistant choice.
func prepareRL(c codec, groups []rl.TrajectoryGroup, scaleRewards bool, maxLen int) (*prepared, error) {
	p := &prepared{}
	traj := 0
	anyChoice := false
	for gi, g := range groups {
		n := len(g.Trajectories)
		if n == 0 {
			continue
		}
		rewards := make([]float64, n)
		for ti, t := range g.Trajectories {
			rewards[ti] = t.Reward
		}
		adv, _, _ := rl.GroupAdvantages(rewards, scaleRewards)
		p.Rewards.AddGroup(rewards)
		for ti, t := range g.Trajectories {
			p.NumTrajectories++
			traj++
			A := adv[ti]
			where := fmt.Sprintf("trajectory_groups[%d].trajectories[%d]", gi, ti)
			hists, fromExchanges, err := t.Histories()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			var seqs []*sequence
			var seen firstOccurrence
			ntrain := 0
			sawChoice, onPolicy := false, false
			for hi, h := range hists {
				s, trunc, err := tokenizeHistory(c, h, maxLen)
				if errors.Is(err, errNoChoice) {
					continue
				}
				if err != nil {
					switch {
					case fromExchanges:
						return nil, fmt.Errorf("%s: exchanges: history %d: %w", where, hi, err)
					case hi > 0:
						return nil, fmt.Errorf("%s.additional_histories[%d]: %w", where, hi-1, err)
					}
					return nil, fmt.Errorf("%s: %w", where, err)
				}
				if fromExchanges {
					seen.mask(s)
				}
				sawChoice = true
				onPolicy = onPolicy || s.OnPolicy
				if trunc {
					p.NumTruncated++
				}
				if s.NTrain > 0 {
					s.Traj = traj - 1
					seqs = append(seqs, s)
					ntrain += s.NTrain
				}
			}
			if onPolicy {
				p.NumNoLogprobs++
			}
			anyChoice = anyChoice || sawChoice
			if ntrain == 0 || A == 0 {
				p.NumSkipped++
				continue
			}
			w := rl.TrajectoryWeight(ntrain)
			for _, s := range seqs {
				s.A, s.W = A, w
				p.Seqs = append(p.Seqs, s)
			}
		}
	}
	if !anyChoice {
		return nil, fmt.Errorf("no trainable trajectory: no trajectory has an assistant choice (messages_and_choices holds only chat messages; put the chat completion's choice, with logprobs where sampled with them, where the model answered)")
	}
	return p, nil
}
