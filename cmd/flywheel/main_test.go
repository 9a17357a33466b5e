package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"flywheel/internal/jobs"
	"flywheel/internal/pgtest"
	"flywheel/internal/serve"
	"flywheel/internal/store"
)

// TestMain doubles as the server process of the restart tests: with
// FLYWHEEL_TEST_CHILD set, the test binary runs "flywheel serve ARGS" with
// a slow stand-in trainer instead of running tests.
func TestMain(m *testing.M) {
	if os.Getenv("FLYWHEEL_TEST_CHILD") == "1" {
		os.Exit(serveSlowTrainer(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// serveSlowTrainer is serveCmd with slowTrainer as the trainer.
func serveSlowTrainer(args []string) int {
	c, err := parseServe(args, os.Stderr)
	if err == nil {
		c.app.Trainer = slowTrainer{}
		err = c.serve(os.Stderr)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "flywheel serve: %v\n", err)
		return 1
	}
	return 0
}

// slowTrainer takes 3 steps of 150 ms per job and writes a checkpoint.
type slowTrainer struct{}

func (slowTrainer) Train(ctx context.Context, j jobs.Job, emit func(jobs.Event) error) (jobs.Result, error) {
	if err := emit(jobs.Event{Type: "training_started", Data: map[string]any{"num_sequences": 3}}); err != nil {
		return jobs.Result{}, err
	}
	for step := 1; step <= 3; step++ {
		select {
		case <-time.After(150 * time.Millisecond):
		case <-ctx.Done():
			return jobs.Result{}, ctx.Err()
		}
		if err := emit(jobs.Event{Type: "gradient_step", Data: map[string]any{"gradient_step": step}}); err != nil {
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
	return jobs.Result{}, nil
}

const testKey = "fw_test_bootstrap_key_0123456789"

type child struct {
	cmd *exec.Cmd
	url string
	out *syncBuffer
}

// syncBuffer is a process's output, read while the process writes it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// buildBinary builds the flywheel command into dir and returns its path.
func buildBinary(t testing.TB, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "flywheel")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func freeAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startServer runs the test binary as "flywheel serve" on a free port.
func startServer(t *testing.T, dataDir, modelsDir string) *child {
	t.Helper()
	return startProcess(t, os.Args[0], []string{"FLYWHEEL_TEST_CHILD=1"}, dataDir, modelsDir)
}

// startProcess runs bin as "flywheel serve" on a free port with the
// bootstrap key testKey and the extra environment env, and waits until it
// answers /v1/health.
func startProcess(t testing.TB, bin string, env []string, dataDir, modelsDir string) *child {
	t.Helper()
	addr := freeAddr(t)
	cmd := exec.Command(bin, "serve", "--addr", addr, "--data-dir", dataDir, "--models-dir", modelsDir, "--workers", "2")
	cmd.Env = append(append(os.Environ(), env...), "FLYWHEEL_BOOTSTRAP_API_KEY="+testKey)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, url: "http://" + addr, out: out}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if res, err := http.Get(c.url + "/v1/health"); err == nil {
			res.Body.Close()
			return c
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("server did not start: %s", out)
	return nil
}

func call(t testing.TB, method, url string, body any) map[string]any {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Authorization", "Bearer "+testKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(raw, &out); err != nil || res.StatusCode != 200 {
		t.Fatalf("%s %s: %d %s", method, url, res.StatusCode, raw)
	}
	return out
}

func rlJob(modelID string) map[string]any {
	return map[string]any{"model_id": modelID, "trajectory_groups": []any{map[string]any{"trajectories": []any{
		map[string]any{"messages_and_choices": []any{map[string]any{"role": "user", "content": "hi"}}, "reward": 1},
		map[string]any{"messages_and_choices": []any{map[string]any{"role": "user", "content": "hi"}}, "reward": 0},
	}}}}
}

func jobStatus(t *testing.T, c *child, id string) string {
	return call(t, "GET", c.url+"/v1/preview/training-jobs/"+id, nil)["status"].(string)
}

// TestKill9MidQueue kills the server process while a job runs and others
// wait, restarts it on the same data dir, and checks that every job
// completes exactly once, in order, with no checkpoint lost or doubled.
func TestKill9MidQueue(t *testing.T) {
	dataDir, modelsDir := t.TempDir(), t.TempDir()
	a := startServer(t, dataDir, modelsDir)
	model := call(t, "POST", a.url+"/v1/preview/models", map[string]any{"project": "p", "name": "m", "base_model": "flywheel/tiny"})
	modelID := model["id"].(string)
	var ids []string
	for i := 0; i < 3; i++ {
		ids = append(ids, call(t, "POST", a.url+"/v1/preview/training-jobs", rlJob(modelID))["id"].(string))
	}
	deadline := time.Now().Add(20 * time.Second)
	for jobStatus(t, a, ids[0]) != "RUNNING" {
		if time.Now().After(deadline) {
			t.Fatalf("first job never ran: %s", a.out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.cmd.Wait()

	b := startServer(t, dataDir, modelsDir)
	for i, id := range ids {
		deadline := time.Now().Add(30 * time.Second)
		for {
			st := jobStatus(t, b, id)
			if st == "COMPLETED" {
				break
			}
			if st == "FAILED" || st == "CANCELLED" || time.Now().After(deadline) {
				t.Fatalf("job %d: %s; log:\n%s", i, st, b.out)
			}
			time.Sleep(20 * time.Millisecond)
		}
		job := call(t, "GET", b.url+"/v1/preview/training-jobs/"+id, nil)
		if job["from_step"] != float64(i) || job["to_step"] != float64(i+1) {
			t.Errorf("job %d: from %v to %v", i, job["from_step"], job["to_step"])
		}
		evs := call(t, "GET", b.url+"/v1/preview/training-jobs/"+id+"/events?limit=100", nil)["data"].([]any)
		var types []string
		for _, e := range evs {
			types = append(types, e.(map[string]any)["type"].(string))
		}
		if got := strings.Join(types, ","); got != "training_started,gradient_step,gradient_step,gradient_step,training_ended" {
			t.Errorf("job %d events: %s", i, got)
		}
	}
	cks := call(t, "GET", b.url+"/v1/preview/models/"+modelID+"/checkpoints?limit=100", nil)["data"].([]any)
	if len(cks) != 4 {
		t.Fatalf("%d checkpoints, want 4", len(cks))
	}
	for i, c := range cks {
		if c.(map[string]any)["step"] != float64(i) {
			t.Errorf("checkpoint %d: %v", i, c)
		}
		if _, err := os.Stat(filepath.Join(dataDir, "checkpoints", modelID, fmt.Sprintf("step-%d", i), "adapter_model.safetensors")); err != nil {
			t.Errorf("step %d files: %v", i, err)
		}
	}
	leftovers, _ := filepath.Glob(filepath.Join(dataDir, "checkpoints", modelID, ".tmp-*"))
	if len(leftovers) != 0 {
		t.Errorf("work dirs left: %v", leftovers)
	}

	// SIGTERM mid-job: a clean exit, and the job is back in the queue.
	id := call(t, "POST", b.url+"/v1/preview/training-jobs", rlJob(modelID))["id"].(string)
	for jobStatus(t, b, id) != "RUNNING" {
		time.Sleep(10 * time.Millisecond)
	}
	b.cmd.Process.Signal(syscall.SIGTERM)
	if err := b.cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, b.out)
	}
	st, err := store.OpenSQLite(context.Background(), filepath.Join(dataDir, "flywheel.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	j, err := st.JobByID(context.Background(), id)
	if err != nil || j.Status != store.StatusQueued {
		t.Errorf("after SIGTERM the job is %s (%v)", j.Status, err)
	}
}

func TestKeysCommands(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if code := run([]string{"keys", "create", "--data-dir", dir, "--user", "carol", "--entity", "lab"}, &out, &errb); code != 0 {
		t.Fatalf("keys create: %d %s", code, errb.String())
	}
	key := strings.TrimSpace(out.String())
	if !strings.HasPrefix(key, "fw_") || strings.Contains(key, "\n") {
		t.Fatalf("keys create printed %q", out.String())
	}
	st, err := store.OpenSQLite(context.Background(), filepath.Join(dir, "flywheel.db"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := st.Authenticate(context.Background(), key)
	st.Close()
	if err != nil || !p.Member("carol") || !p.Member("lab") {
		t.Fatalf("created key: %+v %v", p, err)
	}

	out.Reset()
	if code := run([]string{"keys", "list", "--data-dir", dir}, &out, &errb); code != 0 {
		t.Fatalf("keys list: %d %s", code, errb.String())
	}
	if strings.Contains(out.String(), key) || !strings.Contains(out.String(), key[:store.KeyPrefixLen]) || !strings.Contains(out.String(), "carol") {
		t.Errorf("keys list:\n%s", out.String())
	}
	out.Reset()
	if code := run([]string{"keys", "revoke", "--data-dir", dir, key[:store.KeyPrefixLen]}, &out, &errb); code != 0 {
		t.Fatalf("keys revoke: %d %s", code, errb.String())
	}
	if code := run([]string{"keys", "revoke", "--data-dir", dir, key[:store.KeyPrefixLen]}, &out, &errb); code != 1 {
		t.Errorf("revoking twice exits %d", code)
	}
	if code := run([]string{"keys", "create", "--data-dir", dir}, &out, &errb); code != 2 {
		t.Errorf("keys create without --user exits %d", code)
	}
	out.Reset()
	if code := run([]string{"version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "flywheel ") {
		t.Errorf("version: %d %q", code, out.String())
	}
	if code := run([]string{"bogus"}, &out, &errb); code != 2 {
		t.Errorf("unknown command exits %d", code)
	}
}

// TestServeFlags checks that the scheduler flags and their environment
// variables reach the inference options, and that the defaults leave them
// to the scheduler.
func TestServeFlags(t *testing.T) {
	var errb bytes.Buffer
	c, err := parseServe(nil, &errb)
	if err != nil {
		t.Fatal(err, errb.String())
	}
	if got := c.app.Serve; got.MaxBatch != 0 || got.MaxQueue != 0 || got.AdapterCacheSize != 0 || got.PrefillChunk != 0 || got.PrefixCacheMB != serve.DefaultPrefixCacheMB {
		t.Errorf("defaults: %+v", got)
	}
	if c, _ := parseServe([]string{"--prefix-cache-mb", "0"}, &errb); c.app.Serve.PrefixCacheMB >= 0 {
		t.Errorf("--prefix-cache-mb 0 should turn the cache off, got PrefixCacheMB %d", c.app.Serve.PrefixCacheMB)
	}
	if c, _ := parseServe([]string{"--prefix-cache-mb", "64"}, &errb); c.app.Serve.PrefixCacheMB != 64 {
		t.Errorf("--prefix-cache-mb 64: PrefixCacheMB %d", c.app.Serve.PrefixCacheMB)
	}
	c, err = parseServe([]string{"--max-batch", "8", "--max-queue", "64", "--adapter-cache", "3", "--prefill-chunk", "128",
		"--workers", "5", "--data-dir", "/tmp/d", "--models-dir", "/tmp/m"}, &errb)
	if err != nil {
		t.Fatal(err, errb.String())
	}
	if got := c.app.Serve; got.MaxBatch != 8 || got.MaxQueue != 64 || got.AdapterCacheSize != 3 || got.PrefillChunk != 128 {
		t.Errorf("flags: %+v", got)
	}
	if c.app.Workers != 5 || c.app.DataDir != "/tmp/d" || c.app.ModelsDir != "/tmp/m" {
		t.Errorf("flags: %+v", c.app)
	}
	t.Setenv("FLYWHEEL_MAX_BATCH", "4")
	t.Setenv("FLYWHEEL_ADAPTER_CACHE", "2")
	t.Setenv("FLYWHEEL_TOKENS_PER_STEP", "1024")
	c, err = parseServe([]string{"--adapter-cache", "9"}, &errb)
	if err != nil {
		t.Fatal(err)
	}
	if c.app.Serve.MaxBatch != 4 || c.app.Serve.AdapterCacheSize != 9 || c.app.TokensPerStep != 1024 {
		t.Errorf("environment (a flag wins over its variable): %+v, tokens per step %d", c.app.Serve, c.app.TokensPerStep)
	}
	if _, err := parseServe([]string{"--max-queue", "-1"}, &errb); err == nil || !strings.Contains(err.Error(), "--max-queue") {
		t.Errorf("negative --max-queue: %v", err)
	}
	// Scale-out: --workers 0 is an API-only node; the lease flags; the
	// database from FLYWHEEL_DATABASE.
	t.Setenv("FLYWHEEL_DATABASE", "postgres://u@h:5432/db")
	c, err = parseServe([]string{"--workers", "0", "--lease-timeout", "5s", "--node-id", "n1"}, &errb)
	if err != nil {
		t.Fatal(err)
	}
	if c.app.Workers != 0 || c.app.LeaseTimeout != 5*time.Second || c.app.NodeID != "n1" || c.app.Database != "postgres://u@h:5432/db" {
		t.Errorf("scale-out flags: workers %d, lease %s, node %q, database %q", c.app.Workers, c.app.LeaseTimeout, c.app.NodeID, c.app.Database)
	}
	if _, err := parseServe([]string{"--lease-timeout", "10ms"}, &errb); err == nil || !strings.Contains(err.Error(), "--lease-timeout") {
		t.Errorf("a lease timeout under a second: %v", err)
	}
	errb.Reset()
	if _, err := parseServe([]string{"-h"}, &errb); err != errUsage || !strings.Contains(errb.String(), "-prefill-chunk") {
		t.Errorf("help: %v %q", err, errb.String())
	}
}

// `flywheel keys` manages the keys of a PostgreSQL database the same way,
// from any machine that reaches it.
func TestKeysCommandsPostgres(t *testing.T) {
	dsn := pgtest.DSN(t)
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if code := run([]string{"keys", "create", "--data-dir", dir, "--database", dsn, "--user", "carol"}, &out, &errb); code != 0 {
		t.Fatalf("keys create: %d %s", code, errb.String())
	}
	key := strings.TrimSpace(out.String())
	st, err := store.OpenPostgres(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if p, err := st.Authenticate(context.Background(), key); err != nil || p.UserName != "carol" {
		t.Fatalf("created key: %+v %v", p, err)
	}
	t.Setenv("FLYWHEEL_DATABASE", dsn)
	if code := run([]string{"keys", "revoke", "--data-dir", dir, key[:store.KeyPrefixLen]}, &out, &errb); code != 0 {
		t.Fatalf("keys revoke: %d %s", code, errb.String())
	}
	if _, err := st.Authenticate(context.Background(), key); err == nil {
		t.Error("a revoked key authenticates")
	}
	if _, err := os.Stat(filepath.Join(dir, "flywheel.db")); err == nil {
		t.Error("an SQLite database was created beside PostgreSQL")
	}
}
