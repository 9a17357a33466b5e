package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"flywheel/internal/engine/chattmpl"
	"flywheel/internal/httpx"
)

// Limits on the parts of a chat completion request that are not the prompt,
// after OpenAI's own where it has them, so that no field can carry
// megabytes into the call store or the scheduler.
const (
	// DefaultMaxPromptBytesPerToken is Options.MaxPromptBytesPerToken's
	// default: far above real text (about 4 bytes per token), so only a
	// prompt that could never fit is refused before tokenization.
	DefaultMaxPromptBytesPerToken = 32
	// DefaultMaxRecordBytes is Options.MaxRecordBytes's default.
	DefaultMaxRecordBytes = 4 << 20

	MaxUserChars          = 256  // user (OpenAI: an end-user id)
	MaxMetadataPairs      = 16   // metadata (OpenAI: 16 pairs)
	MaxMetadataKeyChars   = 64   // metadata keys (OpenAI: 64 characters)
	MaxMetadataValueChars = 512  // metadata values (OpenAI: 512 characters)
	MaxStopBytes          = 1024 // each stop string
	MaxStopTokenIDs       = 1024 // stop_token_ids entries
	MaxTools              = 128  // tools (OpenAI: 128 functions)
	MaxNameBytes          = 256  // messages[i].name, tool call ids and names
	MaxModelBytes         = 512  // model
	MaxKwargsBytes        = 64 << 10
)

// tooLong is the 400 of a field over its limit.
func tooLong(param, format string, args ...any) error {
	return httpx.Invalid(param, "field_too_long", format, args...)
}

// checkSamplingLimits bounds the shared fields of a request.
func checkSamplingLimits(req *SamplingRequest) error {
	if len(req.Model) > MaxModelBytes {
		return tooLong("model", "model is %d bytes; at most %d are allowed", len(req.Model), MaxModelBytes)
	}
	if !isNull(req.User) {
		var u string
		if err := json.Unmarshal(req.User, &u); err != nil {
			return httpx.Invalid("user", "invalid_type", "user: expected a string")
		}
		if n := utf8.RuneCountInString(u); n > MaxUserChars {
			return tooLong("user", "user is %d characters; at most %d are allowed", n, MaxUserChars)
		}
	}
	if !isNull(req.Metadata) {
		var md map[string]json.RawMessage
		if err := json.Unmarshal(req.Metadata, &md); err != nil {
			return httpx.Invalid("metadata", "invalid_type", "metadata: expected an object of strings")
		}
		if len(md) > MaxMetadataPairs {
			return tooLong("metadata", "metadata has %d keys; at most %d are allowed", len(md), MaxMetadataPairs)
		}
		for k, raw := range md {
			if utf8.RuneCountInString(k) > MaxMetadataKeyChars {
				return tooLong("metadata", "metadata keys may have at most %d characters", MaxMetadataKeyChars)
			}
			var v string
			if err := json.Unmarshal(raw, &v); err != nil {
				return httpx.Invalid("metadata."+k, "invalid_type", "metadata values must be strings")
			}
			if utf8.RuneCountInString(v) > MaxMetadataValueChars {
				return tooLong("metadata."+k, "metadata values may have at most %d characters", MaxMetadataValueChars)
			}
		}
	}
	if len(req.StopTokenIDs) > MaxStopTokenIDs {
		return tooLong("stop_token_ids", "stop_token_ids has %d entries; at most %d are allowed", len(req.StopTokenIDs), MaxStopTokenIDs)
	}
	return nil
}

// checkFieldLimits bounds the chat fields of req that are not prompt text
// (parseSampling bounds the shared ones).
func checkFieldLimits(req *ChatRequest) error {
	if len(req.Tools) > MaxTools {
		return tooLong("tools", "tools has %d entries; at most %d are allowed", len(req.Tools), MaxTools)
	}
	if len(req.ChatTemplateKwargs) > MaxKwargsBytes {
		return tooLong("chat_template_kwargs", "chat_template_kwargs is %d bytes; at most %d are allowed", len(req.ChatTemplateKwargs), MaxKwargsBytes)
	}
	for i, m := range req.Messages {
		if len(m.Name) > MaxNameBytes {
			return tooLong(fmt.Sprintf("messages[%d].name", i), "messages[%d].name is %d bytes; at most %d are allowed", i, len(m.Name), MaxNameBytes)
		}
		if len(m.ToolCallID) > MaxNameBytes {
			return tooLong(fmt.Sprintf("messages[%d].tool_call_id", i), "messages[%d].tool_call_id is %d bytes; at most %d are allowed", i, len(m.ToolCallID), MaxNameBytes)
		}
		for j, tc := range m.ToolCalls {
			if len(tc.ID) > MaxNameBytes || len(tc.Type) > MaxNameBytes || len(tc.Function.Name) > MaxNameBytes {
				return tooLong(fmt.Sprintf("messages[%d].tool_calls[%d]", i, j), "messages[%d].tool_calls[%d]: id, type and function.name may have at most %d bytes", i, j, MaxNameBytes)
			}
		}
	}
	return nil
}

// checkStop bounds one stop string.
func checkStop(s string) error {
	if len(s) > MaxStopBytes {
		return tooLong("stop", "a stop string is %d bytes; at most %d are allowed", len(s), MaxStopBytes)
	}
	return nil
}

// promptBytes is the size of what a chat request renders: message contents,
// names and tool-call arguments, the tools and the template kwargs.
func promptBytes(msgs []ChatMessage, tools, kwargs json.RawMessage) int {
	n := len(tools) + len(kwargs)
	for _, m := range msgs {
		n += len(m.Content) + len(m.Name)
		for _, tc := range m.ToolCalls {
			n += len(tc.Function.Arguments)
		}
	}
	return n
}

// checkPromptBytes refuses a prompt that cannot fit the context whatever
// its tokenization, before it is rendered or tokenized (a 50 MB prompt would
// otherwise be tokenized in full only to be refused).
func (l *servedModel) checkPromptBytes(param, what string, n int) error {
	limit := int64(l.maxLen()) * int64(l.bytesPerToken)
	if int64(n) <= limit {
		return nil
	}
	return &httpx.Error{Status: http.StatusBadRequest, Param: param, Code: "context_length_exceeded",
		Message: fmt.Sprintf("%s %d bytes; this model's maximum context length is %d tokens, which allows at most %d bytes (%d per token) before tokenization. Please reduce the length of the %s.",
			what, n, l.maxLen(), limit, l.bytesPerToken, param)}
}

// templateError is the answer to a chat template that failed to render:
// a limit it hit is named (400 chat_template_limit), any other failure is
// the template's own error (400 template_error).
func templateError(err error) error {
	if le, ok := chattmpl.IsLimit(err); ok {
		return httpx.Invalid("messages", "chat_template_limit", "the model's chat template exceeded a limit while rendering these messages: %s", strings.TrimPrefix(le.Error(), "chattmpl: "))
	}
	return httpx.Invalid("messages", "template_error", "the chat template could not render these messages: %s", strings.TrimPrefix(err.Error(), "chattmpl: "))
}

// boundRecord returns raw, or when it is over limit bytes a stub saying so
// (the call store keeps what a client can read back; megabytes of it per
// call are not worth keeping).
func boundRecord(raw json.RawMessage, limit int, extra map[string]any) json.RawMessage {
	if len(raw) <= limit {
		return raw
	}
	stub := map[string]any{"_truncated": fmt.Sprintf("%d bytes exceed the recording limit of %d bytes", len(raw), limit)}
	for k, v := range extra {
		stub[k] = v
	}
	b, err := json.Marshal(stub)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}
