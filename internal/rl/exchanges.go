package rl

// A trajectory's exchanges: the inference calls ART 0.5.23's tracing
// helpers capture (art.trajectories.TrajectoryExchanges), the second form of
// a trajectory beside messages_and_choices. Only Chat Completions exchanges
// are read; they are turned into histories (messages and choices) the way
// ART's chat_completions_histories builds them when the responses carry no
// exact token ids, and those histories are trained as messages_and_choices
// are (rl.md), each sampled token once (the trainer's first-occurrence
// mask, ART's _FirstOccurrenceTrie).

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"flywheel/internal/jsonlex"
)

// chatExchange is one element of exchanges.chat_completions as ART dumps
// a ChatCompletionsExchange: the request body as sent, the response as
// received, the call's times (and its computed "model", recomputed here).
type chatExchange struct {
	StartTime string `json:"start_time"`
	EndTime   string `json:"end_time"`
	Request   struct {
		Model               json.RawMessage   `json:"model"`
		Messages            []json.RawMessage `json:"messages"`
		Tools               json.RawMessage   `json:"tools"`
		ChatTemplateKwargs  json.RawMessage   `json:"chat_template_kwargs"`
		MaxCompletionTokens json.RawMessage   `json:"max_completion_tokens"`
		MaxTokens           json.RawMessage   `json:"max_tokens"`
	} `json:"request"`
	Response struct {
		Model     json.RawMessage   `json:"model"`
		Choices   []json.RawMessage `json:"choices"`
		PromptIDs json.RawMessage   `json:"prompt_token_ids"`
	} `json:"response"`
}

// exchangeSource is where a history's message came from: a choice of an
// exchange (Choice set: it is trained) or the request (Choice nil).
type exchangeSource struct {
	Choice json.RawMessage
	// HitLimit: the choice ended in tool calls with as many sampled tokens
	// as the request allowed (ART does not continue such a history).
	HitLimit bool
}

// exchangeContext is what a history's messages render with; a change of
// it between calls starts another history.
type exchangeContext struct {
	tools, kwargs any // decoded; nil when absent or null
}

// branch is a history being built (ART's _Branch): its messages as the
// latest request sent them (items, normalized for comparison; raw, as
// sent), where each came from, its order key and first call's time.
type branch struct {
	items   []any
	keys    []string // lineage keys: the items' visible parts, canonical
	raw     []json.RawMessage
	sources []*exchangeSource // nil: from a request
	ctx     exchangeContext
	tools   json.RawMessage
	kwargs  json.RawMessage
	order   []int
	first   time.Time
}

