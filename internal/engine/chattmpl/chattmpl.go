// Package chattmpl renders Hugging Face chat templates the way Python
// transformers does (apply_chat_template), byte for byte.
//
// It contains its own interpreter for the Jinja2 subset chat templates use,
// configured like transformers' environment: trim_blocks=True,
// lstrip_blocks=True, the loopcontrols extension, the {% generation %} tag,
// keep_trailing_newline=False, a sandbox (no list/dict mutation), and the
// globals raise_exception, strftime_now, namespace, range and dict. Values
// follow Python semantics: printing a list or dict gives its Python repr
// (single quotes, True/None), `tojson` is json.dumps(ensure_ascii=False) with
// Python's separators (", " and ": ", or "," and ": " when indent is given),
// and JSON objects keep their key order (messages and tools are accepted as
// raw JSON for that reason).
//
// A *Template is immutable after Parse/Load and safe for concurrent use.
// Templates are untrusted code: renders are bounded (output size, the size of
// every value built, total allocation, execution steps, recursion, time and
// the caller's context; see Limits), parsing bounds nesting, and neither
// panics. A render that hits a limit fails with a *LimitError naming it.
//
// Known differences from Python Jinja2, none of which the tested templates hit:
// integers beyond int64 become float64; lone UTF-16 surrogates in JSON strings
// become U+FFFD; macros accept surplus arguments (Python raises TypeError);
// an unknown filter or test fails when executed rather than at parse time;
// upper/lower apply Python's multi-character case mappings only for the common
// cases (ß, ligatures, İ); printing a function gives a placeholder instead of
// Python's address-bearing repr; the ext.do tag and str % formatting beyond the
// common conversions are not supported.
//
// # Where assistant content lands
//
// Trainers that splice sampled token ids into a rendered conversation use
// RenderWithSpans: it reports the byte range of each assistant message's
// content in the rendered text. It renders once with the real contents and
// once with unique sentinel strings in place of each assistant content, then
// checks that the real output equals the sentinel output with every sentinel
// replaced by the (possibly stripped) content; if a template transforms the
// content any other way, or renders it more or less than once, it returns an
// error wrapping ErrUnstableSpans rather than a guess.
package chattmpl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ErrNoChatTemplate is returned by Load when a model folder has no chat template.
var ErrNoChatTemplate = errors.New("chattmpl: model has no chat template")

// ErrUnstableSpans is returned by RenderWithSpans when the template does not
// render assistant contents verbatim (or stripped) exactly once each.
var ErrUnstableSpans = errors.New("chattmpl: assistant content spans cannot be located")

// Template is a parsed chat template (plus its named variants when the model
// ships several, as tokenizer_config.json's list form allows).
type Template struct {
	name     string
	source   string
	nodes    []node
	bos, eos string
	specials map[string]any // special_tokens_map entries, as strings / lists of strings
	variants map[string]*Template
}

// Input is what apply_chat_template receives.
type Input struct {
	// Messages are the conversation, one JSON object each ({"role": ..., "content": ...}).
	// Raw JSON keeps key order, which tojson output depends on.
	Messages []json.RawMessage
	// Tools are the tool schemas; nil means no tools (the template sees None).
	Tools []json.RawMessage
	// Documents for RAG templates; nil means None.
	Documents []json.RawMessage
	// AddGenerationPrompt appends the assistant header after the conversation.
	AddGenerationPrompt bool
	// ContinueFinalMessage cuts the output right after the final message's
	// content so the model continues it (transformers' continue_final_message).
	ContinueFinalMessage bool
	// Extra are additional template variables (chat_template_kwargs), e.g.
	// "enable_thinking": false. Values may be Go values, json.RawMessage or *Dict.
	Extra map[string]any
	// Now is the clock behind strftime_now; nil means time.Now.
	Now func() time.Time
	// TemplateName picks a named template ("default", "tool_use", ...);
	// empty selects as transformers does.
	TemplateName string
	// Limits bound the render; zero fields take DefaultLimits.
	Limits Limits
}

// Parse compiles a chat template. bosToken and eosToken are exposed to the
// template as bos_token and eos_token.
func Parse(src string, bosToken, eosToken string) (*Template, error) {
	t, err := parseNamed("default", src)
	if err != nil {
		return nil, err
	}
	t.setTokens(bosToken, eosToken, nil)
	return t, nil
}

