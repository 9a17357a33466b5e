package rl

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Request is the body of POST /v1/preview/training-jobs as the trainer
// reads it (api.md). Its experimental_config is not read here: the trainer
// runs the config the job record holds (JobConfig), resolved once when the
// job was submitted.
type Request struct {
	ModelID          string            `json:"model_id"`
	TrajectoryGroups []TrajectoryGroup `json:"trajectory_groups"`
}

// TrajectoryGroup is a group of trajectories sampled for one prompt; the
// advantages of rl.md are computed within a group.
type TrajectoryGroup struct {
	Trajectories []Trajectory `json:"trajectories"`
}

// Trajectory is one scored rollout, in one of ART's two forms:
// messages_and_choices (with tools and additional_histories), or exchanges,
// the inference calls ART 0.5.23's tracing helpers capture (exchanges.go).
// Messages and tools stay raw: they go to the chat template as they are.
type Trajectory struct {
	Exchanges           json.RawMessage   `json:"exchanges"`
	MessagesAndChoices  []json.RawMessage `json:"messages_and_choices"`
	Reward              float64           `json:"reward"`
	Tools               []json.RawMessage `json:"tools"`
	AdditionalHistories []History         `json:"additional_histories"`
}

// History is an additional history of a trajectory; it shares the
// trajectory's reward (and its tools when it has none of its own). It is
// also what a trajectory trains (Trajectory.Histories).
type History struct {
	MessagesAndChoices []json.RawMessage `json:"messages_and_choices"`
	Tools              []json.RawMessage `json:"tools"`
	// ChatTemplateKwargs are the chat_template_kwargs of the calls a
	// history of exchanges came from (raw object; nil: none). The wire's
	// additional_histories have none.
	ChatTemplateKwargs json.RawMessage `json:"-"`
}

// Histories returns what the trajectory trains, each history sharing its
// reward: its messages_and_choices, then its additional_histories (which
// take the trajectory's tools when they have none); or, for a trajectory of
// exchanges, the histories its Chat Completions calls make, in ART's order,
// with fromExchanges set: their sampled tokens are trained once each, where
// they first occur (the trainer's first-occurrence mask, ART's
// _FirstOccurrenceTrie). Errors name the path within the trajectory.
func (t *Trajectory) Histories() (hs []History, fromExchanges bool, err error) {
	if nonNull(t.Exchanges) != nil {
		hs, err := exchangeHistories("exchanges", t.Exchanges)
		if err != nil || len(hs) > 0 {
			return hs, true, err
		}
	}
	hs = append([]History{{MessagesAndChoices: t.MessagesAndChoices, Tools: t.Tools}}, t.AdditionalHistories...)
	for i := 1; i < len(hs); i++ {
		if hs[i].Tools == nil {
			hs[i].Tools = t.Tools
		}
	}
	return hs, false, nil
}

// Element is one item of messages_and_choices: a chat message (it has
// "role") or a choice as chat completions return it (no "role", has
// "message"). Only the fields training reads are decoded.
type Element struct {
	Role    *string `json:"role"`
	Message *struct {
		Content   *string         `json:"content"`
		ToolCalls json.RawMessage `json:"tool_calls"`
	} `json:"message"`
	Logprobs *struct {
		Content []TokenLogprob `json:"content"`
		Refusal []TokenLogprob `json:"refusal"`
	} `json:"logprobs"`
	FinishReason json.RawMessage `json:"finish_reason"` // raw: any JSON value
}

// Stopped reports whether the choice ended on its own (finish_reason
// "stop"), so its end-of-turn token was sampled.
func (e *Element) Stopped() bool { return string(bytes.TrimSpace(e.FinishReason)) == `"stop"` }

// TokenLogprob is one entry of a choice's logprobs.content: a sampled
// token ("token_id:N" or its text), its recorded logprob and its bytes.
type TokenLogprob struct {
	Token   string   `json:"token"`
	Logprob *float64 `json:"logprob"`
	Bytes   []int    `json:"bytes"`
}

// IsChoice reports whether the element is a choice rather than a message.
func (e *Element) IsChoice() bool { return e.Role == nil && e.Message != nil }

// Sampled returns the choice's sampled tokens with their logprobs (the
// refusal's when the content has none); nil when it has no logprobs.
func (e *Element) Sampled() []TokenLogprob {
	if e.Logprobs == nil {
		return nil
	}
	if len(e.Logprobs.Content) > 0 {
		return e.Logprobs.Content
	}
	return e.Logprobs.Refusal
}

// ParseRequest decodes a stored RL request body (one that Validate
// accepted when the job was created).
func ParseRequest(body []byte) (Request, error) {
	var req Request
	if err := json.Unmarshal(body, &req); err != nil {
		return Request{}, fmt.Errorf("invalid training request: %w", err)
	}
	return req, nil
}