// exchangeHistories turns the exchanges value of a trajectory at path
// into its histories, in ART's order. Errors name the JSON path.
func exchangeHistories(path string, raw json.RawMessage) ([]History, error) {
	base := jsonlex.Path(path)
	var ex struct {
		ChatCompletions []chatExchange `json:"chat_completions"`
	}
	if err := json.Unmarshal(raw, &ex); err != nil {
		return nil, valueError(path, "%s", err.Error())
	}
	cc := base.Key("chat_completions")
	type call struct {
		i          int
		start, end time.Time
	}
	calls := make([]call, len(ex.ChatCompletions))
	model := ""
	for i := range ex.ChatCompletions {
		e := &ex.ChatCompletions[i]
		at := cc.Index(i)
		var err error
		calls[i].i = i
		if calls[i].start, err = exchangeTime(string(at.Key("start_time")), e.StartTime); err != nil {
			return nil, err
		}
		if calls[i].end, err = exchangeTime(string(at.Key("end_time")), e.EndTime); err != nil {
			return nil, err
		}
		// ART's ChatCompletionsExchange.model: the request's model when it
		// is a string, else the response's.
		m, ok := jsonString(e.Request.Model)
		if !ok {
			m, ok = jsonString(e.Response.Model)
		}
		if !ok {
			return nil, valueError(string(at), "the exchange names no model (request.model or response.model); ART requires every training exchange to identify its model")
		}
		if model != "" && m != model {
			return nil, valueError(string(cc), "the exchanges name more than one model (%q and %q); a training job trains one model: capture only the calls of the model being trained", model, m)
		}
		model = m
	}
	// ART orders the calls by (start_time, end_time), stably.
	sort.SliceStable(calls, func(a, b int) bool {
		if !calls[a].start.Equal(calls[b].start) {
			return calls[a].start.Before(calls[b].start)
		}
		return calls[a].end.Before(calls[b].end)
	})
	var branches []*branch
	for seq, c := range calls {
		if err := extendBranches(&branches, &ex.ChatCompletions[c.i], cc.Index(c.i), seq, c.start); err != nil {
			return nil, err
		}
	}
	sort.SliceStable(branches, func(a, b int) bool {
		if !branches[a].first.Equal(branches[b].first) {
			return branches[a].first.Before(branches[b].first)
		}
		return slices.Compare(branches[a].order, branches[b].order) < 0
	})
	hs := make([]History, len(branches))
	for k, b := range branches {
		h := History{MessagesAndChoices: make([]json.RawMessage, len(b.raw)), ChatTemplateKwargs: b.kwargs}
		if b.tools != nil {
			if err := json.Unmarshal(b.tools, &h.Tools); err != nil {
				return nil, err // checked by Validate
			}
		}
		for i, src := range b.sources {
			h.MessagesAndChoices[i] = b.raw[i]
			if src != nil {
				h.MessagesAndChoices[i] = src.Choice
			}
		}
		hs[k] = h
	}
	return hs, nil
}