func parseNamed(name, src string) (_ *Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &TemplateSyntaxError{0, fmt.Sprintf("internal parser error: %v", r)}
		}
	}()
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	nodes, err := parse(toks)
	if err != nil {
		return nil, err
	}
	return &Template{name: name, source: src, nodes: nodes}, nil
}

func (t *Template) setTokens(bos, eos string, specials map[string]any) {
	if specials == nil {
		specials = map[string]any{}
	}
	if bos != "" {
		specials["bos_token"] = bos
	}
	if eos != "" {
		specials["eos_token"] = eos
	}
	t.bos, t.eos, t.specials = bos, eos, specials
	for _, v := range t.variants {
		v.bos, v.eos, v.specials = bos, eos, specials
	}
}

// Source returns the template text.
func (t *Template) Source() string { return t.source }

// Name is "default" or the name of the template in a multi-template config.
func (t *Template) Name() string { return t.name }

// BOSToken and EOSToken return the special tokens given to the template.
func (t *Template) BOSToken() string { return t.bos }

// EOSToken returns the eos_token string.
func (t *Template) EOSToken() string { return t.eos }

// Names lists the named templates available (at least "default" when there is one).
func (t *Template) Names() []string {
	var out []string
	for n := range t.variants {
		out = append(out, n)
	}
	if len(out) == 0 {
		out = []string{t.name}
	}
	sort.Strings(out)
	return out
}

// pick selects the template variant as transformers' get_chat_template does.
func (t *Template) pick(name string, hasTools bool) (*Template, error) {
	if len(t.variants) == 0 {
		if name != "" && name != t.name {
			return nil, fmt.Errorf("chattmpl: no chat template named %q", name)
		}
		return t, nil
	}
	if name != "" {
		if v, ok := t.variants[name]; ok {
			return v, nil
		}
		return nil, fmt.Errorf("chattmpl: no chat template named %q (have %v)", name, t.Names())
	}
	if hasTools {
		if v, ok := t.variants["tool_use"]; ok {
			return v, nil
		}
	}
	if v, ok := t.variants["default"]; ok {
		return v, nil
	}
	return nil, fmt.Errorf("chattmpl: this model has multiple chat templates with no default specified (have %v)", t.Names())
}

// Execute renders the template with exactly the given variables (converted
// with FromGo; pass json.RawMessage or *Dict to keep key order) plus the
// special tokens. It applies none of apply_chat_template's conventions.
func (t *Template) Execute(vars map[string]any, now func() time.Time) (string, error) {
	ctx := map[string]any{}
	for k, v := range t.specials {
		ctx[k] = v
	}
	for k, v := range vars {
		c, err := FromGo(v)
		if err != nil {
			return "", err
		}
		ctx[k] = c
	}
	out, _, err := t.run(context.Background(), DefaultLimits, ctx, now)
	return out, err
}

func (t *Template) run(c context.Context, lim Limits, ctx map[string]any, now func() time.Time) (_ string, _ []span, err error) {
	defer func() {
		if r := recover(); r != nil {
			if lp, ok := r.(limitPanic); ok {
				err = lp.err
				return
			}
			err = rerr("internal error: %v", r)
		}
	}()
	if now == nil {
		now = time.Now
	}
	var out strings.Builder
	st := &state{now: now, out: &out, b: newBudget(c, lim)}
	if err := st.checkTime(); err != nil {
		return "", nil, err
	}
	root := &frame{vars: ctx}
	top := newFrame(root)
	if err := st.exec(t.nodes, top, &out); err != nil {
		if err == errBreak || err == errContinue {
			return "", nil, rerr("break/continue outside loop")
		}
		return "", nil, err
	}
	return out.String(), st.genSpans, nil
}

// Render applies the chat template to in, as transformers'
// apply_chat_template(tokenize=False) does, within in.Limits and without a
// context; RenderContext is the same under a context.
func (t *Template) Render(in Input) (string, error) {
	return t.RenderContext(context.Background(), in)
}

