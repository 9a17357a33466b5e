package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"flywheel/internal/auth"
	"flywheel/internal/httpx"
	"flywheel/internal/infer"
)

// sseWriter writes server-sent events.
type sseWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf bytes.Buffer
	err error
}

func (s *sseWriter) event(v any) {
	if s.err != nil {
		return
	}
	s.buf.WriteString("data: ")
	enc := json.NewEncoder(&s.buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // ends with "\n"
	s.buf.WriteString("\n")
}

func (s *sseWriter) done() {
	s.buf.WriteString("data: [DONE]\n\n")
}

func (s *sseWriter) flush() {
	if s.err != nil || s.buf.Len() == 0 {
		return
	}
	_, s.err = s.w.Write(s.buf.Bytes())
	s.buf.Reset()
	if s.err == nil {
		if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			s.err = err
		}
	}
}

// startSSE sends the headers of an event stream (the call id follows as
// the trailer x-call-id when calls are recorded).
func (s *Server) startSSE(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	if s.recorder != nil {
		h.Set("Trailer", "x-call-id")
	}
	w.WriteHeader(http.StatusOK)
	return &sseWriter{w: w, rc: http.NewResponseController(w)}
}

// readRequest reads the caller and the JSON body of a POST into v; false
// when it has answered an error.
func readRequest(w http.ResponseWriter, r *http.Request, v any) (*auth.Principal, []byte, bool) {
	p, err := httpx.Principal(r)
	if err != nil {
		writeErr(w, err)
		return nil, nil, false
	}
	body, err := httpx.ReadBody(r, nil)
	if err != nil {
		writeErr(w, err)
		return nil, nil, false
	}
	if err := httpx.UnmarshalJSON(body, v); err != nil {
		writeErr(w, err)
		return nil, nil, false
	}
	return p, body, true
}

// choiceStream tracks what has been sent of one choice.
type choiceStream struct {
	tools    *toolStreamer
	calls    []ToolCall
	content  bytes.Buffer
	finished bool
}

// streamChat sends the completion as SSE chunks: a role chunk per choice,
// content (and logprobs) deltas as tokens arrive, tool calls as whole
// deltas, a finish chunk per choice, an optional usage chunk, then [DONE].
// The call id, known only once the call is recorded at the end, is sent as
// the HTTP trailer x-call-id.
func (s *Server) streamChat(w http.ResponseWriter, r *http.Request, pr *prepared, p *auth.Principal, id string, created int64, started time.Time, body []byte) {
	sw := s.startSSE(w)
	model, fp := pr.plan.req.Model, pr.target.fingerprint()
	chunk := func(choices []ChunkChoice) *ChatCompletionChunk {
		return &ChatCompletionChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model, SystemFingerprint: fp, Choices: choices}
	}
	states := make([]*choiceStream, pr.gen.N())
	empty := ""
	for i := range states {
		states[i] = &choiceStream{}
		if pr.plan.parseTools() {
			states[i].tools = &toolStreamer{format: pr.lm.format}
		}
		sw.event(chunk([]ChunkChoice{{Index: i, Delta: Delta{Role: "assistant", Content: &empty}}}))
	}
	sw.flush()
	ctx := pr.ctx
	var genErr error
	for {
		if ctx.Err() != nil {
			s.record(pr, p, started, body, nil, "client disconnected")
			return
		}
		allDone := true
		for i, st := range states {
			if st.finished {
				continue
			}
			ev := pr.gen.Poll(i)
			toks, text, done, finish := ev.Tokens, ev.Text, ev.Done, ev.Finish
			if ev.Err != nil {
				genErr = ev.Err
				st.finished = true
				continue
			}
			content := text
			var calls []ToolCall
			if st.tools != nil {
				content, calls = st.tools.push(text)
				if done {
					c2, calls2 := st.tools.flush()
					content += c2
					calls = append(calls, calls2...)
				}
			}
			if content != "" || len(toks) > 0 {
				cc := ChunkChoice{Index: i}
				if content != "" {
					c := content
					cc.Delta.Content = &c
					st.content.WriteString(content)
				}
				if pr.plan.logprobs && len(toks) > 0 {
					cc.Logprobs = &ChoiceLogprobs{Content: s.logprobEntries(pr, toks)}
				}
				if cc.Delta.Content != nil || cc.Logprobs != nil {
					sw.event(chunk([]ChunkChoice{cc}))
				}
			}
			for _, tc := range calls {
				idx := len(st.calls)
				st.calls = append(st.calls, tc)
				sw.event(chunk([]ChunkChoice{{Index: i, Delta: Delta{ToolCalls: []ToolCallDelta{{
					Index: idx, ID: tc.ID, Type: "function",
					Function: ToolCallFunctionDelta{Name: tc.Function.Name, Arguments: tc.Function.Arguments},
				}}}}}))
			}
			if done {
				st.finished = true
				fr := finish
				if len(st.calls) > 0 && fr == infer.FinishStop {
					fr = finishToolCalls
				}
				if fr == "" {
					fr = infer.FinishStop
				}
				sw.event(chunk([]ChunkChoice{{Index: i, Delta: Delta{}, FinishReason: &fr}}))
			} else {
				allDone = false
			}
		}
		sw.flush()
		if sw.err != nil {
			// client gone: the deferred cancel of the handler stops generation
			s.record(pr, p, started, body, nil, "client disconnected")
			return
		}
		if allDone || genErr != nil {
			break
		}
		select {
		case <-pr.gen.Changed():
		case <-ctx.Done():
			s.record(pr, p, started, body, nil, "client disconnected")
			return
		}
	}
	if ctx.Err() != nil {
		s.record(pr, p, started, body, nil, "client disconnected")
		return
	}
	if genErr != nil {
		s.log.Error("serve: generation failed", "model", pr.target.Name, "err", genErr)
		sw.event(map[string]any{"error": map[string]any{"message": "generation failed", "type": "server_error", "param": nil, "code": "generation_failed"}})
		sw.done()
		sw.flush()
		s.record(pr, p, started, body, nil, "generation failed")
		return
	}
	resp, err := s.buildResponse(pr, id, created)
	if err == nil {
		// the recorded output is what the client assembled from the stream
		for i := range resp.Choices {
			st := states[i]
			c := st.content.String()
			resp.Choices[i].Message.Content = &c
			resp.Choices[i].Message.ToolCalls = st.calls
			if len(st.calls) > 0 {
				if c == "" {
					resp.Choices[i].Message.Content = nil
				}
				if resp.Choices[i].FinishReason == infer.FinishStop {
					resp.Choices[i].FinishReason = finishToolCalls
				}
			}
		}
		if pr.plan.includeUsage {
			c := chunk([]ChunkChoice{})
			c.Usage = resp.Usage
			sw.event(c)
		}
	}
	sw.done()
	sw.flush()
	if callID := s.record(pr, p, started, body, resp, ""); callID != "" {
		w.Header().Set("x-call-id", callID)
	}
}
