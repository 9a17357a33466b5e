package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"flywheel/internal/auth"
	"flywheel/internal/httpx"
	"flywheel/internal/infer"
	"flywheel/internal/store"
)

// The Responses API (POST /v1/responses, the default of OpenAI's Agents SDK)
// runs on the chat-completions path: instructions become a system message,
// input items become chat messages (function calls and their outputs
// included), function tools and text.format become chat's tools and
// response_format, and the chat completion's one choice becomes output
// items. A stored response (store, default true) is kept in the database
// (Options.Responses: every node of a shared database and a restarted one
// continue it) with the conversation it ends, so that previous_response_id
// continues it and GET/DELETE /v1/responses/{id} reach it; per user, the
// newest Options.MaxStoredResponses for ResponseRetention, each
// conversation at most Options.MaxStoredResponseBytes (checked before
// generating, so a stored one exceeds it by at most its own output).

const (
	// DefaultMaxStoredResponses is Options.MaxStoredResponses's default.
	DefaultMaxStoredResponses = 10000
	// ResponseRetention is how long a stored response can be continued.
	ResponseRetention = 24 * time.Hour
	// DefaultMaxStoredResponseBytes is Options.MaxStoredResponseBytes's
	// default.
	DefaultMaxStoredResponseBytes = 8 << 20
	responsesOp                   = "responses"
)

// ResponseRequest is the body of POST /v1/responses.
type ResponseRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	Tools              []ResponseTool  `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Text               *struct {
		Format json.RawMessage `json:"format"`
	} `json:"text"`
	Temperature       *float64        `json:"temperature"`
	TopP              *float64        `json:"top_p"`
	MaxOutputTokens   *int            `json:"max_output_tokens"`
	Stream            *bool           `json:"stream"`
	Store             *bool           `json:"store"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
	Background        *bool           `json:"background"`
	Conversation      json.RawMessage `json:"conversation"`
	Metadata          json.RawMessage `json:"metadata"`
	User              json.RawMessage `json:"user"`
	// Accepted and ignored: reasoning (no reasoning model), include,
	// truncation, service_tier, prompt_cache_key, safety_identifier.
}

// ResponseTool is a Responses-API tool; only function tools exist here.
type ResponseTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// Response is a Responses-API response object.
type Response struct {
	ID                 string           `json:"id"`
	Object             string           `json:"object"`
	CreatedAt          int64            `json:"created_at"`
	Status             string           `json:"status"`
	Error              any              `json:"error"`
	IncompleteDetails  *incomplete      `json:"incomplete_details"`
	Instructions       *string          `json:"instructions"`
	MaxOutputTokens    *int             `json:"max_output_tokens"`
	Model              string           `json:"model"`
	Output             []map[string]any `json:"output"`
	ParallelToolCalls  bool             `json:"parallel_tool_calls"`
	PreviousResponseID *string          `json:"previous_response_id"`
	Reasoning          map[string]any   `json:"reasoning"`
	Store              bool             `json:"store"`
	Temperature        *float64         `json:"temperature"`
	Text               map[string]any   `json:"text"`
	ToolChoice         any              `json:"tool_choice"`
	Tools              []ResponseTool   `json:"tools"`
	TopP               *float64         `json:"top_p"`
	Truncation         string           `json:"truncation"`
	Usage              *responseUsage   `json:"usage"`
	Metadata           json.RawMessage  `json:"metadata"`
	User               json.RawMessage  `json:"user"`
}

type incomplete struct {
	Reason string `json:"reason"`
}

type responseUsage struct {
	InputTokens         int            `json:"input_tokens"`
	InputTokensDetails  map[string]int `json:"input_tokens_details"`
	OutputTokens        int            `json:"output_tokens"`
	OutputTokensDetails map[string]int `json:"output_tokens_details"`
	TotalTokens         int            `json:"total_tokens"`
}

// previousHistory returns the conversation user's stored response id
// ends: 404 naming previous_response_id when it is missing, expired or
// another user's.
func (s *Server) previousHistory(ctx context.Context, user, id string) ([]ChatMessage, error) {
	if s.opts.Responses == nil {
		return nil, unsupported("previous_response_id", "this server keeps no stored responses")
	}
	sr, err := s.opts.Responses.ResponseByID(ctx, user, id, ResponseRetention)
	if errors.Is(err, store.ErrNotFound) {
		return nil, &httpx.Error{Status: http.StatusNotFound, Param: "previous_response_id", Code: "previous_response_not_found",
			Message: fmt.Sprintf("Previous response with id '%s' not found.", truncate(id, 64))}
	}
	if err != nil {
		return nil, err
	}
	var history []ChatMessage
	if err := json.Unmarshal(sr.History, &history); err != nil {
		return nil, fmt.Errorf("stored response %s: %w", id, err)
	}
	return history, nil
}