// RenderContext renders like Render; the render stops with a *LimitError
// ("canceled") once ctx is done, as well as at any of in.Limits.
func (t *Template) RenderContext(ctx context.Context, in Input) (string, error) {
	msgs, err := parseList(in.Messages, "message")
	if err != nil {
		return "", err
	}
	out, _, err := t.renderValues(ctx, in, msgs)
	return out, err
}

// RenderWithGenerationSpans renders like Render and also returns the byte
// ranges of the output produced inside {% generation %} ... {% endgeneration %}
// blocks (what transformers' return_assistant_tokens_mask is built from; the
// Python offsets count code points, these count bytes). Span.Message is -1.
// Templates without generation blocks return no spans.
func (t *Template) RenderWithGenerationSpans(in Input) (string, []Span, error) {
	msgs, err := parseList(in.Messages, "message")
	if err != nil {
		return "", nil, err
	}
	out, gen, err := t.renderValues(context.Background(), in, msgs)
	if err != nil {
		return "", nil, err
	}
	spans := make([]Span, 0, len(gen))
	for _, g := range gen {
		if g.start >= len(out) {
			break // cut away by continue_final_message
		}
		spans = append(spans, Span{Message: -1, Start: g.start, End: min(g.end, len(out))})
	}
	return out, spans, nil
}

func parseList(raw []json.RawMessage, what string) ([]any, error) {
	out := make([]any, len(raw))
	for i, r := range raw {
		v, err := ParseJSON(r)
		if err != nil {
			return nil, fmt.Errorf("chattmpl: %s %d: %w", what, i, err)
		}
		out[i] = v
	}
	return out, nil
}

func (t *Template) renderValues(c context.Context, in Input, msgs []any) (string, []span, error) {
	if in.AddGenerationPrompt && in.ContinueFinalMessage {
		return "", nil, errors.New("chattmpl: continue_final_message and add_generation_prompt are not compatible")
	}
	tmpl, err := t.pick(in.TemplateName, in.Tools != nil)
	if err != nil {
		return "", nil, err
	}
	ctx := map[string]any{}
	for k, v := range t.specials {
		ctx[k] = v
	}
	for k, v := range in.Extra {
		switch k {
		case "messages", "tools", "documents", "add_generation_prompt":
			return "", nil, fmt.Errorf("chattmpl: extra variable %q collides with a chat template argument", k)
		}
		c, err := FromGo(v)
		if err != nil {
			return "", nil, fmt.Errorf("chattmpl: extra variable %q: %w", k, err)
		}
		ctx[k] = c
	}
	ctx["messages"] = msgs
	ctx["tools"] = nil
	if in.Tools != nil {
		tools, err := parseList(in.Tools, "tool")
		if err != nil {
			return "", nil, err
		}
		ctx["tools"] = tools
	}
	ctx["documents"] = nil
	if in.Documents != nil {
		docs, err := parseList(in.Documents, "document")
		if err != nil {
			return "", nil, err
		}
		ctx["documents"] = docs
	}
	ctx["add_generation_prompt"] = in.AddGenerationPrompt
	out, gen, err := tmpl.run(c, in.Limits, ctx, in.Now)
	if err != nil {
		return "", nil, err
	}
	if in.ContinueFinalMessage {
		out, err = cutAfterFinal(out, msgs)
	}
	return out, gen, err
}

// cutAfterFinal mirrors transformers' continue_final_message handling.
func cutAfterFinal(rendered string, msgs []any) (string, error) {
	if len(msgs) == 0 {
		return "", errors.New("chattmpl: continue_final_message needs at least one message")
	}
	last, _ := msgs[len(msgs)-1].(*Dict)
	var content any
	if last != nil {
		content, _ = last.Get("content")
	}
	var final string
	switch c := content.(type) {
	case string:
		final = c
	case []any:
		found := false
		for i := len(c) - 1; i >= 0; i-- {
			if blk, ok := c[i].(*Dict); ok {
				if txt, ok := blk.Get("text"); ok {
					final, found = pyStr(txt), true
					break
				}
			}
		}
		if !found {
			return "", errors.New("chattmpl: continue_final_message is set but we could not find any text to continue in the final message")
		}
	default:
		return "", errors.New("chattmpl: continue_final_message is set but the final message has no text content")
	}
	stripped := pyStrip(final)
	loc := strings.LastIndex(rendered, stripped)
	if loc < 0 {
		return "", errors.New("chattmpl: continue_final_message is set but the final message does not appear in the chat after applying the chat template")
	}
	n := len(pyLStrip(final))
	if loc+n <= len(rendered) && rendered[loc:loc+n] == final {
		return rendered[:loc+n], nil
	}
	return rendered[:loc+len(stripped)], nil
}

