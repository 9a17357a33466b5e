package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"flywheel/internal/engine"
	"flywheel/internal/engine/chattmpl"
	"flywheel/internal/engine/tokenizer"
	"flywheel/internal/httpx"
	"flywheel/internal/infer"
)

// servedModel is a loaded base model with what serving derives from it, and its
// inference scheduler. The generation rules (context length, end tokens,
// kept special tokens) are the scheduler's (infer.Rules); serving reads them.
type servedModel struct {
	id     string
	m      *engine.Model
	tok    *tokenizer.Tokenizer
	rules  *infer.Rules
	format toolFormat
	sched  *infer.Scheduler

	limits        chattmpl.Limits // of each template render
	bytesPerToken int             // prompt bytes per context token (the cheap bound)

	jvOnce sync.Once
	jv     *jsonVocab
}

func newLModel(m *engine.Model, opts *Options, prefix *infer.PrefixCache) (*servedModel, error) {
	if m.Tokenizer == nil {
		return nil, fmt.Errorf("model %s has no tokenizer", m.ID)
	}
	l := &servedModel{id: m.ID, m: m, tok: m.Tokenizer, limits: opts.TemplateLimits, bytesPerToken: opts.MaxPromptBytesPerToken}
	if m.Template != nil {
		l.format = detectToolFormat(m.Template.Source())
	}
	sched, err := infer.NewScheduler(m, infer.Options{MaxBatch: opts.MaxBatch, MaxQueue: opts.MaxQueue, PrefillChunk: opts.PrefillChunk,
		MaxLen: opts.MaxModelLen, PrefixCache: prefix, Logger: opts.Logger})
	if err != nil {
		return nil, fmt.Errorf("serve: model %s: %w", m.ID, err)
	}
	l.sched, l.rules = sched, sched.Rules()
	return l, nil
}

// maxLen is the context length (the scheduler's rule).
func (l *servedModel) maxLen() int { return l.rules.MaxLen() }

// markerFor returns the added token of a tool-call marker that lit starts
// with.
func (l *servedModel) markerFor(lit string) (int, bool) {
	if lit == "" {
		return 0, false
	}
	for _, id := range l.rules.KeptTokens() {
		if c := l.tok.IDToToken(id); c != "" && strings.HasPrefix(lit, c) {
			return id, true
		}
	}
	return 0, false
}

// chatInput is a conversation to render.
type chatInput struct {
	ctx                  context.Context // the request's: a client that leaves stops the render
	messages             []ChatMessage
	tools                json.RawMessage // the request's tools array, raw (key order kept)
	addGenerationPrompt  bool
	continueFinalMessage bool
	kwargs               json.RawMessage
}

// templateMessages converts request messages to the dicts chat templates
// expect: content as a string (text parts joined by "\n"), tool-call
// arguments parsed into objects (as vLLM does), key order role, content, ...
func templateMessages(msgs []ChatMessage) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, len(msgs))
	for i, m := range msgs {
		var b bytes.Buffer
		b.WriteString(`{"role":`)
		writeJSON(&b, m.Role)
		content, err := messageText(m.Content, fmt.Sprintf("messages[%d].content", i))
		if err != nil {
			return nil, err
		}
		b.WriteString(`,"content":`)
		if content == nil {
			b.WriteString("null")
		} else {
			writeJSON(&b, *content)
		}
		if m.Name != "" {
			b.WriteString(`,"name":`)
			writeJSON(&b, m.Name)
		}
		if len(m.ToolCalls) > 0 {
			b.WriteString(`,"tool_calls":[`)
			for j, tc := range m.ToolCalls {
				if j > 0 {
					b.WriteByte(',')
				}
				b.WriteString(`{"id":`)
				writeJSON(&b, tc.ID)
				b.WriteString(`,"type":"function","function":{"name":`)
				writeJSON(&b, tc.Function.Name)
				b.WriteString(`,"arguments":`)
				args := strings.TrimSpace(tc.Function.Arguments)
				if args != "" && json.Valid([]byte(args)) && (args[0] == '{' || args[0] == '[') {
					b.WriteString(args)
				} else if args == "" {
					b.WriteString("{}")
				} else {
					writeJSON(&b, tc.Function.Arguments)
				}
				b.WriteString("}}")
			}
			b.WriteByte(']')
		}
		if m.ToolCallID != "" {
			b.WriteString(`,"tool_call_id":`)
			writeJSON(&b, m.ToolCallID)
		}
		b.WriteByte('}')
		out[i] = json.RawMessage(b.Bytes())
	}
	return out, nil
}