// storeResponse keeps resp and the conversation it ends for
// previous_response_id and GET /v1/responses/{id}; on failure the response
// is answered unstored (store: false), saying so in the log.
func (s *Server) storeResponse(ctx context.Context, user string, resp *Response, history []ChatMessage) {
	if s.opts.Responses == nil {
		resp.Store = false
		return
	}
	sr := store.StoredResponse{ID: resp.ID, UserID: user, Response: mustJSON(resp), History: mustJSON(history)}
	if err := s.opts.Responses.PutResponse(context.WithoutCancel(ctx), sr, s.opts.MaxStoredResponses, ResponseRetention); err != nil {
		s.log.Warn("storing a response failed; answered unstored", "id", resp.ID, "err", err)
		resp.Store = false
	}
}

// handleGetResponse is GET /v1/responses/{id}: the user's stored response
// as it was answered.
func (s *Server) handleGetResponse(w http.ResponseWriter, r *http.Request) error {
	var sr store.StoredResponse
	if err := s.onStoredResponse(r, func(ctx context.Context, rs store.Responses, user, id string) (err error) {
		sr, err = rs.ResponseByID(ctx, user, id, ResponseRetention)
		return err
	}); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(sr.Response)
	return nil
}

// handleDeleteResponse is DELETE /v1/responses/{id}.
func (s *Server) handleDeleteResponse(w http.ResponseWriter, r *http.Request) error {
	if err := s.onStoredResponse(r, func(ctx context.Context, rs store.Responses, user, id string) error {
		return rs.DeleteResponse(ctx, user, id)
	}); err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Deleted bool   `json:"deleted"`
	}{r.PathValue("id"), "response", true})
	return nil
}

// onStoredResponse runs op on the path's response id for the request's
// user; a missing, expired or another user's response is OpenAI's 404.
func (s *Server) onStoredResponse(r *http.Request, op func(ctx context.Context, rs store.Responses, user, id string) error) error {
	id := r.PathValue("id")
	p, err := httpx.Principal(r)
	if err != nil {
		return err
	}
	if s.opts.Responses == nil {
		return responseNotFound(id)
	}
	err = op(r.Context(), s.opts.Responses, p.UserID, id)
	if errors.Is(err, store.ErrNotFound) {
		return responseNotFound(id)
	}
	return err
}

// responseNotFound is OpenAI's 404 for a response id.
func responseNotFound(id string) error {
	return &httpx.Error{Status: http.StatusNotFound, Code: "not_found",
		Message: fmt.Sprintf("Response with id '%s' not found.", truncate(id, 64))}
}

// responseInput converts input (a string or a list of items) to chat
// messages.
func responseInput(raw json.RawMessage) ([]ChatMessage, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return nil, httpx.Invalid("input", "missing_field", "input is required")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return []ChatMessage{{Role: "user", Content: mustJSON(text)}}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, httpx.Invalid("input", "invalid_type", "input: expected a string or an array of items")
	}
	var msgs []ChatMessage
	for i, it := range items {
		var item struct {
			Type      string          `json:"type"`
			Role      string          `json:"role"`
			Content   json.RawMessage `json:"content"`
			CallID    string          `json:"call_id"`
			Name      string          `json:"name"`
			Arguments string          `json:"arguments"`
			Output    json.RawMessage `json:"output"`
		}
		param := fmt.Sprintf("input[%d]", i)
		if err := json.Unmarshal(it, &item); err != nil {
			return nil, httpx.Invalid(param, "invalid_type", "%s: expected an object", param)
		}
		switch item.Type {
		case "", "message":
			content, err := responseContent(item.Content, param+".content")
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, ChatMessage{Role: item.Role, Content: content})
		case "function_call":
			tc := ToolCall{ID: item.CallID, Type: "function", Function: ToolCallFunction{Name: item.Name, Arguments: item.Arguments}}
			if n := len(msgs); n > 0 && msgs[n-1].Role == "assistant" && len(msgs[n-1].ToolCalls) > 0 {
				msgs[n-1].ToolCalls = append(msgs[n-1].ToolCalls, tc) // parallel calls: one assistant turn
			} else {
				msgs = append(msgs, ChatMessage{Role: "assistant", Content: json.RawMessage("null"), ToolCalls: []ToolCall{tc}})
			}
		case "function_call_output":
			var out string
			if json.Unmarshal(item.Output, &out) != nil {
				out = string(item.Output)
			}
			msgs = append(msgs, ChatMessage{Role: "tool", ToolCallID: item.CallID, Content: mustJSON(out)})
		case "reasoning":
			// no reasoning model: reasoning items carry nothing to render
		default:
			return nil, unsupported(param+".type", "input item type %q is not supported (message, function_call, function_call_output, reasoning)", item.Type)
		}
	}
	return msgs, nil
}