// Span locates one message's content in rendered text: Text[Start:End] is
// the content as the template rendered it (it may be stripped of surrounding
// whitespace by templates that trim).
type Span struct {
	Message    int // index into Input.Messages
	Start, End int // byte offsets
}

// RenderWithSpans renders like Render and also reports where the content of
// every assistant message with a non-empty string content lands (in message
// order of appearance in the text; empty contents and list contents get no span). See the package
// documentation for how this is verified.
func (t *Template) RenderWithSpans(in Input) (string, []Span, error) {
	msgs, err := parseList(in.Messages, "message")
	if err != nil {
		return "", nil, err
	}
	real, _, err := t.renderValues(context.Background(), in, msgs)
	if err != nil {
		return "", nil, err
	}
	sentMsgs, err := parseList(in.Messages, "message")
	if err != nil {
		return "", nil, err
	}
	type slot struct {
		msg      int
		sentinel string
		content  string
	}
	var slots []slot
	for i, m := range sentMsgs {
		d, ok := m.(*Dict)
		if !ok {
			continue
		}
		role, _ := d.Get("role")
		c, ok := d.Get("content")
		cs, isStr := c.(string)
		if role != "assistant" || !ok || !isStr || cs == "" {
			continue // nothing to splice; templates often test content truthiness
		}
		s := "\ue000fwspan" + strconv.Itoa(i) + "\ue001"
		d.Set("content", s)
		slots = append(slots, slot{i, s, cs})
	}
	if len(slots) == 0 {
		return real, nil, nil
	}
	sent, _, err := t.renderValues(context.Background(), in, sentMsgs)
	if err != nil {
		return "", nil, fmt.Errorf("%w: sentinel render failed: %v", ErrUnstableSpans, err)
	}
	// Cut the sentinel render into literal segments around each sentinel.
	type hit struct {
		pos  int
		slot int
	}
	var hits []hit
	for si, s := range slots {
		if n := strings.Count(sent, s.sentinel); n != 1 {
			return "", nil, fmt.Errorf("%w: message %d content renders %d times", ErrUnstableSpans, s.msg, n)
		}
		hits = append(hits, hit{strings.Index(sent, s.sentinel), si})
	}
	sort.Slice(hits, func(a, b int) bool { return hits[a].pos < hits[b].pos })
	var segs []string
	prev := 0
	for _, h := range hits {
		segs = append(segs, sent[prev:h.pos])
		prev = h.pos + len(slots[h.slot].sentinel)
	}
	segs = append(segs, sent[prev:])
	if !strings.HasPrefix(real, segs[0]) {
		return "", nil, fmt.Errorf("%w: template output depends on assistant content", ErrUnstableSpans)
	}
	pos := len(segs[0])
	spans := make([]Span, 0, len(hits))
	for k, h := range hits {
		c := slots[h.slot].content
		next := segs[k+1]
		matched := false
		for _, v := range []string{c, pyStrip(c), pyLStrip(c), pyRStrip(c)} {
			if strings.HasPrefix(real[pos:], v+next) && (k+1 < len(hits) || len(real) == pos+len(v)+len(next)) {
				spans = append(spans, Span{Message: slots[h.slot].msg, Start: pos, End: pos + len(v)})
				pos += len(v) + len(next)
				matched = true
				break
			}
		}
		if !matched {
			return "", nil, fmt.Errorf("%w: message %d content is transformed by the template", ErrUnstableSpans, slots[h.slot].msg)
		}
	}
	return real, spans, nil
}

// ---------------------------------------------------------------- loading

