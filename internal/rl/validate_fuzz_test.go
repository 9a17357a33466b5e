package rl

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"flywheel/internal/httpx"
)

var fuzzSeeds = []string{
	`{"model_id": "m", "trajectory_groups": [{"trajectories": [{"messages_and_choices": [{"role": "user", "content": "hi"}, {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "yo"}, "logprobs": {"content": [{"token": "token_id:3", "logprob": -0.5}]}}], "reward": 1}]}]}`,
	`{"model_id": "m", "trajectory_groups": [{"trajectories": [{"messages_and_choices": [{"content": "x"}], "reward": 1}]}]}`,
	`{"model_id": "m", "trajectory_groups": [], "experimental_config": {"epsilon": -1}}`,
	`{"model_id": "m", "trajectory_groups": [{"trajectories": [{"messages_and_choices": [], "reward": 1e999}]}]}`,
	`{"mo\u0064el_id": "m", "trajectory_groups": [{"trajectories": [{"messages_and_choices": [], "reward": -0.5e-3, "tools": null, "additional_histories": [{"messages_and_choices": []}]}]}]}`,
	`[1, 2, {"a": "\ud83d\ude00"}]`,
	`{"a": [[[[[[[[]]]]]]]]}`,
	`{"model_id": "m", "trajectory_groups": [{"trajectories": [{"messages_and_choices": [{"message": {"role": 3}}], "reward": 0}]}]}`,
	`{"model_id": "m", "trajectory_groups": [{"trajectories": [{"exchanges": {"chat_completions": [{"start_time": "2026-01-01T00:00:00Z", "end_time": "2026-01-01T00:00:01Z", "request": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}, "response": {"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "yo"}, "logprobs": {"content": [{"token": "token_id:3", "logprob": -0.5}]}}]}}]}}]}]}`,
	``, `{`, `"`, `{"model_id": "\`,
}

// FuzzValidateRL checks that decoding and validating a training-job request
// never panics, that every error is a 400 *httpx.Error, and that the
// scanner agrees with encoding/json on what is valid JSON.
func FuzzValidateRL(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := Validate(data)
		checkStreamAgrees(t, data, req, err)
		if err != nil {
			var he *httpx.Error
			if !errors.As(err, &he) || he.Status != 400 || he.Message == "" {
				t.Fatalf("error %v is not a 400 *httpx.Error", err)
			}
			if he.Code == "invalid_json" && json.Valid(data) {
				t.Fatalf("scanner says malformed, encoding/json says valid: %q: %v", data, err)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("scanner accepted invalid JSON %q", data)
		}
		if req.ModelID == "" || req.Groups == 0 || req.Trajectories == 0 {
			t.Fatalf("accepted without model or trajectories: %+v", req)
		}
		if req.ExperimentalConfig != nil {
			if !json.Valid(req.ExperimentalConfig) {
				t.Fatalf("experimental_config slice is not JSON: %q", req.ExperimentalConfig)
			}
			if _, err := recordConfig(req.ExperimentalConfig, realModelLearningRate); err != nil {
				var he *httpx.Error
				if !errors.As(err, &he) || he.Status != 400 || !strings.HasPrefix(he.Param, "experimental_config") {
					t.Fatalf("experimental_config error %v is not a 400 *httpx.Error naming its path", err)
				}
			}
		}
	})
}

func TestScannerMatchesEncodingJSON(t *testing.T) {
	// Syntax corner cases, compared with encoding/json's verdict.
	for _, s := range []string{
		`{"model_id": "m", "trajectory_groups": [{"trajectories": [{"messages_and_choices": [], "reward": 01}]}]}`,
		`{"model_id": "m", "trajectory_groups": [{"trajectories": [{"messages_and_choices": [], "reward": 1.}]}]}`,
		`{"model_id": "m", "trajectory_groups": [{"trajectories": [{"messages_and_choices": [], "reward": -}]}]}`,
		`{"model_id": "m", "trajectory_groups": [{"trajectories": [{"messages_and_choices": [], "reward": 1, }]}]}`,
		`{"model_id": "m\x01", "trajectory_groups": []}`,
		`{"model_id": "m\q", "trajectory_groups": []}`,
		`{"model_id": "m", "trajectory_groups": [{"trajectories": [{"messages_and_choices": [], "reward": 1, "x": tru}]}]}`,
		`{"model_id": "m", "trajectory_groups": [{"trajectories": [{"messages_and_choices": [], "reward": 2E+3, "x": [1,]}]}]}`,
	} {
		_, err := Validate([]byte(s))
		if json.Valid([]byte(s)) {
			continue
		}
		var he *httpx.Error
		if !errors.As(err, &he) || he.Code != "invalid_json" {
			t.Errorf("%s: got %v, want invalid_json", s, err)
		}
	}
}

// streamRL runs ValidateStream with the body arriving step bytes at a
// time and a window of ahead bytes.
func streamRL(data []byte, step, ahead int) (Summary, error) {
	arrived := make(chan int, len(data)/step+2)
	go func() {
		for n := step; ; n += step {
			arrived <- min(n, len(data))
			if n >= len(data) {
				close(arrived)
				return
			}
		}
	}()
	return validateStreamAhead(data, arrived, ahead)
}

// checkStreamAgrees checks that validating data while it arrives, in small
// steps and with a small window (tokens cut at the window edge), gives
// exactly Validate's result on the whole body.
func checkStreamAgrees(t *testing.T, data []byte, want Summary, wantErr error) {
	t.Helper()
	for _, c := range []struct{ step, ahead int }{{1, 1}, {3, 2}, {7, 16}, {64, 5}} {
		got, err := streamRL(data, c.step, c.ahead)
		if !sameRL(got, err, want, wantErr) {
			t.Fatalf("streamed (step %d, window %d) %q: got %+v, %v; want %+v, %v", c.step, c.ahead, data, got, err, want, wantErr)
		}
	}
}

// TestValidateRLStreamAgrees runs checkStreamAgrees on the fuzz seeds, the
// syntax corner cases, and a real payload cut into 4 KB steps.
func TestValidateRLStreamAgrees(t *testing.T) {
	for _, s := range fuzzSeeds {
		req, err := Validate([]byte(s))
		checkStreamAgrees(t, []byte(s), req, err)
	}
	data := benchPayload()[:1<<20]
	data = append(data[:len(data):len(data)], "]}]}]}"...) // cut mid-payload: an error deep inside
	for _, d := range [][]byte{benchPayload(), data} {
		want, wantErr := Validate(d)
		for _, ahead := range []int{1, 100, 4096} {
			got, err := streamRL(d, 4096, ahead)
			if !sameRL(got, err, want, wantErr) {
				t.Fatalf("window %d: got %+v, %v; want %+v, %v", ahead, got, err, want, wantErr)
			}
		}
	}
}

// sameRL reports whether two validation results are identical.
func sameRL(a Summary, aErr error, b Summary, bErr error) bool {
	return fmt.Sprint(aErr) == fmt.Sprint(bErr) && a.ModelID == b.ModelID && a.Groups == b.Groups &&
		a.Trajectories == b.Trajectories && string(a.ExperimentalConfig) == string(b.ExperimentalConfig)
}