func writeJSON(b *bytes.Buffer, v any) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	b.Truncate(b.Len() - 1) // Encode's newline
}

// messageText returns a message's content as text: a string, or the text
// parts of a list joined by "\n"; nil for null/absent.
func messageText(raw json.RawMessage, param string) (*string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, httpx.Invalid(param, "invalid_type", "%s: malformed string", param)
		}
		return &s, nil
	case '[':
		var parts []struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(raw, &parts); err != nil {
			return nil, httpx.Invalid(param, "invalid_type", "%s: expected a string or a list of content parts", param)
		}
		var texts []string
		for j, p := range parts {
			if p.Type != "text" {
				return nil, httpx.Invalid(fmt.Sprintf("%s[%d].type", param, j), "unsupported_value", "content part type %q is not supported (only \"text\")", p.Type)
			}
			if p.Text == nil {
				return nil, httpx.Invalid(fmt.Sprintf("%s[%d].text", param, j), "missing_field", "%s[%d].text is required", param, j)
			}
			texts = append(texts, *p.Text)
		}
		s := strings.Join(texts, "\n")
		return &s, nil
	}
	return nil, httpx.Invalid(param, "invalid_type", "%s: expected a string or a list of content parts", param)
}

// render applies the model's chat template.
func (l *servedModel) render(in chatInput) (string, error) {
	if l.m.Template == nil {
		msg := "this model has no chat template"
		if le, ok := chattmpl.IsLimit(l.m.TemplateErr); ok {
			return "", httpx.Invalid("model", "chat_template_limit", "this model's chat template cannot be used: %s", strings.TrimPrefix(le.Error(), "chattmpl: "))
		} else if l.m.TemplateErr != nil {
			msg = "this model has no usable chat template"
		}
		return "", httpx.Invalid("model", "no_chat_template", "%s", msg)
	}
	msgs, err := templateMessages(in.messages)
	if err != nil {
		return "", err
	}
	ci := chattmpl.Input{Messages: msgs, AddGenerationPrompt: in.addGenerationPrompt, ContinueFinalMessage: in.continueFinalMessage, Limits: l.limits}
	if t := bytes.TrimSpace(in.tools); len(t) > 0 && string(t) != "null" {
		var tools []json.RawMessage
		if err := json.Unmarshal(t, &tools); err != nil {
			return "", httpx.Invalid("tools", "invalid_type", "tools: expected an array")
		}
		if len(tools) > 0 {
			ci.Tools = tools
		}
	}
	if k := bytes.TrimSpace(in.kwargs); len(k) > 0 && string(k) != "null" {
		keys, vals, err := orderedObject(k)
		if err != nil {
			return "", httpx.Invalid("chat_template_kwargs", "invalid_type", "chat_template_kwargs: expected an object")
		}
		ci.Extra = map[string]any{}
		for i, key := range keys {
			ci.Extra[key] = vals[i]
		}
	}
	ctx := in.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	text, err := l.m.Template.RenderContext(ctx, ci)
	if err != nil {
		return "", templateError(err)
	}
	if err := l.checkPromptBytes("messages", "the rendered prompt is", len(text)); err != nil {
		return "", err
	}
	return text, nil
}

// tokenString is a token as logprobs show it.
func (l *servedModel) tokenString(id int, asIDs bool) string {
	if asIDs {
		return fmt.Sprintf("token_id:%d", id)
	}
	return string(l.tok.TokenBytes(id))
}

func (l *servedModel) tokenBytesInts(id int) []int {
	b := l.tok.TokenBytes(id)
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}
