package rl

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"flywheel/internal/httpx"
)

// testdata/art_exchanges.json is the body ART 0.5.23's ServerlessBackend
// posts for three trajectories of Chat Completions exchanges, written by
// ART's own classes (testdata/art_exchanges.py, under Python 3.12 with the
// 0.5.23 wheel unpacked, pydantic 2.14.4, openai 2.54.0): a tool call, its
// answer and that answer asked for again; one call with two choices that
// sampled the same tokens; an answer sent back without its sampled
// reasoning, then continued. The second trajectory's reward is 0, so it is
// absent.
//
// The fixtures are valid, and each trajectory's histories are those ART's
// Trajectory.chat_completions_histories() builds from it
// (testdata/*_histories.json): the same number, in the same order, each
// message a choice of the same call where ART's source is a choice, and a
// request's message where it is the request. art_exchanges_edges.json adds
// a tool call that used the whole token limit (ART does not continue its
// history) and tools that changed between calls (another history).
func TestExchangeHistoriesAsART(t *testing.T) {
	for _, name := range []string{"art_exchanges", "art_exchanges_edges"} {
		checkHistoriesAsART(t, name)
	}
	// What the checkpoint keeps of a trajectory of exchanges (Summarize):
	// its first history, the number of the others.
	req, err := ParseRequest(mustRead(t, "testdata/art_exchanges.json"))
	if err != nil {
		t.Fatal(err)
	}
	a := Summarize("job", req).Trajectories[0]
	if a.Histories != 1 || len(a.Messages) != 5 || a.NumChoices != 2 {
		t.Fatalf("summary of A: %d more histories, %d messages, %d choices; want 1, 5, 2", a.Histories, len(a.Messages), a.NumChoices)
	}
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func checkHistoriesAsART(t *testing.T, name string) {
	body := mustRead(t, "testdata/"+name+".json")
	sum, err := Validate(body)
	if err != nil || sum.Trajectories < 2 {
		t.Fatalf("%s: Validate: %+v, %v", name, sum, err)
	}
	checkStreamAgrees(t, body, sum, err)
	req, err := ParseRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	raw := mustRead(t, "testdata/"+name+"_histories.json")
	var want [][][]json.RawMessage // trajectory, history, source ["request", i] or ["choice", exchange, index]
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	for ti, tr := range req.TrajectoryGroups[0].Trajectories {
		var ex struct {
			ChatCompletions []chatExchange `json:"chat_completions"`
		}
		if err := json.Unmarshal(tr.Exchanges, &ex); err != nil {
			t.Fatal(err)
		}
		hs, fromExchanges, err := tr.Histories()
		if err != nil || !fromExchanges || len(hs) != len(want[ti]) {
			t.Fatalf("%s trajectory %d: %d histories (from exchanges %v), %v; ART has %d", name, ti, len(hs), fromExchanges, err, len(want[ti]))
		}
		for hi, h := range hs {
			if len(h.MessagesAndChoices) != len(want[ti][hi]) {
				t.Fatalf("trajectory %d history %d: %d messages, ART %d", ti, hi, len(h.MessagesAndChoices), len(want[ti][hi]))
			}
			for mi, el := range h.MessagesAndChoices {
				var src []any
				json.Unmarshal(want[ti][hi][mi], &src)
				var e Element
				if err := json.Unmarshal(el, &e); err != nil {
					t.Fatal(err)
				}
				if src[0] == "request" {
					if e.IsChoice() {
						t.Errorf("trajectory %d history %d message %d: a choice, ART's source is the request", ti, hi, mi)
					}
					continue
				}
				x, c := int(src[1].(float64)), src[2].(float64)
				var found json.RawMessage
				for _, ch := range ex.ChatCompletions[x].Response.Choices {
					var idx struct{ Index float64 }
					json.Unmarshal(ch, &idx)
					if idx.Index == c {
						found = ch
					}
				}
				if !bytes.Equal(el, found) {
					t.Errorf("trajectory %d history %d message %d = %s, want choice %v of exchange %d", ti, hi, mi, el, c, x)
				}
			}
			if name == "art_exchanges" && ti == 0 && len(h.Tools) != 1 {
				t.Errorf("history %d: tools %s, want the request's one tool", hi, h.Tools)
			}
		}
	}
}

// exchangeBody is a valid request whose one trajectory has one exchange;
// edit changes the trajectory before it is serialised.
func exchangeBody(edit func(tr, ex, req, resp, choice map[string]any)) []byte {
	choice := map[string]any{"index": 0, "finish_reason": "stop",
		"message":  map[string]any{"role": "assistant", "content": "yo", "refusal": nil},
		"logprobs": map[string]any{"content": []any{map[string]any{"token": "token_id:7", "logprob": -0.5, "bytes": nil, "top_logprobs": []any{}}}}}
	req := map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": "hi"}}, "logprobs": true}
	resp := map[string]any{"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": []any{choice}}
	ex := map[string]any{"start_time": "2026-11-27T06:00:00.5Z", "end_time": "2026-11-27T06:00:01Z", "request": req, "response": resp, "model": "m"}
	tr := map[string]any{"exchanges": map[string]any{"chat_completions": []any{ex}}, "reward": 1.0}
	if edit != nil {
		edit(tr, ex, req, resp, choice)
	}
	b, _ := json.Marshal(map[string]any{"model_id": "m", "trajectory_groups": []any{map[string]any{"trajectories": []any{tr}}}})
	return b
}

// Broken exchanges are 400s naming the field, from Validate and from
// ValidateStream alike.
func TestExchangesValidation(t *testing.T) {
	const at = "trajectory_groups[0].trajectories[0]"
	const cc = at + ".exchanges.chat_completions[0]"
	cases := []struct {
		name, param, code, msg string
		edit                   func(tr, ex, req, resp, choice map[string]any)
	}{
		{"both forms", at, "invalid_value", "not both", func(tr, ex, req, resp, choice map[string]any) {
			tr["messages_and_choices"] = []any{map[string]any{"role": "user", "content": "hi"}}
		}},
		{"both forms, tools", at, "invalid_value", "exchanges and tools", func(tr, ex, req, resp, choice map[string]any) { tr["tools"] = []any{} }},
		{"neither form", at + ".messages_and_choices", "missing_field", "or exchanges", func(tr, ex, req, resp, choice map[string]any) {
			tr["exchanges"] = map[string]any{}
		}},
		{"exchanges not an object", at + ".exchanges", "invalid_type", "", func(tr, ex, req, resp, choice map[string]any) { tr["exchanges"] = []any{} }},
		{"responses protocol", at + ".exchanges.responses[0]", "unsupported_value", "only Chat Completions", func(tr, ex, req, resp, choice map[string]any) {
			tr["exchanges"].(map[string]any)["responses"] = []any{map[string]any{}}
		}},
		{"missing start_time", cc + ".start_time", "missing_field", "", func(tr, ex, req, resp, choice map[string]any) { delete(ex, "start_time") }},
		{"bad end_time", cc + ".end_time", "invalid_value", "ISO 8601", func(tr, ex, req, resp, choice map[string]any) { ex["end_time"] = "yesterday" }},
		{"start_time type", cc + ".start_time", "invalid_type", "", func(tr, ex, req, resp, choice map[string]any) { ex["start_time"] = 5 }},
		{"messages type", cc + ".request.messages", "invalid_type", "", func(tr, ex, req, resp, choice map[string]any) { req["messages"] = "hi" }},
		{"message without role", cc + ".request.messages[0].role", "missing_field", "", func(tr, ex, req, resp, choice map[string]any) {
			req["messages"] = []any{map[string]any{"content": "hi"}}
		}},
		{"tools type", cc + ".request.tools[0]", "invalid_type", "", func(tr, ex, req, resp, choice map[string]any) { req["tools"] = []any{"f"} }},
		{"own chat template", cc + ".request.chat_template", "unsupported_value", "base model's chat template", func(tr, ex, req, resp, choice map[string]any) {
			req["chat_template"] = "{{ messages }}"
		}},
		{"no choices", cc + ".response.choices", "invalid_value", "at least one choice", func(tr, ex, req, resp, choice map[string]any) { resp["choices"] = []any{} }},
		{"choice without message", cc + ".response.choices[0].message", "missing_field", "", func(tr, ex, req, resp, choice map[string]any) { delete(choice, "message") }},
		{"logprob type", cc + ".response.choices[0].logprobs.content[0].logprob", "invalid_type", "", func(tr, ex, req, resp, choice map[string]any) {
			choice["logprobs"] = map[string]any{"content": []any{map[string]any{"token": "token_id:7", "logprob": "x"}}}
		}},
		{"duplicate choice index", cc + ".response.choices[1].index", "invalid_value", "two choices", func(tr, ex, req, resp, choice map[string]any) {
			resp["choices"] = []any{choice, choice}
		}},
		{"exact prompt ids", cc + ".response.prompt_token_ids", "invalid_value", "exact token ids", func(tr, ex, req, resp, choice map[string]any) {
			resp["prompt_token_ids"] = []any{1, 2}
		}},
		{"exact sampled ids", cc + ".response.choices[0]", "invalid_value", "exact token ids", func(tr, ex, req, resp, choice map[string]any) {
			choice["token_ids"] = []any{7}
		}},
		{"no model", cc, "invalid_value", "names no model", func(tr, ex, req, resp, choice map[string]any) {
			delete(req, "model")
			resp["model"] = nil
		}},
		{"two models", at + ".exchanges.chat_completions", "invalid_value", "more than one model", func(tr, ex, req, resp, choice map[string]any) {
			other := map[string]any{}
			for k, v := range ex {
				other[k] = v
			}
			other["request"] = map[string]any{"model": "judge", "messages": []any{}}
			tr["exchanges"].(map[string]any)["chat_completions"] = []any{ex, other}
		}},
	}
	for _, c := range cases {
		body := exchangeBody(c.edit)
		sum, err := Validate(body)
		var he *httpx.Error
		if !errors.As(err, &he) || he.Status != 400 || he.Param != c.param || he.Code != c.code || !strings.Contains(he.Message, c.msg) {
			t.Errorf("%s: got %+v, want param %s code %s message with %q", c.name, err, c.param, c.code, c.msg)
		}
		checkStreamAgrees(t, body, sum, err)
	}
	// The base body, an empty exchanges object beside messages_and_choices
	// (the messages_and_choices form) and null exchanges are valid.
	for _, body := range [][]byte{exchangeBody(nil), exchangeBody(func(tr, ex, req, resp, choice map[string]any) {
		tr["exchanges"] = map[string]any{"chat_completions": []any{}}
		tr["messages_and_choices"] = []any{map[string]any{"role": "user", "content": "hi"}}
	}), exchangeBody(func(tr, ex, req, resp, choice map[string]any) {
		tr["exchanges"] = nil
		tr["messages_and_choices"] = []any{}
	})} {
		if _, err := Validate(body); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
}