// extendBranches adds one call to the histories (ART's
// chat_completions_histories loop body and _extend_branches): each choice
// continues the longest history its request's messages extend, or, when the
// request repeats a history's beginning (a regeneration), branches from it,
// or starts a new history.
func extendBranches(branches *[]*branch, e *chatExchange, at jsonlex.Path, seq int, start time.Time) error {
	var ctx exchangeContext
	tools, kwargs := nonNull(e.Request.Tools), nonNull(e.Request.ChatTemplateKwargs)
	_ = json.Unmarshal(tools, &ctx.tools) // nil stays nil; Validate checked the JSON
	_ = json.Unmarshal(kwargs, &ctx.kwargs)
	prompt := make([]any, len(e.Request.Messages))
	keys := make([]string, len(prompt))
	for i, m := range e.Request.Messages {
		var v any
		if err := json.Unmarshal(m, &v); err != nil {
			return valueError(string(at.Key("request").Key("messages").Index(i)), "%s", err.Error())
		}
		prompt[i] = normalizeMessage(v)
		keys[i] = visibleKey(prompt[i])
	}
	if nonNull(e.Response.PromptIDs) != nil {
		return exactIDsError(string(at.Key("response").Key("prompt_token_ids")))
	}
	limit := tokenLimit(e.Request.MaxCompletionTokens, e.Request.MaxTokens)
	type output struct {
		index int
		item  any
		src   *exchangeSource
	}
	outs := make([]output, len(e.Response.Choices))
	seen := map[int]bool{}
	for k, raw := range e.Response.Choices {
		cp := at.Key("response").Key("choices").Index(k)
		var ch struct {
			Index        *float64        `json:"index"`
			Message      json.RawMessage `json:"message"`
			FinishReason *string         `json:"finish_reason"`
			TokenIDs     json.RawMessage `json:"token_ids"`
			PromptIDs    json.RawMessage `json:"prompt_token_ids"`
			Logprobs     *struct {
				Content []TokenLogprob `json:"content"`
				Refusal []TokenLogprob `json:"refusal"`
			} `json:"logprobs"`
		}
		if err := json.Unmarshal(raw, &ch); err != nil {
			return valueError(string(cp), "%s", err.Error())
		}
		if nonNull(ch.TokenIDs) != nil || nonNull(ch.PromptIDs) != nil {
			return exactIDsError(string(cp))
		}
		if ch.Index == nil || *ch.Index < 0 || *ch.Index != float64(int(*ch.Index)) {
			return valueError(string(cp.Key("index")), "a choice's index must be a non-negative integer")
		}
		idx := int(*ch.Index)
		if seen[idx] {
			return valueError(string(cp.Key("index")), "the response has two choices with index %d", idx)
		}
		seen[idx] = true
		var msg any
		if err := json.Unmarshal(ch.Message, &msg); err != nil {
			return valueError(string(cp.Key("message")), "%s", err.Error())
		}
		src := &exchangeSource{Choice: raw}
		if ch.FinishReason != nil && *ch.FinishReason == "tool_calls" && limit > 0 && ch.Logprobs != nil {
			if n, ok := exactCount(ch.Logprobs.Content, ch.Logprobs.Refusal); ok && n >= limit {
				m, _ := msg.(map[string]any)
				if tc, _ := m["tool_calls"].([]any); len(tc) > 0 {
					src.HitLimit = true
				}
			}
		}
		outs[k] = output{index: idx, item: normalizeMessage(dropNulls(msg)), src: src}
	}
	sort.Slice(outs, func(a, b int) bool { return outs[a].index < outs[b].index })

	// continues: the history's last choice before the request's end did not
	// stop at the token limit in the middle of its tool calls.
	continues := func(b *branch) bool {
		for i := min(len(prompt), len(b.sources)) - 1; i >= 0; i-- {
			if s := b.sources[i]; s != nil {
				return !s.HitLimit
			}
		}
		return true
	}
	// Where the request's messages came from: a history whose messages it
	// repeats (by their visible parts) lends its sources; the rest are the
	// request's (ART's _lineage_prompt_sources).
	sources := make([]*exchangeSource, len(prompt))
	if p := pickBranch(*branches, func(b *branch) bool {
		return len(b.items) < len(prompt) && slices.Equal(keys[:len(b.items)], b.keys)
	}, true); p != nil {
		copy(sources, p.sources)
	}
	var parent *branch
	if p := pickBranch(*branches, func(b *branch) bool {
		return reflect.DeepEqual(b.ctx, ctx) && isPrefix(b.items, prompt) && continues(b)
	}, true); p != nil {
		parent = p
		*branches = slices.DeleteFunc(*branches, func(b *branch) bool { return b == p })
		sources = append(slices.Clone(p.sources), sources[len(p.items):]...)
	} else if p := pickBranch(*branches, func(b *branch) bool {
		return reflect.DeepEqual(b.ctx, ctx) && isPrefix(prompt, b.items) && continues(b)
	}, false); p != nil {
		parent = p
		sources = slices.Clone(p.sources[:len(prompt)])
	}
	order, first := []int{seq}, start
	if parent != nil {
		order, first = parent.order, parent.first
	}
	for _, o := range outs {
		*branches = append(*branches, &branch{
			items:   append(slices.Clone(prompt), o.item),
			keys:    append(slices.Clone(keys), visibleKey(o.item)),
			raw:     append(slices.Clone(e.Request.Messages), o.src.Choice),
			sources: append(slices.Clone(sources), o.src),
			ctx:     ctx, tools: tools, kwargs: kwargs,
			order: append(slices.Clone(order), o.index),
			first: first,
		})
	}
	return nil
}

// pickBranch is the branch that satisfies ok with the most items (when
// longest) and then the least order key.
func pickBranch(bs []*branch, ok func(*branch) bool, longest bool) *branch {
	var best *branch
	for _, b := range bs {
		if !ok(b) {
			continue
		}
		if best == nil || longest && len(b.items) > len(best.items) ||
			(!longest || len(b.items) == len(best.items)) && slices.Compare(b.order, best.order) < 0 {
			best = b
		}
	}
	return best
}

