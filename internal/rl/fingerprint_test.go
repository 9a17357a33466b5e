package rl_test

import (
	"encoding/json"
	"testing"

	"flywheel/internal/rl"
)

// TestChoiceFingerprintMatchesWire: the fingerprint serve records from its
// response equals the one rl computes from the choice as a client posts it
// back (numbers through JSON).
func TestChoiceFingerprintMatchesWire(t *testing.T) {
	raw := `{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop",
		"logprobs": {"content": [{"token": "token_id:5", "logprob": -0.30000001192092896}, {"token": "token_id:9", "logprob": -1e-7}]}}`
	var e rl.Element
	if err := json.Unmarshal([]byte(raw), &e); err != nil {
		t.Fatal(err)
	}
	toks := []string{"token_id:5", "token_id:9"}
	lps := []float64{float64(float32(-0.3)), -1e-7}
	want := rl.ChoiceFingerprint(2, func(i int) (string, float64) { return toks[i], lps[i] })
	if got := e.Fingerprint(); got != want || len(got) != 32 {
		t.Errorf("fingerprint %q, want %q", got, want)
	}
	lps[1] = -1.0000001e-7
	if rl.ChoiceFingerprint(2, func(i int) (string, float64) { return toks[i], lps[i] }) == want {
		t.Error("a different logprob gives the same fingerprint")
	}
	var none rl.Element
	if err := json.Unmarshal([]byte(`{"index": 0, "message": {"role": "assistant", "content": "hi"}}`), &none); err != nil {
		t.Fatal(err)
	}
	if none.Fingerprint() != "" {
		t.Error("a choice without logprobs has a fingerprint")
	}
}

// TestSummarize: what a checkpoint keeps of its job's request: each
// trajectory's group and reward, messages as sent, choices without logprobs
// but with their token count and fingerprint.
func TestSummarize(t *testing.T) {
	body := `{"model_id": "m", "trajectory_groups": [
		{"trajectories": [{"reward": 0.5, "messages_and_choices": [{"role": "user", "content": "hi"},
			{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "yo"},
			 "logprobs": {"content": [{"token": "token_id:7", "logprob": -0.25}]}}]}]},
		{"trajectories": [{"reward": 1, "additional_histories": [{"messages_and_choices": []}], "messages_and_choices": [
			{"index": 0, "message": {"role": "assistant", "content": "no logprobs"}}]}]}]}`
	req, err := rl.ParseRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(rl.Summarize("job-1", req))
	if err != nil {
		t.Fatal(err)
	}
	fp := rl.ChoiceFingerprint(1, func(int) (string, float64) { return "token_id:7", -0.25 })
	want := `{"job_id":"job-1","trajectories":[` +
		`{"group":0,"reward":0.5,"additional_histories":0,"messages_and_choices":[{"role":"user","content":"hi"},` +
		`{"choice":{"content":"yo","finish_reason":"stop","num_tokens":1,"fingerprint":"` + fp + `"}}],"num_choices":1},` +
		`{"group":1,"reward":1,"additional_histories":1,"messages_and_choices":[` +
		`{"choice":{"content":"no logprobs","num_tokens":0,"fingerprint":""}}],"num_choices":1}]}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