// responseContent converts a message's content (a string or input_text /
// output_text parts) to chat content.
func responseContent(raw json.RawMessage, param string) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '[' {
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(raw, &parts); err != nil {
			return nil, httpx.Invalid(param, "invalid_type", "%s: expected a string or a list of content parts", param)
		}
		var out []map[string]string
		for j, p := range parts {
			switch p.Type {
			case "input_text", "output_text", "text":
				out = append(out, map[string]string{"type": "text", "text": p.Text})
			default:
				return nil, unsupported(fmt.Sprintf("%s[%d].type", param, j), "content part type %q is not supported (input_text, output_text)", p.Type)
			}
		}
		return mustJSON(out), nil
	}
	return raw, nil
}

func mustJSON(v any) json.RawMessage {
	var b bytes.Buffer
	writeJSON(&b, v)
	return b.Bytes()
}

// chatFromResponse builds the chat request a responses request runs as,
// and the conversation it continues with.
func (s *Server) chatFromResponse(ctx context.Context, p *auth.Principal, req *ResponseRequest) (*ChatRequest, []byte, []ChatMessage, error) {
	if req.Background != nil && *req.Background {
		return nil, nil, nil, unsupported("background", "background responses are not supported")
	}
	if !isNull(req.Conversation) {
		return nil, nil, nil, unsupported("conversation", "conversations are not supported; use previous_response_id")
	}
	var history []ChatMessage
	if req.PreviousResponseID != nil && *req.PreviousResponseID != "" {
		prev, err := s.previousHistory(ctx, p.UserID, *req.PreviousResponseID)
		if err != nil {
			return nil, nil, nil, err
		}
		history = prev
	}
	input, err := responseInput(req.Input)
	if err != nil {
		return nil, nil, nil, err
	}
	history = append(history, input...)
	if n := len(mustJSON(history)); n > s.opts.MaxStoredResponseBytes {
		return nil, nil, nil, &httpx.Error{Status: http.StatusRequestEntityTooLarge, Param: "input", Code: "conversation_too_large",
			Message: fmt.Sprintf("input: the conversation (previous_response_id's and this input) is %d bytes, over the limit of %d", n, s.opts.MaxStoredResponseBytes)}
	}
	cr := &ChatRequest{Messages: history}
	if req.Instructions != nil && *req.Instructions != "" {
		cr.Messages = append([]ChatMessage{{Role: "system", Content: mustJSON(*req.Instructions)}}, history...)
	}
	cr.Model, cr.Temperature, cr.TopP, cr.MaxTokens, cr.User, cr.Metadata = req.Model, req.Temperature, req.TopP, req.MaxOutputTokens, req.User, req.Metadata
	cr.ParallelToolCalls = req.ParallelToolCalls
	if req.MaxOutputTokens != nil {
		cr.MaxCompletionTokens = req.MaxOutputTokens
	}
	for i, t := range req.Tools {
		if t.Type != "function" {
			return nil, nil, nil, unsupported(fmt.Sprintf("tools[%d].type", i), "tools[%d].type %q is not supported (only \"function\")", i, t.Type)
		}
		cr.Tools = append(cr.Tools, Tool{Type: "function", Function: ToolFunction{Name: t.Name, Description: t.Description, Parameters: t.Parameters, Strict: t.Strict}})
	}
	if !isNull(req.ToolChoice) {
		var named struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}
		if json.Unmarshal(req.ToolChoice, &named) == nil && named.Type == "function" {
			cr.ToolChoice = mustJSON(map[string]any{"type": "function", "function": map[string]string{"name": named.Name}})
		} else {
			cr.ToolChoice = req.ToolChoice
		}
	}
	if req.Text != nil && !isNull(req.Text.Format) {
		var f struct {
			Type   string          `json:"type"`
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		}
		if err := json.Unmarshal(req.Text.Format, &f); err != nil {
			return nil, nil, nil, httpx.Invalid("text.format", "invalid_type", "text.format: expected an object")
		}
		rf := map[string]any{"type": f.Type}
		if f.Type == "json_schema" {
			rf["json_schema"] = map[string]any{"name": f.Name, "schema": f.Schema, "strict": f.Strict}
		}
		cr.ResponseFormat = mustJSON(rf)
	}
	// parseChat reads the tools' raw JSON from the body it is given
	body := mustJSON(map[string]any{"tools": cr.Tools})
	return cr, body, history, nil
}