func isPrefix(prefix, v []any) bool {
	return len(prefix) <= len(v) && reflect.DeepEqual(prefix, v[:len(prefix)])
}

// normalizeMessage is ART's normalize_chat_message: annotations dropped,
// reasoning_content spelled reasoning, an assistant's null content "", any
// other null content and empty tool_calls dropped.
func normalizeMessage(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := make(map[string]any, len(m))
	for k, x := range m {
		out[k] = x
	}
	delete(out, "annotations")
	// Python's "not reasoning" for the values a reasoning takes (a string).
	noReasoning := out["reasoning"] == nil || out["reasoning"] == "" || out["reasoning"] == false
	if rc, ok := out["reasoning_content"]; ok && rc != nil && noReasoning {
		out["reasoning"] = rc
		delete(out, "reasoning_content")
	} else if reflect.DeepEqual(out["reasoning_content"], out["reasoning"]) {
		delete(out, "reasoning_content")
	}
	if c, ok := out["content"]; ok && c == nil || !ok {
		if out["role"] == "assistant" {
			out["content"] = ""
		} else {
			delete(out, "content")
		}
	}
	if tc, ok := out["tool_calls"].([]any); ok && len(tc) == 0 {
		delete(out, "tool_calls")
	}
	return out
}

// dropNulls removes null members of objects, recursively (pydantic's
// exclude_none, with which ART dumps a choice's message).
func dropNulls(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if e != nil {
				out[k] = dropNulls(e)
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = dropNulls(e)
		}
		return out
	}
	return v
}

// visibleKey is a message's lineage key: its canonical JSON without its
// reasoning (ART's _chat_message_key with visible_only).
func visibleKey(v any) string {
	if m, ok := v.(map[string]any); ok {
		c := make(map[string]any, len(m))
		for k, x := range m {
			if k != "reasoning" && k != "reasoning_content" {
				c[k] = x
			}
		}
		v = c
	}
	b, _ := json.Marshal(v) // map keys sorted, as sort_keys
	return string(b)
}

// tokenLimit is the request's max_completion_tokens, else max_tokens, when
// a positive integer; 0 otherwise.
func tokenLimit(vals ...json.RawMessage) int {
	for _, v := range vals {
		if v = nonNull(v); v == nil {
			continue
		}
		n, err := strconv.Atoi(string(v))
		if err != nil || n <= 0 {
			return 0
		}
		return n
	}
	return 0
}

// exactCount is the number of sampled tokens when every one carries its
// exact id ("token_id:N"), as ART counts a choice's output without
// token_ids.
func exactCount(lists ...[]TokenLogprob) (int, bool) {
	n := 0
	for _, l := range lists {
		for _, t := range l {
			d, ok := strings.CutPrefix(t.Token, "token_id:")
			if !ok || d == "" || strings.Trim(d, "0123456789") != "" {
				return 0, false
			}
			n++
		}
	}
	return n, n > 0
}

// exchangeTime parses an exchange's start_time or end_time as pydantic
// writes a datetime (ISO 8601; without a zone it is UTC, as ART reads it).
func exchangeTime(path, s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, valueError(path, "%q is not an ISO 8601 date-time", s)
}

// exactIDsError refuses a response that carries exact token ids.
func exactIDsError(path string) error {
	return valueError(path, "exact token ids (prompt_token_ids, token_ids) from another inference server cannot be trained faithfully: flywheel renders the prompt with the base model's chat template and trains the ids the logprobs name; capture the calls without return_token_ids")
}

func jsonString(v json.RawMessage) (string, bool) {
	var s string
	if v = nonNull(v); v == nil || json.Unmarshal(v, &s) != nil {
		return "", false
	}
	return s, true
}

// nonNull is v without surrounding space, nil when absent or null.
func nonNull(v json.RawMessage) json.RawMessage {
	v = bytes.TrimSpace(v)
	if len(v) == 0 || string(v) == "null" {
		return nil
	}
	return v
}
