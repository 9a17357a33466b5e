package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"flywheel/internal/api"
	"flywheel/internal/checkpoints"
	"flywheel/internal/jobs"
	"flywheel/internal/store"
	"flywheel/internal/trace"
)

// testTrainer stands in for the real trainer in tests: it emits the events
// of the contract and writes a checkpoint (a copy of the adapter it trains
// from). When gate is set, each job waits for a value on it (or for
// cancellation) before its first step.
type testTrainer struct {
	gate    chan struct{}
	started chan string // receives job ids as they start, when set
	fail    string      // when set, Train fails with this message

	mu   sync.Mutex
	jobs []jobs.Job
}

func (t *testTrainer) Train(ctx context.Context, j jobs.Job, emit func(jobs.Event) error) (jobs.Result, error) {
	t.mu.Lock()
	t.jobs = append(t.jobs, j)
	t.mu.Unlock()
	if t.started != nil {
		t.started <- j.ID
	}
	if err := emit(jobs.Event{Type: "training_started", Data: map[string]any{"num_sequences": 2}}); err != nil {
		return jobs.Result{}, err
	}
	if t.gate != nil {
		select {
		case <-t.gate:
		case <-ctx.Done():
			return jobs.Result{}, ctx.Err()
		}
	}
	if t.fail != "" {
		return jobs.Result{}, fmt.Errorf("%s", t.fail)
	}
	for step := 1; step <= 2; step++ {
		if err := ctx.Err(); err != nil {
			return jobs.Result{}, err
		}
		if err := emit(jobs.Event{Type: "gradient_step", Data: map[string]any{"gradient_step": step, "loss": 0.5 / float64(step)}}); err != nil {
			return jobs.Result{}, err
		}
	}
	for _, name := range []string{"adapter_config.json", "adapter_model.safetensors"} {
		b, err := os.ReadFile(filepath.Join(j.FromDir, name))
		if err != nil {
			return jobs.Result{}, err
		}
		if err := os.WriteFile(filepath.Join(j.OutDir, name), b, 0o644); err != nil {
			return jobs.Result{}, err
		}
	}
	return jobs.Result{Metrics: map[string]any{"reward": 0.75, "num_trajectories": 2, "note": "text"}}, nil
}

// env is a running server over a temp data dir with two users.
type env struct {
	t        testing.TB
	url      string
	st       store.Database
	q        *jobs.Queue
	dataDir  string
	alice    string // key of alice (entities alice, team)
	bob      string // key of bob (entity bob)
	trainer  *testTrainer
	srv      *http.Server
	shutdown func()
}

type envOpts struct {
	trainer  jobs.Trainer // nil: the testTrainer
	noTrain  bool         // no trainer at all
	maxBody  int64
	workers  int
	extra    []api.Registrar
	noAuthTT bool
	// dataDir is the data dir (default a new temp folder).
	dataDir string
	// maxQueued is the api.Config.MaxQueuedJobsPerUser (0: the default).
	maxQueued int
	// bodyTimeout is the api.Config.BodyReadTimeout (0: the default).
	bodyTimeout time.Duration
	// database is the store's database URL (store.Open); default an
	// SQLite file in the data dir.
	database string
	// wandb mounts the call store's /graphql with the W&B artifact fields
	// (as the app does).
	wandb bool
}

