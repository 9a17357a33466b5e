package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"flywheel/internal/pgtest"
)

// node is a `flywheel serve` process of the multi-node test.
type node struct {
	t    *testing.T
	cmd  *exec.Cmd
	url  string
	out  *bytes.Buffer
	args []string
	// exited is closed when the process has exited (and been waited for).
	exited <-chan struct{}
}

// startNode runs the built binary as one node of a cluster.
func startNode(t *testing.T, bin string, args ...string) *node {
	t.Helper()
	addr := freeAddr(t)
	n := &node{t: t, url: "http://" + addr, out: &bytes.Buffer{}, args: append([]string{"serve", "--addr", addr}, args...)}
	n.cmd = exec.Command(bin, n.args...)
	// Small packing budget: the job below takes many gradient steps, for
	// seconds, on flywheel/tiny.
	n.cmd.Env = append(os.Environ(), "FLYWHEEL_BOOTSTRAP_API_KEY="+testKey, "FLYWHEEL_TOKENS_PER_STEP=64")
	n.cmd.Stdout, n.cmd.Stderr = n.out, n.out
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { n.cmd.Wait(); close(exited) }()
	n.exited = exited
	t.Cleanup(func() { n.cmd.Process.Kill(); <-exited })
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if res, err := http.Get(n.url + "/v1/health"); err == nil {
			res.Body.Close()
			return n
		}
		select {
		case <-exited:
			t.Fatalf("node exited: %s", n.out)
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("node did not start: %s", n.out)
	return nil
}

func (n *node) call(method, path string, body any) map[string]any {
	n.t.Helper()
	return call(n.t, method, n.url+path, body)
}

// sample runs a short chat completion of model on the node.
func (n *node) sample(model string) string {
	n.t.Helper()
	out := n.call("POST", "/v1/chat/completions", map[string]any{"model": model, "max_tokens": 4,
		"messages": []any{map[string]any{"role": "user", "content": "Say hi"}}})
	choices, _ := out["choices"].([]any)
	if len(choices) != 1 || out["model"] != model {
		n.t.Fatalf("completion of %s: %v", model, out)
	}
	return model
}

// longRLJob is an RL job of 192 trajectories with long prompts: with 64
// tokens per step it trains for seconds on flywheel/tiny.
func longRLJob(modelID string) map[string]any {
	traj := func(reward float64, content string, tok int, lp float64) map[string]any {
		return map[string]any{"reward": reward, "messages_and_choices": []any{
			map[string]any{"role": "user", "content": strings.Repeat("Say hi ", 40)},
			map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": content},
				"logprobs": map[string]any{"content": []any{map[string]any{"token": fmt.Sprintf("token_id:%d", tok), "logprob": lp}}}},
		}}
	}
	var groups []any
	for range 96 {
		groups = append(groups, map[string]any{"trajectories": []any{traj(1, "hi", 364, -0.3), traj(0, "no", 853, -1.7)}})
	}
	return map[string]any{"model_id": modelID, "trajectory_groups": groups}
}

// events lists all of a job's event types in order.
func (n *node) events(id string) []string {
	n.t.Helper()
	var types []string
	after := ""
	for {
		page := n.call("GET", "/v1/preview/training-jobs/"+id+"/events?limit=100"+after, nil)
		data := page["data"].([]any)
		for _, e := range data {
			types = append(types, e.(map[string]any)["type"].(string))
		}
		if more, _ := page["has_more"].(bool); !more || len(data) == 0 {
			return types
		}
		after = "&after=" + data[len(data)-1].(map[string]any)["id"].(string)
	}
}

