package serve

import (
	"encoding/json"
)

// SamplingRequest holds the fields chat completions and (text)
// completions share: OpenAI's and the vLLM extensions flywheel supports.
type SamplingRequest struct {
	Model            string          `json:"model"`
	MaxTokens        *int            `json:"max_tokens"`
	Temperature      *float64        `json:"temperature"`
	TopP             *float64        `json:"top_p"`
	N                *int            `json:"n"`
	Stop             json.RawMessage `json:"stop"`
	Seed             *int64          `json:"seed"`
	Stream           *bool           `json:"stream"`
	StreamOptions    *StreamOptions  `json:"stream_options"`
	User             json.RawMessage `json:"user"`     // ignored (bounded)
	Metadata         json.RawMessage `json:"metadata"` // ignored (bounded)
	ResponseFormat   json.RawMessage `json:"response_format"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	LogitBias        json.RawMessage `json:"logit_bias"`

	// vLLM extensions.
	TopK                   *int     `json:"top_k"`
	MinP                   *float64 `json:"min_p"`
	StopTokenIDs           []int    `json:"stop_token_ids"`
	ReturnTokensAsTokenIDs *bool    `json:"return_tokens_as_token_ids"`
	IgnoreEOS              *bool    `json:"ignore_eos"`
	RepetitionPenalty      *float64 `json:"repetition_penalty"`
	PromptLogprobs         *int     `json:"prompt_logprobs"`
}

// ChatRequest is the body of POST /v1/chat/completions.
type ChatRequest struct {
	SamplingRequest
	Messages            []ChatMessage   `json:"messages"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Logprobs            *bool           `json:"logprobs"`
	TopLogprobs         *int            `json:"top_logprobs"`
	Tools               []Tool          `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls"`

	// vLLM extensions.
	ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs"`
	AddGenerationPrompt  *bool           `json:"add_generation_prompt"`
	ContinueFinalMessage *bool           `json:"continue_final_message"`
}

// StreamOptions is OpenAI's stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ChatMessage is one message of a request. Content is a string, null, or a
// list of parts of which only text parts are supported.
type ChatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name,omitempty"`
	ToolCalls  []ToolCall      `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

// Tool is an OpenAI tool definition; only "function" tools exist.
type Tool struct {
	Type     string       `json:"type"`
	Function ToolFunction `json:"function"`
}

// ToolFunction describes a callable function and its JSON-schema parameters.
type ToolFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// ToolCall is a call the assistant made: in requests (assistant history) and
// in responses.
type ToolCall struct {
	ID       string           `json:"id"`
	Type     string           `json:"type"`
	Function ToolCallFunction `json:"function"`
}

// ToolCallFunction is the function name and its JSON-encoded arguments.
type ToolCallFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ChatCompletion is the non-streaming response.
type ChatCompletion struct {
	ID                string   `json:"id"`
	Object            string   `json:"object"`
	Created           int64    `json:"created"`
	Model             string   `json:"model"`
	SystemFingerprint string   `json:"system_fingerprint"`
	Choices           []Choice `json:"choices"`
	Usage             *Usage   `json:"usage"`
	// PromptLogprobs is vLLM's prompt_logprobs, when asked for.
	PromptLogprobs []PromptLogprob `json:"prompt_logprobs,omitempty"`
}

// Choice is one of the n completions.
type Choice struct {
	Index        int             `json:"index"`
	Message      ResponseMessage `json:"message"`
	Logprobs     *ChoiceLogprobs `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

// ResponseMessage is the assistant's message.
type ResponseMessage struct {
	Role      string     `json:"role"`
	Content   *string    `json:"content"`
	Refusal   *string    `json:"refusal"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// ChoiceLogprobs carries one entry per sampled token.
type ChoiceLogprobs struct {
	Content []TokenLogprob `json:"content"`
	Refusal []TokenLogprob `json:"refusal"`
}

// TokenLogprob is a sampled token with its logprob, bytes and alternatives.
type TokenLogprob struct {
	Token       string       `json:"token"`
	Logprob     float64      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []TopLogprob `json:"top_logprobs"`
}

// TopLogprob is one alternative token.
type TopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// Usage counts tokens. The prompt is counted once whatever n.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// ChatCompletionChunk is one SSE event of a streaming response.
type ChatCompletionChunk struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"`
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	SystemFingerprint string        `json:"system_fingerprint"`
	Choices           []ChunkChoice `json:"choices"`
	Usage             *Usage        `json:"usage,omitempty"`
}

// ChunkChoice is one choice's delta.
type ChunkChoice struct {
	Index        int             `json:"index"`
	Delta        Delta           `json:"delta"`
	Logprobs     *ChoiceLogprobs `json:"logprobs,omitempty"`
	FinishReason *string         `json:"finish_reason"`
}

// Delta is the incremental message of a chunk.
type Delta struct {
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content,omitempty"`
	ToolCalls []ToolCallDelta `json:"tool_calls,omitempty"`
}

// ToolCallDelta is a tool call in a stream; flywheel sends each call whole,
// in one delta.
type ToolCallDelta struct {
	Index    int                   `json:"index"`
	ID       string                `json:"id,omitempty"`
	Type     string                `json:"type,omitempty"`
	Function ToolCallFunctionDelta `json:"function"`
}

// ToolCallFunctionDelta is the function part of a ToolCallDelta.
type ToolCallFunctionDelta struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// ModelList is GET /v1/models.
type ModelList struct {
	Object string      `json:"object"`
	Data   []ModelCard `json:"data"`
}

// ModelCard is one servable model.
type ModelCard struct {
	ID          string  `json:"id"`
	Object      string  `json:"object"`
	Created     int64   `json:"created"`
	OwnedBy     string  `json:"owned_by"`
	Root        string  `json:"root"`
	Parent      *string `json:"parent"`
	MaxModelLen int     `json:"max_model_len,omitempty"`
}

// TokenizeRequest is POST /tokenize: either prompt or messages.
type TokenizeRequest struct {
	Model                string          `json:"model"`
	Prompt               *string         `json:"prompt"`
	Messages             []ChatMessage   `json:"messages"`
	AddGenerationPrompt  *bool           `json:"add_generation_prompt"`
	ContinueFinalMessage *bool           `json:"continue_final_message"`
	AddSpecialTokens     *bool           `json:"add_special_tokens"`
	Tools                []Tool          `json:"tools"`
	ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs"`
	ReturnTokenStrs      *bool           `json:"return_token_strs"`
}

// TokenizeResponse is the answer of POST /tokenize.
type TokenizeResponse struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []int    `json:"tokens"`
	TokenStrs   []string `json:"token_strs"`
}

// DetokenizeRequest is POST /detokenize.
type DetokenizeRequest struct {
	Model  string `json:"model"`
	Tokens []int  `json:"tokens"`
}

// DetokenizeResponse is the answer of POST /detokenize.
type DetokenizeResponse struct {
	Prompt string `json:"prompt"`
}