// handleResponses is POST /v1/responses.
func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) error {
	started := time.Now()
	var req ResponseRequest
	p, body, err := readRequest(r, &req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	cr, chatBody, history, err := s.chatFromResponse(ctx, p, &req)
	if err != nil {
		return err
	}
	pr, err := s.prepareChat(ctx, p, cr, chatBody)
	if err != nil {
		return responsesParam(err)
	}
	pr.gen, err = pr.lm.sched.Submit(ctx, pr.req)
	if err != nil {
		return s.submitError(w, err, pr.lm, pr.target)
	}
	id := randomID("resp_", 24)
	stream := req.Stream != nil && *req.Stream
	var sw *sseWriter
	seq := 0
	emit := func(typ string, v map[string]any) {
		v["type"], v["sequence_number"] = typ, seq
		seq++
		sw.buf.WriteString("event: " + typ + "\n")
		sw.event(v)
	}
	resp := s.responseObject(&req, id, started, pr)
	if stream {
		sw = s.startSSE(w)
		resp.Status = "in_progress"
		emit("response.created", map[string]any{"response": resp})
		emit("response.in_progress", map[string]any{"response": resp})
		sw.flush()
		s.streamResponseText(ctx, pr, "msg_"+id[len("resp_"):], emit, sw)
	}
	if pr.gen.Wait(ctx) != nil || ctx.Err() != nil {
		s.recordCall(ctx, p, pr.target, req.Model, responsesOp, started, body, nil, Usage{PromptTokens: len(pr.req.Prompt), CompletionTokens: pr.gen.TokenCount()}, nil, "client disconnected")
		return nil
	}
	cc, err := s.buildResponse(pr, id, started.Unix())
	if err != nil {
		if stream {
			emit("response.failed", map[string]any{"response": resp})
			sw.flush()
			s.recordCall(ctx, p, pr.target, req.Model, responsesOp, started, body, nil, Usage{PromptTokens: len(pr.req.Prompt)}, nil, "generation failed")
			return nil
		}
		s.answer(w, pr.target, nil, err, func(exception string) string {
			return s.recordCall(ctx, p, pr.target, req.Model, responsesOp, started, body, nil, Usage{PromptTokens: len(pr.req.Prompt)}, nil, exception)
		})
		return nil
	}
	s.fillResponse(resp, cc, "msg_"+id[len("resp_"):])
	if resp.Store {
		s.storeResponse(ctx, p.UserID, resp, append(history, cc.Choices[0].Message.asChatMessage()))
	}
	record := func(string) string {
		return s.recordCall(ctx, p, pr.target, req.Model, responsesOp, started, body, resp, *cc.Usage, nil, "")
	}
	if !stream {
		s.answer(w, pr.target, resp, nil, record)
		return nil
	}
	for i, item := range resp.Output {
		if item["type"] == "function_call" {
			emit("response.output_item.added", map[string]any{"output_index": i, "item": item})
			emit("response.function_call_arguments.done", map[string]any{"output_index": i, "item_id": item["id"], "arguments": item["arguments"]})
		}
		emit("response.output_item.done", map[string]any{"output_index": i, "item": item})
	}
	emit("response.completed", map[string]any{"response": resp})
	sw.flush()
	if callID := record(""); callID != "" {
		w.Header().Set("x-call-id", callID)
	}
	return nil
}

// streamResponseText streams the output text as response.output_text.delta
// events while it comes; with tools, text is held back until the end (it
// may be a tool call).
func (s *Server) streamResponseText(ctx context.Context, pr *prepared, itemID string, emit func(string, map[string]any), sw *sseWriter) {
	if pr.plan.parseTools() {
		return
	}
	emit("response.output_item.added", map[string]any{"output_index": 0, "item": map[string]any{"type": "message", "id": itemID, "status": "in_progress", "role": "assistant", "content": []any{}}})
	emit("response.content_part.added", map[string]any{"output_index": 0, "item_id": itemID, "content_index": 0, "part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
	sw.flush()
	var text bytes.Buffer
	for {
		ev := pr.gen.Poll(0)
		if ev.Text != "" {
			text.WriteString(ev.Text)
			emit("response.output_text.delta", map[string]any{"output_index": 0, "item_id": itemID, "content_index": 0, "delta": ev.Text})
			sw.flush()
		}
		if ev.Done || sw.err != nil {
			break
		}
		select {
		case <-pr.gen.Changed():
		case <-ctx.Done():
			return
		}
	}
	emit("response.output_text.done", map[string]any{"output_index": 0, "item_id": itemID, "content_index": 0, "text": text.String()})
	emit("response.content_part.done", map[string]any{"output_index": 0, "item_id": itemID, "content_index": 0, "part": map[string]any{"type": "output_text", "text": text.String(), "annotations": []any{}}})
}

// responseObject is the response before its output.
func (s *Server) responseObject(req *ResponseRequest, id string, started time.Time, pr *prepared) *Response {
	tools := req.Tools
	if tools == nil {
		tools = []ResponseTool{}
	}
	var choice any = "auto"
	if !isNull(req.ToolChoice) {
		choice = req.ToolChoice
	}
	format := map[string]any{"type": "text"}
	if req.Text != nil && !isNull(req.Text.Format) {
		var f map[string]any
		_ = json.Unmarshal(req.Text.Format, &f)
		format = f
	}
	metadata := req.Metadata
	if isNull(metadata) {
		metadata = json.RawMessage("{}")
	}
	return &Response{ID: id, Object: "response", CreatedAt: started.Unix(), Status: "completed", Instructions: req.Instructions,
		MaxOutputTokens: req.MaxOutputTokens, Model: req.Model, Output: []map[string]any{}, ParallelToolCalls: req.ParallelToolCalls == nil || *req.ParallelToolCalls,
		PreviousResponseID: req.PreviousResponseID, Reasoning: map[string]any{"effort": nil, "summary": nil}, Store: req.Store == nil || *req.Store,
		Temperature: req.Temperature, Text: map[string]any{"format": format}, ToolChoice: choice, Tools: tools, TopP: req.TopP,
		Truncation: "disabled", Metadata: metadata, User: req.User}
}

// fillResponse sets resp's output, status and usage from the chat
// completion's one choice.
func (s *Server) fillResponse(resp *Response, cc *ChatCompletion, msgID string) {
	ch := cc.Choices[0]
	if ch.Message.Content != nil && (*ch.Message.Content != "" || len(ch.Message.ToolCalls) == 0) {
		resp.Output = append(resp.Output, map[string]any{"type": "message", "id": msgID, "status": "completed", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": *ch.Message.Content, "annotations": []any{}}}})
	}
	for _, tc := range ch.Message.ToolCalls {
		resp.Output = append(resp.Output, map[string]any{"type": "function_call", "id": "fc_" + tc.ID[len("call_"):], "call_id": tc.ID,
			"name": tc.Function.Name, "arguments": tc.Function.Arguments, "status": "completed"})
	}
	resp.Status = "completed"
	if ch.FinishReason == infer.FinishLength {
		resp.Status = "incomplete"
		resp.IncompleteDetails = &incomplete{Reason: "max_output_tokens"}
	}
	u := cc.Usage
	resp.Usage = &responseUsage{InputTokens: u.PromptTokens, InputTokensDetails: map[string]int{"cached_tokens": 0},
		OutputTokens: u.CompletionTokens, OutputTokensDetails: map[string]int{"reasoning_tokens": 0}, TotalTokens: u.TotalTokens}
}

// asChatMessage is the assistant message as the next turn's history.
func (m ResponseMessage) asChatMessage() ChatMessage {
	content := json.RawMessage("null")
	if m.Content != nil && *m.Content != "" {
		content = mustJSON(*m.Content)
	}
	return ChatMessage{Role: "assistant", Content: content, ToolCalls: m.ToolCalls}
}

// responsesParam renames chat's parameter names in an error to the
// Responses API's.
func responsesParam(err error) error {
	var he *httpx.Error
	if !errors.As(err, &he) {
		return err
	}
	rename := map[string]string{"max_completion_tokens": "max_output_tokens", "messages": "input", "response_format": "text.format"}
	if n, ok := rename[he.Param]; ok {
		e := *he
		e.Param = n
		return &e
	}
	if len(he.Param) > len("response_format.json_schema.schema") && he.Param[:len("response_format.json_schema.schema")] == "response_format.json_schema.schema" {
		e := *he
		e.Param = "text.format.schema" + he.Param[len("response_format.json_schema.schema"):]
		return &e
	}
	return err
}