// TestTwoNodesSurviveKill9 runs two `flywheel serve` processes on one
// PostgreSQL database and one data dir: a model created on node A samples
// on node B; a long training job runs on one of them when that node is
// killed with kill -9; the other completes it once the dead node's lease
// expires, with exactly one new checkpoint and one final event; the killed
// node restarts, rejoins, and samples the step the other one published.
func TestTwoNodesSurviveKill9(t *testing.T) {
	dsn := pgtest.DSN(t)
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	dataDir, modelsDir := filepath.Join(dir, "data"), filepath.Join(dir, "models")
	common := []string{"--database", dsn, "--data-dir", dataDir, "--models-dir", modelsDir, "--lease-timeout", "2s"}
	db, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	lease := func(id string) (owner string, attempt int) {
		t.Helper()
		if err := db.QueryRow(context.Background(), "SELECT coalesce(lease_owner, ''), attempt FROM jobs WHERE id = $1", id).Scan(&owner, &attempt); err != nil {
			t.Fatal(err)
		}
		return owner, attempt
	}

	a := startNode(t, bin, append(common, "--node-id", "node-a")...)
	b := startNode(t, bin, append(common, "--node-id", "node-b")...)
	// A model created on A samples on B at once.
	modelID := a.call("POST", "/v1/preview/models", map[string]any{"project": "p", "name": "m", "base_model": "flywheel/tiny"})["id"].(string)
	b.sample("admin/p/m")

	// Whichever node claims the job is killed once it has trained a step.
	jobID := b.call("POST", "/v1/preview/training-jobs", longRLJob(modelID))["id"].(string)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if evs := b.events(jobID); len(evs) >= 2 && evs[1] == "gradient_step" {
			break // running, with partial events recorded
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job never ran: %s\n%s", a.out, b.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	owner, attempt := lease(jobID)
	nodes := map[string]*node{"node-a": a, "node-b": b}
	victim, survivor := nodes[owner], nodes[map[string]string{"node-a": "node-b", "node-b": "node-a"}[owner]]
	if victim == nil || attempt != 1 {
		t.Fatalf("job leased by %q attempt %d", owner, attempt)
	}
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-victim.exited
	killed := time.Now()
	a, b = victim, survivor // from here on: a was killed, b survives
	if st := b.call("GET", "/v1/preview/training-jobs/"+jobID, nil)["status"]; st != "RUNNING" {
		t.Fatalf("job %v right after A died; it must stay RUNNING (A's lease, then B's run), never failed or re-queued", st)
	}
	deadline = time.Now().Add(40 * time.Second)
	for {
		st := b.call("GET", "/v1/preview/training-jobs/"+jobID, nil)["status"]
		if st == "COMPLETED" {
			break
		}
		if st != "RUNNING" || time.Now().After(deadline) {
			t.Fatalf("job %v; node B's log:\n%s", st, b.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the surviving node completed the job %.1f s after the other was killed (lease timeout 2 s)", time.Since(killed).Seconds())
	if o, n := lease(jobID); o == owner || n != 2 {
		t.Errorf("completed by %q attempt %d, want the other node's attempt 2", o, n)
	}
	job := b.call("GET", "/v1/preview/training-jobs/"+jobID, nil)
	if job["from_step"] != float64(0) || job["to_step"] != float64(1) {
		t.Errorf("job from %v to %v", job["from_step"], job["to_step"])
	}
	evs := b.events(jobID)
	final := 0
	for _, e := range evs {
		if e == "training_ended" || e == "training_failed" {
			final++
		}
	}
	if final != 1 || evs[len(evs)-1] != "training_ended" || evs[0] != "training_started" || strings.Count(strings.Join(evs, ","), "training_started") != 1 {
		t.Errorf("events: %d final, first %s, last %s, %d in all", final, evs[0], evs[len(evs)-1], len(evs))
	}
	t.Logf("events: %s ... %s, %d in all", evs[0], evs[len(evs)-1], len(evs))
	cks := b.call("GET", "/v1/preview/models/"+modelID+"/checkpoints?limit=100", nil)["data"].([]any)
	if len(cks) != 2 || cks[1].(map[string]any)["step"] != float64(1) {
		t.Fatalf("checkpoints %v, want steps 0 and 1", cks)
	}
	entries, _ := os.ReadDir(filepath.Join(dataDir, "checkpoints", modelID))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	// A's work folder (.tmp-<job>.1) is a dead run's leftover: the next
	// start's sweep removes it, since no job of the model runs.
	if got := strings.Join(names, ","); got != "step-0,step-1" && got != ".tmp-"+jobID+".1,step-0,step-1" {
		t.Errorf("checkpoint folders: %s", got)
	}

	// A restarts and rejoins: it serves, and samples the step B published.
	a = startNode(t, bin, a.args[3:]...)
	a.sample("admin/p/m:step1")
	a.sample("admin/p/m")
	b.sample("admin/p/m:step1")
	entries, _ = os.ReadDir(filepath.Join(dataDir, "checkpoints", modelID))
	if len(entries) != 2 {
		t.Errorf("after A's restart %d entries in the model's folder, want step-0 and step-1", len(entries))
	}
}