func newEnv(t testing.TB, o envOpts) *env {
	t.Helper()
	dir := o.dataDir
	if dir == "" {
		dir = t.TempDir()
	}
	ctx := context.Background()
	dbURL := o.database
	if dbURL == "" {
		dbURL = filepath.Join(dir, "flywheel.db")
	}
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, st: st, dataDir: dir}
	for _, u := range []string{"alice", "bob"} {
		if _, err := st.EnsureUser(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.AddMembership(ctx, "alice", "team"); err != nil {
		t.Fatal(err)
	}
	_, e.alice, _ = st.CreateKey(ctx, "alice", "", "")
	_, e.bob, _ = st.CreateKey(ctx, "bob", "", "")

	var tr jobs.Trainer
	switch {
	case o.noTrain:
	case o.trainer != nil:
		tr = o.trainer
	default:
		e.trainer = &testTrainer{}
		tr = e.trainer
	}
	modelsDir, _ := filepath.Abs("testdata/models")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	workers := o.workers
	if workers == 0 {
		workers = 2
	}
	ck := checkpoints.New(st, store.Layout{DataDir: dir}, log, st.Shared())
	e.q = jobs.New(st, jobs.Config{DataDir: dir, ModelsDir: modelsDir, Workers: workers, Trainer: tr, Checkpoints: ck, Logger: log,
		PollInterval: 50 * time.Millisecond, Shared: st.Shared()})
	if err := e.q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ttl := time.Duration(0)
	if o.noAuthTT {
		ttl = -1
	}
	extra := o.extra
	var calls *trace.Service
	if o.wandb {
		if calls, err = trace.New(st.DB(), trace.Options{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { calls.Close() })
		extra = append(extra, calls)
	}
	h := api.New(api.Config{Checkpoints: ck, DataDir: dir, ModelsDir: modelsDir, MaxBodyBytes: o.maxBody, Version: "test", Logger: log, AuthCacheTTL: ttl, BodyReadTimeout: o.bodyTimeout, MaxQueuedJobsPerUser: o.maxQueued}, st, e.q, extra...)
	if calls != nil {
		calls.ExtendGraphQL(h.WandBGraphQL)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.srv = &http.Server{Handler: h}
	go e.srv.Serve(ln)
	e.url = "http://" + ln.Addr().String()
	var once sync.Once
	e.shutdown = func() {
		once.Do(func() {
			e.srv.Close()
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			e.q.Shutdown(sctx)
			st.Close()
		})
	}
	t.Cleanup(e.shutdown)
	return e
}

// resp is a decoded JSON response.
type resp struct {
	status int
	header http.Header
	body   map[string]any
	raw    []byte
}

func (r resp) errParam() any { return r.errField("param") }
func (r resp) errCode() any  { return r.errField("code") }
func (r resp) errField(k string) any {
	e, _ := r.body["error"].(map[string]any)
	return e[k]
}

func (e *env) do(method, path, key string, body any) resp {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		data, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return e.send(req)
}

func (e *env) send(req *http.Request) resp {
	e.t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := resp{status: res.StatusCode, header: res.Header, raw: raw}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

// must asserts the status of r.
func (e *env) must(r resp, status int) resp {
	e.t.Helper()
	if r.status != status {
		e.t.Fatalf("status %d, want %d; body %s", r.status, status, r.raw)
	}
	return r
}

// createModel creates a model of alice's and returns its id.
func (e *env) createModel(name string) string {
	e.t.Helper()
	r := e.must(e.do("POST", "/v1/preview/models", e.alice, map[string]any{
		"project": "proj", "name": name, "base_model": "test/base",
		"lora": map[string]any{"rank": 2, "alpha": 4, "target_modules": []string{"q_proj", "v_proj"}},
	}), 200)
	return r.body["id"].(string)
}

// rlBody is a valid RL request body for model id with n groups.
func rlBody(modelID string, groups int) map[string]any {
	var gs []any
	for g := 0; g < groups; g++ {
		var ts []any
		for i := 0; i < 2; i++ {
			ts = append(ts, map[string]any{
				"messages_and_choices": []any{
					map[string]any{"role": "system", "content": "be brief"},
					map[string]any{"role": "user", "content": "2+2?"},
					map[string]any{"index": 0, "finish_reason": "stop",
						"message":  map[string]any{"role": "assistant", "content": "4"},
						"logprobs": map[string]any{"content": []any{map[string]any{"token": "token_id:19", "logprob": -0.25, "bytes": []int{52}, "top_logprobs": []any{}}}}},
				},
				"reward":  float64(i),
				"metrics": map[string]any{"correct": i == 1},
			})
		}
		gs = append(gs, map[string]any{"trajectories": ts, "exceptions": []any{}})
	}
	return map[string]any{"model_id": modelID, "trajectory_groups": gs}
}

// waitJob polls a job until it reaches a final status.
func (e *env) waitJob(key, id string) map[string]any {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		r := e.must(e.do("GET", "/v1/preview/training-jobs/"+id, key, nil), 200)
		switch r.body["status"] {
		case "COMPLETED", "FAILED", "CANCELLED":
			return r.body
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.t.Fatalf("job %s did not finish", id)
	return nil
}

func (e *env) waitStatus(key, id, status string) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		r := e.must(e.do("GET", "/v1/preview/training-jobs/"+id, key, nil), 200)
		if r.body["status"] == status {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.t.Fatalf("job %s never became %s", id, status)
}

// events lists all events of a job, paging with a small limit.
func (e *env) events(key, id string) []map[string]any {
	e.t.Helper()
	var out []map[string]any
	after := ""
	for {
		r := e.must(e.do("GET", "/v1/preview/training-jobs/"+id+"/events?limit=2&after="+after, key, nil), 200)
		for _, d := range r.body["data"].([]any) {
			out = append(out, d.(map[string]any))
		}
		if r.body["has_more"] != true {
			return out
		}
		after = r.body["last_id"].(string)
	}
}
