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

// readRequest reads the caller and the JSON body of a POST into v.
func readRequest(r *http.Request, v any) (*auth.Principal, []byte, error) {
	p, err := httpx.Principal(r)
	if err != nil {
		return nil, nil, err
	}
	body, err := httpx.ReadBody(r, nil)
	if err != nil {
		return nil, nil, err
	}
	if err := httpx.UnmarshalJSON(body, v); err != nil {
		return nil, nil, err
	}
	return p, body, nil
}

// choiceStream tracks what has been sent of one choice.
type choiceStream struct {
	tools    *toolStreamer
	calls    []ToolCall
	content  bytes.Buffer
	finished bool
}

// chatStream is one chat completion being sent as SSE chunks: the chunks'
// fixed fields and what has been sent of each choice.
type chatStream struct {
	s       *Server
	sw      *sseWriter
	pr      *prepared
	id      string
	created int64
	model   string
	fp      string
	states  []*choiceStream
}

// chunk is a chunk of the stream holding choices.
func (cs *chatStream) chunk(choices []ChunkChoice) *ChatCompletionChunk {
	return &ChatCompletionChunk{ID: cs.id, Object: "chat.completion.chunk", Created: cs.created, Model: cs.model, SystemFingerprint: cs.fp, Choices: choices}
}

// open sends each choice's role chunk.
func (cs *chatStream) open() {
	empty := ""
	for i := range cs.states {
		cs.states[i] = &choiceStream{}
		if cs.pr.plan.parseTools() {
			cs.states[i].tools = &toolStreamer{format: cs.pr.lm.format}
		}
		cs.sw.event(cs.chunk([]ChunkChoice{{Index: i, Delta: Delta{Role: "assistant", Content: &empty}}}))
	}
	cs.sw.flush()
}

// send turns what choice i produced since its last event into chunks:
// content (and logprobs), each tool call whole as it completes, and the
// finish chunk when the choice has ended.
func (cs *chatStream) send(i int, ev infer.Event) {
	st, pr := cs.states[i], cs.pr
	content := ev.Text
	var calls []ToolCall
	if st.tools != nil {
		content, calls = st.tools.push(ev.Text)
		if ev.Done {
			c2, calls2 := st.tools.flush()
			content += c2
			calls = append(calls, calls2...)
		}
	}
	if content != "" || len(ev.Tokens) > 0 {
		cc := ChunkChoice{Index: i}
		if content != "" {
			c := content
			cc.Delta.Content = &c
			st.content.WriteString(content)
		}
		if pr.plan.logprobs && len(ev.Tokens) > 0 {
			cc.Logprobs = &ChoiceLogprobs{Content: cs.s.logprobEntries(pr, ev.Tokens)}
		}
		if cc.Delta.Content != nil || cc.Logprobs != nil {
			cs.sw.event(cs.chunk([]ChunkChoice{cc}))
		}
	}
	for _, tc := range calls {
		idx := len(st.calls)
		st.calls = append(st.calls, tc)
		cs.sw.event(cs.chunk([]ChunkChoice{{Index: i, Delta: Delta{ToolCalls: []ToolCallDelta{{
			Index: idx, ID: tc.ID, Type: "function",
			Function: ToolCallFunctionDelta{Name: tc.Function.Name, Arguments: tc.Function.Arguments},
		}}}}}))
	}
	if ev.Done {
		st.finished = true
		fr := infer.FinishReason(ev.Finish, len(st.calls) > 0)
		if fr == "" {
			fr = infer.FinishStop
		}
		cs.sw.event(cs.chunk([]ChunkChoice{{Index: i, Delta: Delta{}, FinishReason: &fr}}))
	}
}

// step polls every unfinished choice once and sends what it produced: all
// reports whether every choice has ended, err is the first generation
// error seen (its choice ends without a finish chunk).
func (cs *chatStream) step() (all bool, err error) {
	all = true
	for i, st := range cs.states {
		if st.finished {
			continue
		}
		ev := cs.pr.gen.Poll(i)
		if ev.Err != nil {
			err = ev.Err
			st.finished = true
			continue
		}
		cs.send(i, ev)
		if !ev.Done {
			all = false
		}
	}
	return all, err
}

// streamed makes resp (the choices as generated) what the client assembled
// from the stream: the content and tool calls sent, so that the recorded
// output is the one the client saw.
func (cs *chatStream) streamed(resp *ChatCompletion) {
	for i := range resp.Choices {
		st, ch := cs.states[i], &resp.Choices[i]
		c := st.content.String()
		ch.Message.Content = &c
		ch.Message.ToolCalls = st.calls
		if len(st.calls) > 0 {
			if c == "" {
				ch.Message.Content = nil
			}
			ch.FinishReason = infer.FinishReason(ch.FinishReason, true)
		}
	}
}

// streamChat sends the completion as SSE chunks: a role chunk per choice,
// content (and logprobs) deltas as tokens arrive, tool calls as whole
// deltas, a finish chunk per choice, an optional usage chunk, then [DONE].
// The call id, known only once the call is recorded at the end, is sent as
// the HTTP trailer x-call-id.
func (s *Server) streamChat(w http.ResponseWriter, r *http.Request, pr *prepared, p *auth.Principal, id string, created int64, started time.Time, body []byte) {
	cs := &chatStream{s: s, sw: s.startSSE(w), pr: pr, id: id, created: created, model: pr.plan.model, fp: pr.target.fingerprint(),
		states: make([]*choiceStream, pr.gen.N())}
	cs.open()
	ctx, sw := pr.ctx, cs.sw
	gone := func() { s.record(pr, p, started, body, nil, "client disconnected") }
	var genErr error
	for {
		if ctx.Err() != nil {
			gone()
			return
		}
		all, err := cs.step()
		genErr = err
		sw.flush()
		if sw.err != nil {
			// client gone: the deferred cancel of the handler stops generation
			gone()
			return
		}
		if all || genErr != nil {
			break
		}
		select {
		case <-pr.gen.Changed():
		case <-ctx.Done():
			gone()
			return
		}
	}
	if ctx.Err() != nil {
		gone()
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
		cs.streamed(resp)
		if pr.plan.includeUsage {
			c := cs.chunk([]ChunkChoice{})
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
