package api_test

import (
	"bytes"
	"encoding/json"
	"flywheel/internal/cputime"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"flywheel/internal/pgtest"
)

// payload builds an RL training-job body of at least size bytes shaped like
// real client traffic: groups of 8 trajectories, each a system and user
// message and a sampled choice with per-token logprobs.
func payload(modelID string, size int) []byte {
	var b bytes.Buffer
	b.Grow(size + 64<<10)
	fmt.Fprintf(&b, `{"model_id": %q, "experimental_config": {"learning_rate": 1e-5, "ppo": false}, "trajectory_groups": [`, modelID)
	words := strings.Fields("the quick brown fox jumps over the lazy dog and then some more tokens appear here")
	for g := 0; b.Len() < size; g++ {
		if g > 0 {
			b.WriteString(", ")
		}
		b.WriteString(`{"trajectories": [`)
		for i := 0; i < 8; i++ {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(`{"messages_and_choices": [{"role": "system", "content": "You are a careful assistant. Answer briefly."}, {"role": "user", "content": "What is `)
			fmt.Fprintf(&b, "%d + %d", g, i)
			b.WriteString(`?"}, {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "`)
			for t := 0; t < 48; t++ {
				b.WriteString(words[(g+i+t)%len(words)])
				b.WriteByte(' ')
			}
			b.WriteString(`"}, "logprobs": {"content": [`)
			for t := 0; t < 48; t++ {
				if t > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, `{"token": "token_id:%d", "logprob": -%d.%04d, "bytes": [116, 104, 101], "top_logprobs": []}`, 1000+t*7+i, t%3, (g*31+t*17)%10000)
			}
			fmt.Fprintf(&b, `]}}], "reward": %d.%d, "metrics": {"correct": %t}, "metadata": {"step": %d}}`, i%2, g%10, i%2 == 0, g)
		}
		b.WriteString(`], "exceptions": []}`)
	}
	b.WriteString("]}")
	return b.Bytes()
}

// BenchmarkCreateTrainingJob50MB measures POST /v1/preview/training-jobs
// with a 50 MB trajectory payload: read, decode and validate, persist the
// request and queue the job (no network; the handler is called directly),
// over SQLite and over PostgreSQL (internal/pgtest).
func BenchmarkCreateTrainingJob50MB(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) { benchCreateTrainingJob50MB(b, "") })
	b.Run("postgres", func(b *testing.B) { benchCreateTrainingJob50MB(b, pgtest.DSN(b)) })
}

func benchCreateTrainingJob50MB(b *testing.B, database string) {
	e := newEnv(b, envOpts{noTrain: true, workers: 1, database: database})
	id := createModelB(b, e)
	body := payload(id, 50<<20)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cputime.Used()
	for i := 0; i < b.N; i++ {
		req := httptest.NewRequest("POST", "/v1/preview/training-jobs", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+e.alice)
		rec := httptest.NewRecorder()
		e.srv.Handler.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d: %s", rec.Code, rec.Body.String())
		}
	}
	b.ReportMetric(float64(len(body))*float64(b.N)/1e6/(cputime.Used()-cpu0).Seconds(), "MB/cpu-s")
}

func createModelB(b *testing.B, e *env) string {
	req := httptest.NewRequest("POST", "/v1/preview/models", strings.NewReader(`{"project": "p", "name": "m", "base_model": "test/base", "lora": {"rank": 2, "alpha": 4, "target_modules": ["q_proj"]}}`))
	req.Header.Set("Authorization", "Bearer "+e.alice)
	rec := httptest.NewRecorder()
	e.srv.Handler.ServeHTTP(rec, req)
	if rec.Code != 200 {
		b.Fatalf("create model: %d %s", rec.Code, rec.Body.String())
	}
	var out struct{ ID string }
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		b.Fatal(err)
	}
	return out.ID
}

// TestLargePayloadMemory checks the memory bound of the benchmark's
// operation: creating a job from an 8 MB payload allocates less than 2x the
// payload (the body buffer itself is 1x; validation allocates nothing per
// byte), far under the 4x budget.
func TestLargePayloadMemory(t *testing.T) {
	e := newEnv(t, envOpts{noTrain: true, workers: 1})
	id := e.createModel("m")
	body := payload(id, 8<<20)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	req := httptest.NewRequest("POST", "/v1/preview/training-jobs", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.alice)
	rec := httptest.NewRecorder()
	e.srv.Handler.ServeHTTP(rec, req)
	runtime.ReadMemStats(&after)
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	if ratio := float64(alloc) / float64(len(body)); ratio > 2 {
		t.Errorf("allocated %d bytes for a %d-byte payload (%.2fx)", alloc, len(body), ratio)
	}
}
