package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"flywheel/internal/auth"
	"flywheel/internal/httpx"
	"flywheel/internal/infer"
	"flywheel/internal/rl"
	"flywheel/internal/trace"
)

// chatPlan is a validated chat completion request: what the rest of the
// request's path reads instead of the request itself, which parsing leaves
// as it was decoded.
type chatPlan struct {
	samplePlan
	model         string
	messages      []ChatMessage // the request's, "developer" read as "system"
	kwargs        json.RawMessage
	addGen        bool
	continueFinal bool
	tools         []Tool
	toolsRaw      json.RawMessage
	toolChoice    string // "none", "auto", "required", "function"
	forcedName    string
}

var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_.:-]{1,64}$`)

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

func unsupported(param, format string, args ...any) error {
	return httpx.Invalid(param, "unsupported_value", format, args...)
}

// parseChat validates a request (body is its raw JSON, whose tools array
// is kept as written). Every value the server cannot honour is an error
// that names it. Each part of the plan is filled by one function below;
// req is not modified.
func parseChat(req *ChatRequest, body []byte, opts *Options) (*chatPlan, error) {
	if strings.TrimSpace(req.Model) == "" {
		return nil, httpx.Invalid("model", "missing_field", "model is required")
	}
	if len(req.Messages) == 0 {
		return nil, httpx.Invalid("messages", "missing_field", "messages must be a non-empty array")
	}
	if err := checkFieldLimits(req); err != nil {
		return nil, err
	}
	pl := &chatPlan{model: req.Model, kwargs: req.ChatTemplateKwargs}
	var err error
	if pl.messages, err = chatMessages(req.Messages); err != nil {
		return nil, err
	}
	sp, err := chatSampling(req, opts)
	if err != nil {
		return nil, err
	}
	pl.samplePlan = *sp
	if pl.addGen, pl.continueFinal, err = templateOptions(req); err != nil {
		return nil, err
	}
	names, err := checkTools(req.Tools)
	if err != nil {
		return nil, err
	}
	pl.tools = req.Tools
	if len(req.Tools) > 0 {
		var x struct {
			Tools json.RawMessage `json:"tools"`
		}
		_ = json.Unmarshal(body, &x)
		pl.toolsRaw = x.Tools
	}
	if pl.toolChoice, pl.forcedName, err = toolChoice(req.ToolChoice, names); err != nil {
		return nil, err
	}
	if forced, _ := pl.forcedFunctions(); forced != nil {
		pl.format = nil // a forced tool call takes precedence over response_format
	}
	if pl.promptLogprobs >= 0 && pl.stream {
		return nil, unsupported("prompt_logprobs", "prompt_logprobs is not supported with stream on chat completions (it is on /v1/completions)")
	}
	return pl, nil
}

// chatMessages checks the messages' roles and contents and returns them as
// the template reads them: "developer" (OpenAI's newer name) as "system".
// The request's slice is returned when no role changes, else a copy.
func chatMessages(msgs []ChatMessage) ([]ChatMessage, error) {
	out, copied := msgs, false
	for i, m := range msgs {
		switch m.Role {
		case "system", "user", "assistant", "tool":
		case "developer":
			if !copied {
				out, copied = slices.Clone(msgs), true
			}
			out[i].Role = "system"
		case "":
			return nil, httpx.Invalid(fmt.Sprintf("messages[%d].role", i), "missing_field", "messages[%d].role is required", i)
		default:
			return nil, unsupported(fmt.Sprintf("messages[%d].role", i), "messages[%d].role %q is not supported (system, developer, user, assistant, tool)", i, m.Role)
		}
		if _, err := messageText(m.Content, fmt.Sprintf("messages[%d].content", i)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// chatSampling validates the sampling fields: the shared ones
// (parseSampling; max_completion_tokens, when given, in place of
// max_tokens) and chat's logprobs and top_logprobs.
func chatSampling(req *ChatRequest, opts *Options) (*samplePlan, error) {
	sr := req.SamplingRequest
	maxParam := "max_completion_tokens"
	if req.MaxCompletionTokens != nil {
		sr.MaxTokens = req.MaxCompletionTokens
	} else if req.MaxTokens != nil {
		maxParam = "max_tokens"
	}
	pl, err := parseSampling(&sr, opts, maxParam)
	if err != nil {
		return nil, err
	}
	if req.Logprobs != nil {
		pl.logprobs = *req.Logprobs
	}
	if req.TopLogprobs != nil {
		if *req.TopLogprobs < 0 || *req.TopLogprobs > opts.MaxTopLogprobs {
			return nil, unsupported("top_logprobs", "top_logprobs must be between 0 and %d, got %d", opts.MaxTopLogprobs, *req.TopLogprobs)
		}
		if *req.TopLogprobs > 0 && !pl.logprobs {
			return nil, httpx.Invalid("top_logprobs", "invalid_value", "top_logprobs requires logprobs to be true")
		}
		pl.topLogprobs = *req.TopLogprobs
	}
	return pl, nil
}

// templateOptions validates the vLLM template fields: chat_template_kwargs
// (an object), and whether the prompt ends with a generation prompt
// (add_generation_prompt, default true) or continues the final message.
func templateOptions(req *ChatRequest) (addGen, continueFinal bool, err error) {
	if !isNull(req.ChatTemplateKwargs) {
		if t := bytes.TrimSpace(req.ChatTemplateKwargs); t[0] != '{' {
			return false, false, httpx.Invalid("chat_template_kwargs", "invalid_type", "chat_template_kwargs: expected an object")
		}
	}
	if req.ContinueFinalMessage != nil && *req.ContinueFinalMessage {
		if req.AddGenerationPrompt != nil && *req.AddGenerationPrompt {
			return false, false, httpx.Invalid("continue_final_message", "invalid_value", "continue_final_message and add_generation_prompt cannot both be true")
		}
		return false, true, nil
	}
	if req.AddGenerationPrompt != nil {
		return *req.AddGenerationPrompt, false, nil
	}
	return true, false, nil
}

// checkTools validates the tool definitions (a strict function's schema is
// compiled, so that one the server cannot enforce is refused up front, as
// OpenAI does) and returns their names.
func checkTools(tools []Tool) (map[string]bool, error) {
	names := map[string]bool{}
	for i, t := range tools {
		if t.Type != "function" {
			return nil, unsupported(fmt.Sprintf("tools[%d].type", i), "tools[%d].type %q is not supported (only \"function\")", i, t.Type)
		}
		if !toolNameRE.MatchString(t.Function.Name) {
			return nil, httpx.Invalid(fmt.Sprintf("tools[%d].function.name", i), "invalid_value", "tools[%d].function.name must be 1-64 letters, digits, '_' or '-'", i)
		}
		if !isNull(t.Function.Parameters) && bytes.TrimSpace(t.Function.Parameters)[0] != '{' {
			return nil, httpx.Invalid(fmt.Sprintf("tools[%d].function.parameters", i), "invalid_type", "tools[%d].function.parameters: expected a JSON schema object", i)
		}
		if t.Function.Strict != nil && *t.Function.Strict {
			if _, err := compileSchema(t.Function.Parameters, true, fmt.Sprintf("tools[%d].function.parameters", i)); err != nil {
				return nil, schemaHTTPError(err)
			}
		}
		names[t.Function.Name] = true
	}
	return names, nil
}

// toolChoice validates tool_choice against the tools' names: "none" (the
// default without tools), "auto" (the default with), "required", or a named
// function ("function" and its name).
func toolChoice(raw json.RawMessage, names map[string]bool) (choice, forced string, err error) {
	choice = "none"
	if len(names) > 0 {
		choice = "auto"
	}
	if isNull(raw) {
		return choice, "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "none", "auto", "required":
		default:
			return "", "", unsupported("tool_choice", "tool_choice %q is not supported (none, auto, required, or a named function)", s)
		}
		choice = s
	} else {
		var named struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := json.Unmarshal(raw, &named); err != nil || named.Type != "function" || named.Function.Name == "" {
			return "", "", httpx.Invalid("tool_choice", "invalid_value", `tool_choice: expected "none", "auto", "required" or {"type": "function", "function": {"name": ...}}`)
		}
		if !names[named.Function.Name] {
			return "", "", httpx.Invalid("tool_choice.function.name", "invalid_value", "tool_choice names function %q, which is not among the tools", named.Function.Name)
		}
		choice, forced = "function", named.Function.Name
	}
	if choice != "none" && len(names) == 0 {
		return "", "", httpx.Invalid("tool_choice", "invalid_value", "tool_choice %q requires tools", choice)
	}
	return choice, forced, nil
}

// forcedFunctions returns the functions a forced tool choice allows and
// their indices among the tools, nil when the choice is not forced.
func (pl *chatPlan) forcedFunctions() ([]ToolFunction, []int) {
	var fns []ToolFunction
	var index []int
	for i, t := range pl.tools {
		if pl.toolChoice == "required" || pl.toolChoice == "function" && t.Function.Name == pl.forcedName {
			fns, index = append(fns, t.Function), append(index, i)
		}
	}
	return fns, index
}

func (pl *chatPlan) parseTools() bool { return len(pl.tools) > 0 && pl.toolChoice != "none" }

// prepared is a request ready for the scheduler, and once submitted its
// generation.
type prepared struct {
	plan   *chatPlan
	target Target
	lm     *servedModel
	ctx    context.Context // the request's; cancelling it ends the generation
	req    infer.Request
	gen    *infer.Generation
	// promptLPs collects the prompt's prompt_logprobs, when asked for.
	promptLPs *promptLPs
}

func (s *Server) prepareChat(ctx context.Context, p *auth.Principal, req *ChatRequest, body []byte) (*prepared, error) {
	pl, err := parseChat(req, body, &s.opts)
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
	if err := lm.checkPromptBytes("messages", "the messages, tools and chat_template_kwargs are", promptBytes(pl.messages, pl.toolsRaw, pl.kwargs)); err != nil {
		return nil, err
	}
	text, err := lm.render(chatInput{ctx: ctx, messages: pl.messages, tools: pl.toolsRaw, addGenerationPrompt: pl.addGen,
		continueFinalMessage: pl.continueFinal, kwargs: pl.kwargs})
	if err != nil {
		return nil, err
	}
	prompt := lm.tok.Encode(text, false)
	if len(prompt) == 0 {
		return nil, httpx.Invalid("messages", "invalid_value", "the rendered prompt is empty")
	}
	ir, err := s.inferRequest(ctx, p, &pl.samplePlan, target, lm, prompt, "messages", 0)
	if err != nil {
		return nil, err
	}
	if forced, _ := pl.forcedFunctions(); forced != nil {
		if ir.NewConstraint, err = forcedToolConstraint(lm, pl, ir.MaxTokens); err != nil {
			return nil, err
		}
	}
	pr := &prepared{plan: pl, target: target, lm: lm, ctx: ctx, req: ir}
	if k := pl.promptLogprobs; k >= 0 {
		pr.promptLPs = newPromptLPs(lm, prompt, k)
		pr.req.PromptLogits = pr.promptLPs.add
	}
	return pr, nil
}

// handleChat is POST /v1/chat/completions.
func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) error {
	started := time.Now()
	var req ChatRequest
	p, body, err := readRequest(r, &req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	pr, err := s.prepareChat(ctx, p, &req, body)
	if err != nil {
		return err
	}
	pr.gen, err = pr.lm.sched.Submit(ctx, pr.req)
	if err != nil {
		return s.submitError(w, err, pr.lm, pr.target)
	}
	id := randomID("chatcmpl-", 24)
	created := started.Unix()
	if pr.plan.stream {
		s.streamChat(w, r, pr, p, id, created, started, body)
		return nil
	}
	// Wait for every choice; a client that went away (even as the last
	// choice ended) gets nothing.
	if pr.gen.Wait(ctx) != nil || ctx.Err() != nil {
		s.record(pr, p, started, body, nil, "client disconnected")
		return nil
	}
	resp, err := s.buildResponse(pr, id, created)
	return s.answer(w, pr.target, resp, err, func(exception string) string {
		if exception != "" {
			return s.record(pr, p, started, body, nil, exception)
		}
		return s.record(pr, p, started, body, resp, "")
	})
}

// answer writes a finished non-streamed response, recorded first (its call
// id in the header x-call-id), or, when building it failed, returns a 500
// recorded as "generation failed".
func (s *Server) answer(w http.ResponseWriter, target Target, resp any, err error, record func(exception string) string) error {
	if err != nil {
		s.log.Error("serve: generation failed", "model", target.Name, "err", err)
		record("generation failed")
		return &httpx.Error{Status: http.StatusInternalServerError, Message: "generation failed", Code: "generation_failed"}
	}
	if callID := record(""); callID != "" {
		w.Header().Set("x-call-id", callID)
	}
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// buildResponse assembles the finished choices.
func (s *Server) buildResponse(pr *prepared, id string, created int64) (*ChatCompletion, error) {
	resp := &ChatCompletion{ID: id, Object: "chat.completion", Created: created, Model: pr.plan.model,
		SystemFingerprint: pr.target.fingerprint(), Choices: make([]Choice, pr.gen.N())}
	usage := &Usage{PromptTokens: len(pr.req.Prompt)}
	for i := range resp.Choices {
		ev := pr.gen.Result(i)
		if ev.Err != nil {
			return nil, ev.Err
		}
		toks, text, finish := ev.Tokens, ev.Text, ev.Finish
		usage.CompletionTokens += len(toks)
		ch := Choice{Index: i, Message: ResponseMessage{Role: "assistant"}, FinishReason: finish}
		content := &text
		if pr.plan.parseTools() {
			c, calls := parseToolCalls(text, pr.lm.format)
			if len(calls) > 0 {
				content = c
				ch.Message.ToolCalls = calls
				ch.FinishReason = infer.FinishReason(finish, true)
			}
		}
		ch.Message.Content = content
		if pr.plan.logprobs {
			ch.Logprobs = &ChoiceLogprobs{Content: s.logprobEntries(pr, toks), Refusal: nil}
		}
		resp.Choices[i] = ch
	}
	usage.TotalTokens = usage.PromptTokens + usage.CompletionTokens
	resp.Usage = usage
	resp.PromptLogprobs = pr.promptLPs.get()
	return resp, nil
}

func clampLP(lp float32) float64 {
	if math.IsInf(float64(lp), -1) || math.IsNaN(float64(lp)) || lp < -9999 {
		return -9999
	}
	return float64(lp)
}

func (s *Server) logprobEntries(pr *prepared, toks []infer.Token) []TokenLogprob {
	out := make([]TokenLogprob, len(toks))
	lm, asIDs := pr.lm, pr.plan.asIDs
	for j, t := range toks {
		e := TokenLogprob{Token: lm.tokenString(t.ID, asIDs), Logprob: clampLP(t.Logprob), Bytes: lm.tokenBytesInts(t.ID), TopLogprobs: []TopLogprob{}}
		for _, alt := range t.Top {
			e.TopLogprobs = append(e.TopLogprobs, TopLogprob{Token: lm.tokenString(alt.ID, asIDs), Logprob: clampLP(alt.Logprob), Bytes: lm.tokenBytesInts(alt.ID)})
		}
		out[j] = e
	}
	return out
}

// record stores the chat completion in the call store and returns its id
// ("" when not recorded). Failures are logged, never returned.
func (s *Server) record(pr *prepared, p *auth.Principal, started time.Time, body []byte, resp *ChatCompletion, exception string) string {
	u := Usage{PromptTokens: len(pr.req.Prompt)}
	var output any
	var fps []string
	if resp != nil {
		output = resp
		if resp.Usage != nil {
			u = *resp.Usage
		}
		if pr.plan.logprobs {
			fps = choiceFingerprints(resp)
		}
	} else {
		u.CompletionTokens = pr.gen.TokenCount()
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
	}
	return s.recordCall(pr.ctx, p, pr.target, pr.plan.model, s.opts.OpName, started, body, output, u, fps, exception)
}

// recordCall stores a call (inputs = the request body, output = the
// response, nil when there is none) in the target's project and returns its
// id ("" when not recorded); fps are the choices' fingerprints to link
// (rl.ChoiceFingerprint), nil for none. Failures are logged, never
// returned.
func (s *Server) recordCall(reqCtx context.Context, p *auth.Principal, target Target, model, op string, started time.Time, body []byte, resp any, u Usage, fps []string, exception string) string {
	if s.recorder == nil {
		return ""
	}
	project := p.PersonalEntity + "/inference"
	if target.Entity != "" {
		project = target.Entity + "/" + target.Project
	}
	var output json.RawMessage = json.RawMessage("null")
	if resp != nil {
		if b, err := json.Marshal(resp); err == nil {
			output = b
		}
	}
	summary, _ := json.Marshal(map[string]any{"usage": map[string]any{model: map[string]int{
		"requests": 1, "prompt_tokens": u.PromptTokens, "completion_tokens": u.CompletionTokens, "total_tokens": u.TotalTokens,
	}}})
	inputs := json.RawMessage(body)
	if !json.Valid(inputs) {
		inputs = json.RawMessage("null")
	}
	inputs = boundRecord(inputs, s.opts.MaxRecordBytes, map[string]any{"model": model})
	output = boundRecord(output, s.opts.MaxRecordBytes, map[string]any{"usage": u})
	ctx, cancel := context.WithTimeout(context.WithoutCancel(reqCtx), 5*time.Second)
	defer cancel()
	id, err := s.recorder.RecordCall(ctx, p, project, op, started, time.Now(), inputs, output, summary, exception)
	if err != nil {
		s.log.Warn("serve: record call failed", "project", project, "err", err)
		return ""
	}
	if l, ok := s.recorder.(trace.ChoiceLinker); ok && fps != nil {
		if err := l.LinkChoices(ctx, project, id, fps); err != nil {
			s.log.Warn("serve: link choices to their call failed", "project", project, "err", err)
		}
	}
	return id
}

// choiceFingerprints returns rl.ChoiceFingerprint of each choice's sampled
// tokens, by choice index.
func choiceFingerprints(resp *ChatCompletion) []string {
	out := make([]string, len(resp.Choices))
	for i, ch := range resp.Choices {
		if ch.Logprobs == nil {
			continue
		}
		c := ch.Logprobs.Content
		out[i] = rl.ChoiceFingerprint(len(c), func(j int) (string, float64) { return c[j].Token, c[j].Logprob })
	}
	return out
}
