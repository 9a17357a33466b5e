package demo

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

func TestReward(t *testing.T) {
	if r := Reward("ee a\nb", 'e'); r != 0.5 {
		t.Fatalf("reward %v", r)
	}
	if Reward("", 'e') != 0 {
		t.Fatal("empty reply")
	}
}

// The demo's HTTP conversation against a fake server: model creation,
// sampling with logprobs and token ids, job submission, event following.
func TestDemoAgainstFakeServer(t *testing.T) {
	var mu sync.Mutex
	jobs := 0
	step := 0
	mux := http.NewServeMux()
	auth := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer k" {
				w.WriteHeader(401)
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("POST /v1/preview/models", auth(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"id": "mid", "entity": "me", "project": "demo", "name": "x", "base_model": "flywheel/tiny"})
	}))
	mux.HandleFunc("POST /v1/chat/completions", auth(func(w http.ResponseWriter, r *http.Request) {
		var req map[string]any
		json.NewDecoder(r.Body).Decode(&req)
		if req["model"] != "me/demo/x" || req["logprobs"] != true || req["return_tokens_as_token_ids"] != true {
			w.WriteHeader(400)
			return
		}
		mu.Lock()
		content := strings.Repeat("e", step) + strings.Repeat("x", 4-step)
		mu.Unlock()
		json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{
			"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": content},
			"logprobs": map[string]any{"content": []any{map[string]any{"token": "token_id:5", "logprob": -1.0}}}}}})
	}))
	mux.HandleFunc("POST /v1/preview/training-jobs", auth(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ModelID          string `json:"model_id"`
			TrajectoryGroups []struct {
				Trajectories []map[string]any `json:"trajectories"`
			} `json:"trajectory_groups"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		if req.ModelID != "mid" || len(req.TrajectoryGroups) != 2 || len(req.TrajectoryGroups[0].Trajectories) != 3 {
			w.WriteHeader(400)
			return
		}
		mu.Lock()
		jobs++
		step++
		mu.Unlock()
		json.NewEncoder(w).Encode(map[string]any{"id": "job"})
	}))
	mux.HandleFunc("GET /v1/preview/training-jobs/job/events", auth(func(w http.ResponseWriter, r *http.Request) {
		evs := []any{
			map[string]any{"id": "1", "type": "training_started", "data": map[string]any{"num_sequences": 1}},
			map[string]any{"id": "2", "type": "gradient_step", "data": map[string]any{"loss": 0.1}},
			map[string]any{"id": "3", "type": "training_ended", "data": map[string]any{"step": 1}},
		}
		if r.URL.Query().Get("after") != "" {
			evs = nil
		}
		json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": evs, "has_more": false})
	}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	var out bytes.Buffer
	res, err := RunConfig(t.Context(), Config{URL: srv.URL, APIKey: "k", Project: "demo", Name: "x", Steps: 3,
		Groups: 2, PerGroup: 3, MaxTokens: 4, Temperature: 1, Target: 'e'}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if jobs != 3 || len(res.Rewards) != 4 || res.Rewards[0] != 0 || res.Rewards[3] != 0.75 {
		t.Fatalf("jobs %d rewards %v\n%s", jobs, res.Rewards, out.String())
	}
	if !strings.Contains(out.String(), "1/1 gradient steps") {
		t.Fatalf("no progress bar:\n%s", out.String())
	}
	t.Log("\n" + out.String())
}
