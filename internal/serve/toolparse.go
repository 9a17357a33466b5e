package serve

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"strings"

	"flywheel/internal/infer"
)

const (
	hermesOpen  = infer.ToolCallOpen
	hermesClose = infer.ToolCallClose
	pythonTag   = infer.PythonTag
)

// detectToolFormat picks the tool-call syntax from the chat template source:
// templates that mention <tool_call> use the Hermes/Qwen form, those of the
// Llama-3.1 family (python_tag / "parameters") the bare JSON form.
func detectToolFormat(templateSource string) toolFormat {
	switch {
	case strings.Contains(templateSource, hermesOpen):
		return fmtHermes
	case strings.Contains(templateSource, pythonTag), strings.Contains(templateSource, `"parameters"`):
		return fmtLlamaJSON
	}
	return fmtHermes
}

const idAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

func randomID(prefix string, n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return prefix + string(b)
}

func newToolCallID() string { return randomID("call_", 24) }

// parseCallJSON turns one {"name": ..., "arguments"|"parameters": {...}}
// object into a ToolCall; the arguments keep the model's own spelling.
func parseCallJSON(s string) (ToolCall, bool) {
	var obj struct {
		Name       *string         `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	dec := json.NewDecoder(strings.NewReader(s))
	if err := dec.Decode(&obj); err != nil || obj.Name == nil || *obj.Name == "" {
		return ToolCall{}, false
	}
	if dec.More() {
		return ToolCall{}, false
	}
	args := obj.Arguments
	if len(args) == 0 {
		args = obj.Parameters
	}
	args = bytes.TrimSpace(args)
	if len(args) == 0 || string(args) == "null" {
		args = []byte("{}")
	}
	// A string holding JSON (some models double-encode) is unwrapped.
	if args[0] == '"' {
		var inner string
		if json.Unmarshal(args, &inner) == nil && json.Valid([]byte(inner)) {
			args = []byte(inner)
		}
	}
	return ToolCall{ID: newToolCallID(), Type: "function", Function: ToolCallFunction{Name: *obj.Name, Arguments: string(args)}}, true
}

// parseToolCalls extracts tool calls from generated text. It returns the
// content left outside the calls (nil when empty) and the calls; when the
// text holds no well-formed call, calls is nil and the content is the text.
func parseToolCalls(text string, format toolFormat) (*string, []ToolCall) {
	full := &text
	switch format {
	case fmtLlamaJSON:
		s := strings.TrimSpace(text)
		s = strings.TrimSpace(strings.TrimPrefix(s, pythonTag))
		if !strings.HasPrefix(s, "{") {
			return full, nil
		}
		var calls []ToolCall
		dec := json.NewDecoder(strings.NewReader(s))
		for {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return full, nil
			}
			tc, ok := parseCallJSON(string(raw))
			if !ok {
				return full, nil
			}
			calls = append(calls, tc)
			rest := strings.TrimSpace(s[dec.InputOffset():])
			if rest == "" {
				return nil, calls
			}
			if !strings.HasPrefix(rest, ";") {
				return full, nil
			}
			s = strings.TrimSpace(rest[1:])
			dec = json.NewDecoder(strings.NewReader(s))
		}
	default:
		i := strings.Index(text, hermesOpen)
		if i < 0 {
			return full, nil
		}
		before := text[:i]
		rest := text[i:]
		var calls []ToolCall
		for {
			rest = strings.TrimLeft(rest, " \t\r\n")
			if rest == "" {
				break
			}
			if !strings.HasPrefix(rest, hermesOpen) {
				return full, nil
			}
			rest = rest[len(hermesOpen):]
			body := rest
			j := strings.Index(rest, hermesClose)
			if j >= 0 {
				body, rest = rest[:j], rest[j+len(hermesClose):]
			} else {
				rest = ""
			}
			tc, ok := parseCallJSON(strings.TrimSpace(body))
			if !ok {
				return full, nil
			}
			calls = append(calls, tc)
		}
		if strings.TrimSpace(before) == "" {
			return nil, calls
		}
		before = strings.TrimRight(before, " \t\r\n")
		return &before, calls
	}
}

// toolStreamer splits streamed text into content deltas and whole tool
// calls, holding back text that may open a call.
type toolStreamer struct {
	format  toolFormat
	buf     string // text not yet emitted
	inCall  bool
	started bool // Llama form: first non-space text seen
	jsonAll bool // Llama form: the output is a JSON call; buffer to the end
	calls   int
}

// push adds text and returns the content to emit now and completed calls.
func (t *toolStreamer) push(s string) (string, []ToolCall) {
	t.buf += s
	if t.format == fmtLlamaJSON {
		if !t.started {
			trim := strings.TrimLeft(t.buf, " \t\r\n")
			if trim == "" {
				return "", nil
			}
			t.started = true
			t.jsonAll = strings.HasPrefix(trim, "{") || strings.HasPrefix(trim, pythonTag) || strings.HasPrefix(pythonTag, trim)
		}
		if t.jsonAll {
			return "", nil
		}
		out := t.buf
		t.buf = ""
		return out, nil
	}
	var content strings.Builder
	var calls []ToolCall
	for {
		if !t.inCall {
			i := strings.Index(t.buf, hermesOpen)
			if i < 0 {
				keep := infer.HeldPrefix(t.buf, hermesOpen)
				content.WriteString(t.buf[:len(t.buf)-keep])
				t.buf = t.buf[len(t.buf)-keep:]
				return content.String(), calls
			}
			pre := t.buf[:i]
			if t.calls > 0 || content.Len() > 0 || strings.TrimSpace(pre) != "" {
				content.WriteString(pre)
			}
			t.buf = t.buf[i+len(hermesOpen):]
			t.inCall = true
		}
		j := strings.Index(t.buf, hermesClose)
		if j < 0 {
			return content.String(), calls
		}
		body := t.buf[:j]
		t.buf = t.buf[j+len(hermesClose):]
		t.inCall = false
		if tc, ok := parseCallJSON(strings.TrimSpace(body)); ok {
			calls = append(calls, tc)
			t.calls++
		} else {
			content.WriteString(hermesOpen + body + hermesClose)
		}
	}
}

// flush ends the stream: buffered text becomes a call or content.
func (t *toolStreamer) flush() (string, []ToolCall) {
	buf := t.buf
	t.buf = ""
	if t.format == fmtLlamaJSON {
		if !t.jsonAll {
			return buf, nil
		}
		content, calls := parseToolCalls(buf, fmtLlamaJSON)
		if calls == nil {
			return buf, nil
		}
		t.calls += len(calls)
		if content != nil {
			return *content, calls
		}
		return "", calls
	}
	if t.inCall {
		t.inCall = false
		if tc, ok := parseCallJSON(strings.TrimSpace(buf)); ok {
			t.calls++
			return "", []ToolCall{tc}
		}
		return hermesOpen + buf, nil
	}
	return buf, nil
}
