package infer

import (
	"slices"

	"flywheel/internal/engine"
)

// The tool-call markers of the chat formats the server parses: Hermes/Qwen
// write a call as <tool_call>{...}</tool_call>, the Llama 3.1 family opens
// one with <|python_tag|>. Where a model's vocabulary has a marker as an
// added token, generation keeps its text (Rules.Kept), so that the server's
// tool-call parser sees it.
const (
	ToolCallOpen  = "<tool_call>"
	ToolCallClose = "</tool_call>"
	PythonTag     = "<|python_tag|>"
)

// FinishToolCalls is the finish reason of a choice that stopped (FinishStop)
// with tool calls in its output; see FinishReason.
const FinishToolCalls = "tool_calls"

// FinishReason is the finish reason a client is shown for a choice that
// ended with finish: FinishToolCalls in place of FinishStop when the caller
// found tool calls in its output (a choice cut at the length limit keeps
// FinishLength, as OpenAI's and vLLM's servers report it).
func FinishReason(finish string, toolCalls bool) string {
	if toolCalls && finish == FinishStop {
		return FinishToolCalls
	}
	return finish
}

// Rules are the generation rules of one base model, decided here once when
// its scheduler starts (Scheduler.Rules) and read by the server, which
// validates requests and shapes responses by them (as vLLM's engine core
// decides these and its HTTP layer reads them):
//
//   - the context length: the model's (engine.Model.MaxContext), capped by
//     Options.MaxLen;
//   - the tokens that end a choice: the end-of-sequence ids the model's files
//     declare (engine.Model.EOS) and the token the chat template closes a
//     turn with (e.g. <|im_end|> when the config names another);
//   - the tokens a forced tool call ends with: the template's end-of-turn
//     token when it is a special token, else every end token;
//   - the special tokens whose text stays in the output: the tool-call
//     markers the vocabulary has as added tokens (only for models with a
//     chat template); the text of other special tokens is left out
//     (skip_special_tokens).
//
// Rules are read-only after the scheduler starts; the slices they return
// must not be modified.
type Rules struct {
	maxLen  int
	eos     []int
	eosSet  map[int]bool
	turnEnd []int
	kept    []int
	keep    map[int]bool
}

// newRules decides the rules of e, its context capped at maxLen (0: none).
func newRules(e *engine.Model, maxLen int) *Rules {
	tok := e.Tokenizer
	r := &Rules{maxLen: e.MaxContext(), eosSet: map[int]bool{}, keep: map[int]bool{}}
	if maxLen > 0 && maxLen < r.maxLen {
		r.maxLen = maxLen
	}
	addEOS := func(id int) {
		if !r.eosSet[id] {
			r.eosSet[id] = true
			r.eos = append(r.eos, id)
		}
	}
	for _, id := range e.EOS() {
		addEOS(id)
	}
	if t := e.Template; t != nil {
		if name := t.EOSToken(); name != "" {
			if id, ok := tok.TokenToID(name); ok {
				addEOS(id)
				if tok.IsSpecial(id) {
					r.turnEnd = []int{id}
				}
			}
		}
		for _, marker := range []string{ToolCallOpen, ToolCallClose, PythonTag} {
			if id, ok := tok.AddedTokenID(marker); ok && !r.keep[id] {
				r.keep[id] = true
				r.kept = append(r.kept, id)
			}
		}
	}
	if r.turnEnd == nil {
		r.turnEnd = r.eos
	}
	return r
}

// MaxLen is the context length: prompt and generated tokens together.
func (r *Rules) MaxLen() int { return r.maxLen }

// EOS are the tokens that end a choice (unless Request.IgnoreEOS), in the
// order decided: the model's declared ids, then the template's.
func (r *Rules) EOS() []int { return r.eos }

// IsEOS reports whether id ends a choice (unless Request.IgnoreEOS).
func (r *Rules) IsEOS(id int) bool { return r.eosSet[id] }

// TurnEnd are the tokens a forced tool call may end with.
func (r *Rules) TurnEnd() []int { return r.turnEnd }

// Kept reports whether id is a special token whose text is output.
func (r *Rules) Kept(id int) bool { return r.keep[id] }

// KeptTokens are the special tokens whose text is output, in the order of
// the markers above.
func (r *Rules) KeptTokens() []int { return slices.Clip(r.kept) }

// Room is the most tokens a choice may generate after a prompt of
// promptLen tokens: the rest of the context (≤ 0 when none is left).
func (r *Rules) Room(promptLen int) int { return r.maxLen - promptLen }