// Load reads the chat template of the Hugging Face model folder modelDir:
// chat_template.jinja (newer layout) or tokenizer_config.json's chat_template
// (a string or a list of {name, template}), plus additional_chat_templates/*.jinja
// and, failing those, chat_template.json. Special tokens come from
// tokenizer_config.json (string or AddedToken form), falling back to
// special_tokens_map.json.
func Load(modelDir string) (*Template, error) {
	specials := map[string]any{}
	templates := map[string]string{}
	var order []string
	addT := func(name, src string) {
		if _, ok := templates[name]; !ok {
			order = append(order, name)
		}
		templates[name] = src
	}

	readSpecials := func(m map[string]json.RawMessage) {
		for _, k := range []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"} {
			if _, done := specials[k]; done {
				continue
			}
			if s, ok := tokenString(m[k]); ok {
				specials[k] = s
			}
		}
		if _, done := specials["additional_special_tokens"]; !done {
			var list []json.RawMessage
			if raw, ok := m["additional_special_tokens"]; ok && json.Unmarshal(raw, &list) == nil && len(list) > 0 {
				var out []any
				for _, r := range list {
					if s, ok := tokenString(r); ok {
						out = append(out, s)
					}
				}
				specials["additional_special_tokens"] = out
			}
		}
	}

	cfgPath := filepath.Join(modelDir, "tokenizer_config.json")
	if b, err := os.ReadFile(cfgPath); err == nil {
		var cfg map[string]json.RawMessage
		if err := json.Unmarshal(b, &cfg); err != nil {
			return nil, fmt.Errorf("chattmpl: %s: %w", cfgPath, err)
		}
		readSpecials(cfg)
		if raw, ok := cfg["chat_template"]; ok && string(raw) != "null" {
			var s string
			var list []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			switch {
			case json.Unmarshal(raw, &s) == nil:
				addT("default", s)
			case json.Unmarshal(raw, &list) == nil:
				for _, e := range list {
					addT(e.Name, e.Template)
				}
			default:
				return nil, fmt.Errorf("chattmpl: %s: chat_template is neither a string nor a list of {name, template}", cfgPath)
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("chattmpl: %w", err)
	}
	if b, err := os.ReadFile(filepath.Join(modelDir, "special_tokens_map.json")); err == nil {
		var m map[string]json.RawMessage
		if json.Unmarshal(b, &m) == nil {
			readSpecials(m)
		}
	}
	if b, err := os.ReadFile(filepath.Join(modelDir, "chat_template.jinja")); err == nil {
		addT("default", string(b))
	}
	if ents, err := os.ReadDir(filepath.Join(modelDir, "additional_chat_templates")); err == nil {
		for _, e := range ents {
			if name, ok := strings.CutSuffix(e.Name(), ".jinja"); ok && !e.IsDir() {
				b, err := os.ReadFile(filepath.Join(modelDir, "additional_chat_templates", e.Name()))
				if err != nil {
					return nil, fmt.Errorf("chattmpl: %w", err)
				}
				addT(name, string(b))
			}
		}
	}
	if len(templates) == 0 {
		if b, err := os.ReadFile(filepath.Join(modelDir, "chat_template.json")); err == nil {
			var ct struct {
				ChatTemplate string `json:"chat_template"`
			}
			if json.Unmarshal(b, &ct) == nil && ct.ChatTemplate != "" {
				addT("default", ct.ChatTemplate)
			}
		}
	}
	if len(templates) == 0 {
		return nil, fmt.Errorf("%w (folder %s: no chat_template in tokenizer_config.json and no chat_template.jinja)", ErrNoChatTemplate, modelDir)
	}
	bos, _ := specials["bos_token"].(string)
	eos, _ := specials["eos_token"].(string)
	var root *Template
	if len(templates) == 1 && order[0] == "default" {
		t, err := parseNamed("default", templates["default"])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", modelDir, err)
		}
		root = t
	} else {
		root = &Template{name: "", variants: map[string]*Template{}}
		for _, name := range order {
			t, err := parseNamed(name, templates[name])
			if err != nil {
				return nil, fmt.Errorf("%s (template %q): %w", modelDir, name, err)
			}
			root.variants[name] = t
		}
		if d, ok := root.variants["default"]; ok {
			root.name, root.source, root.nodes = "default", d.source, d.nodes
		}
	}
	root.setTokens(bos, eos, specials)
	return root, nil
}

// tokenString reads a special token given as a string or as an AddedToken
// object ({"content": "...", ...}).
func tokenString(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Content != nil {
		return *obj.Content, true
	}
	return "", false
}
