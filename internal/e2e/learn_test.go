// Package e2e holds end-to-end tests that run the whole service in process,
// built by app.New exactly as `flywheel serve` builds it (store, API, job
// queue with the real trainer, chat completions, call store), and talk to it
// over HTTP like a client.
package e2e

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"flywheel/internal/app"
	"flywheel/internal/demo"
	"flywheel/internal/engine/tiny"
	"flywheel/internal/jobs"
)

// testKey is the bootstrap key of user admin in the tests' service.
const testKey = "fw_e2e_bootstrap_key_0123456789"

// server builds the service with app.New, as `flywheel serve` does (the
// real trainer, the call store, flywheel/tiny as it ships), on a temp data
// dir, serves it over HTTP and returns its URL and an API key.
func server(t *testing.T) (string, string) { return serverIn(t, t.TempDir()) }

// serverBF16 is server with flywheel/tiny stored in BF16 (the same weights
// rounded), which the engine keeps in BF16 for serving and training.
func serverBF16(t *testing.T) (string, string) {
	dir := t.TempDir()
	spec := tiny.DefaultSpec()
	spec.DType = "BF16"
	if err := tiny.Write(filepath.Join(dir, "models", filepath.FromSlash(tiny.ID)), spec); err != nil {
		t.Fatal(err)
	}
	return serverIn(t, dir)
}

func serverIn(t *testing.T, dir string) (string, string) {
	a, err := app.New(t.Context(), app.Config{DataDir: filepath.Join(dir, "data"), ModelsDir: filepath.Join(dir, "models"), Workers: jobs.DefaultWorkers,
		BootstrapKey: testKey, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(func() {
		srv.Close()
		a.Close()
	})
	return srv.URL, testKey
}

// The "see it learn" loop over HTTP: the mean reward over 8 sampled groups
// rises clearly within a bounded number of training jobs (25 jobs, ~9 s),
// on flywheel/tiny as shipped (F32) and stored in BF16.
func TestDemoLearnsOverHTTP(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("learning run skipped under -race / -short")
	}
	t.Run("f32", func(t *testing.T) { demoLearns(t, server) })
	t.Run("bf16", func(t *testing.T) { demoLearns(t, serverBF16) })
}

func demoLearns(t *testing.T, server func(*testing.T) (string, string)) {
	url, key := server(t)
	var out bytes.Buffer
	res, err := demo.RunConfig(t.Context(), demo.Config{URL: url, APIKey: key, Project: "e2e", Name: "learner",
		Steps: 25, Groups: 8, PerGroup: 8, MaxTokens: 16, Temperature: 1, Target: 'e', Seed: 1}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	r := res.Rewards
	first, last := (r[0]+r[1])/2, (r[len(r)-1]+r[len(r)-2])/2
	// The policy collapses onto one repeated token; which one (its share of
	// "e": 0.25 to 1.0) depends on the seed, which fixes the untrained
	// adapter (lora.seed) and every sampling request's seed. The bar is
	// below the lowest plateau's rise: from ~0.125 by at least 0.1. Demo
	// seeds 1..16 at the default learning rate: 16 of 16 pass for F32
	// (smallest rise 0.127, seed 1) and 16 of 16 for BF16 (0.128). Seed 1
	// again: F32 0.127 in 7 of 7 runs; BF16 0.203, 0.360 or 0.52 in 17 runs
	// — the logprobs of a sequence change in their last bits with what it is
	// batched with (more than 16 rows take the blocked GEMM), which the
	// BF16 run amplifies into other samples.
	if last < first+0.1 {
		t.Fatalf("mean reward did not rise clearly: %.3f -> %.3f", first, last)
	}
}

// One training job through the whole service (also under -race): the job
// completes, emits its events in order and adds checkpoint 1.
func TestTrainingJobOverHTTP(t *testing.T) {
	url, key := server(t)
	var out bytes.Buffer
	res, err := demo.RunConfig(t.Context(), demo.Config{URL: url, APIKey: key, Project: "e2e", Name: "one",
		Steps: 1, Groups: 2, PerGroup: 3, MaxTokens: 4, Temperature: 1, Target: 'e'}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var cks struct {
		Data []struct {
			Step    int                `json:"step"`
			Metrics map[string]float64 `json:"metrics"`
		} `json:"data"`
	}
	getJSON(t, url+"/v1/preview/models/"+res.ModelID+"/checkpoints?order=desc&limit=1", key, &cks)
	if len(cks.Data) != 1 || cks.Data[0].Step != 1 {
		t.Fatalf("checkpoints: %+v", cks)
	}
	if _, ok := cks.Data[0].Metrics["reward"]; !ok {
		t.Fatalf("checkpoint metrics lack reward: %+v", cks.Data[0].Metrics)
	}

	// The shipped wiring records completions in the call store.
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(
		`{"model": "flywheel/tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}`))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("x-call-id") == "" {
		t.Errorf("chat completion: %d, x-call-id %q", resp.StatusCode, resp.Header.Get("x-call-id"))
	}
}

func getJSON(t *testing.T, url, key string, out any) {
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}
