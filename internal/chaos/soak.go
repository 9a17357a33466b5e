package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"flywheel/internal/store"
	"flywheel/internal/trace"
)

// Config sets up one soak.
type Config struct {
	Bin      string        // the built flywheel binary
	Database string        // PostgreSQL URL of an empty database the nodes share
	Dir      string        // work folder: the shared data dir, models, node logs
	Nodes    int           // flywheel serve processes (default 3)
	Duration time.Duration // load and faults (default 2m)
	Seed     uint64        // the fault schedule and the load's choices
	// PGRestart restarts the PostgreSQL server; "{mode}" is replaced by
	// fast or immediate. Empty: no database faults.
	PGRestart string
	// LeaseTimeout of the nodes (default 3s): a paused node stays stopped
	// past it.
	LeaseTimeout time.Duration
	MemBoundMB   int64     // each node's resident memory must stay under this (default 3072)
	Log          io.Writer // progress lines (default os.Stderr)
}

// key is the bootstrap API key of user admin on the soak's cluster.
const key = "fw_soak_admin_key_0123456789abcdef"

// Check is one invariant's outcome.
type Check struct {
	Name   string
	OK     bool
	Detail string
}

// Report is what a soak did and found.
type Report struct {
	Seed     uint64
	Duration time.Duration
	Load     map[string]int64 // operations done, by kind
	Faults   map[string]int   // faults injected, by kind
	Statuses map[int]int64    // HTTP statuses seen
	PeakMB   map[string]int64 // each node's peak resident memory
	Checks   []Check
}

// OK reports whether every invariant held.
func (r *Report) OK() bool {
	for _, c := range r.Checks {
		if !c.OK {
			return false
		}
	}
	return len(r.Checks) > 0
}

// String renders the report.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "soak: seed %d, %s of load and faults\n", r.Seed, r.Duration.Round(time.Second))
	line := func(title string, m map[string]int64) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		fmt.Fprintf(&b, "%s:", title)
		for _, k := range keys {
			fmt.Fprintf(&b, " %s=%d", k, m[k])
		}
		b.WriteString("\n")
	}
	line("load", r.Load)
	faults := map[string]int64{}
	for k, v := range r.Faults {
		faults[k] = int64(v)
	}
	line("faults", faults)
	st := map[string]int64{}
	for k, v := range r.Statuses {
		st[fmt.Sprint(k)] = v
	}
	line("http statuses", st)
	line("peak RSS MiB", r.PeakMB)
	for _, c := range r.Checks {
		mark := "PASS"
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(&b, "%s %s: %s\n", mark, c.Name, c.Detail)
	}
	return b.String()
}

// soak is one run's state.
type soak struct {
	cfg    Config
	nodes  []*node
	layout store.Layout
	http   *http.Client

	mu  sync.Mutex
	rng *rand.Rand // the load's choices
	// faultRng draws the fault schedule (kinds, nodes, delays) alone, so a
	// seed gives the same sequence of faults whatever the load does.
	faultRng *rand.Rand
	load     map[string]int64
	faults   map[string]int
	statuses map[int]int64
	bad5xx   []string
	jobs     map[string]string // accepted job -> model
	seen     map[string][]int  // model -> steps a desc listing showed
	calls    map[string]call   // call id -> what was stored
	pgDown   atomic.Bool
}

type call struct {
	Inputs, Output any
}

// Run runs a soak and returns its report; an error means the harness could
// not run (the cluster did not start), not that an invariant failed.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Nodes <= 0 {
		cfg.Nodes = 3
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 2 * time.Minute
	}
	if cfg.LeaseTimeout <= 0 {
		cfg.LeaseTimeout = 3 * time.Second
	}
	if cfg.MemBoundMB <= 0 {
		cfg.MemBoundMB = 3072
	}
	if cfg.Log == nil {
		cfg.Log = os.Stderr
	}
	dataDir := filepath.Join(cfg.Dir, "data")
	s := &soak{cfg: cfg, layout: store.Layout{DataDir: dataDir}, http: &http.Client{Timeout: 60 * time.Second},
		rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), faultRng: rand.New(rand.NewPCG(cfg.Seed^0x5deece66d, cfg.Seed)), load: map[string]int64{}, faults: map[string]int{},
		statuses: map[int]int64{}, jobs: map[string]string{}, seen: map[string][]int{}, calls: map[string]call{}}
	env := append(os.Environ(), "FLYWHEEL_BOOTSTRAP_API_KEY="+key, "FLYWHEEL_TOKENS_PER_STEP=64")
	for i := range cfg.Nodes {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		logf, err := os.Create(filepath.Join(cfg.Dir, fmt.Sprintf("node%d.log", i)))
		if err != nil {
			return nil, err
		}
		defer logf.Close()
		n := &node{name: fmt.Sprintf("node%d", i), addr: addr, bin: cfg.Bin, env: env, logf: logf,
			args: []string{"--database", cfg.Database, "--data-dir", dataDir, "--models-dir", filepath.Join(cfg.Dir, "models"),
				"--lease-timeout", cfg.LeaseTimeout.String(), "--workers", "1"}}
		s.nodes = append(s.nodes, n)
		defer n.stop(syscall.SIGKILL, 5*time.Second)
		if i == 0 { // the first node migrates the database alone
			if err := n.start(); err != nil {
				return nil, err
			}
		}
	}
	for _, n := range s.nodes[1:] {
		if err := n.start(); err != nil {
			return nil, err
		}
	}
	models, err := s.setup()
	if err != nil {
		return nil, err
	}
	s.logf("cluster of %d nodes up; load and faults for %s (seed %d)", cfg.Nodes, cfg.Duration, cfg.Seed)

	start := time.Now()
	loadCtx, stopLoad := context.WithTimeout(ctx, cfg.Duration)
	defer stopLoad()
	var wg sync.WaitGroup
	for i, m := range models[:len(models)-1] {
		wg.Go(func() { s.rlLoop(loadCtx, i, m) })
	}
	wg.Go(func() { s.sftLoop(loadCtx, models[len(models)-1]) })
	for range 2 {
		wg.Go(func() { s.chatLoop(loadCtx) })
	}
	wg.Go(func() { s.callLoop(loadCtx) })
	wg.Go(func() { s.faultLoop(loadCtx) })
	wg.Go(func() {
		for loadCtx.Err() == nil {
			for _, n := range s.nodes {
				n.sampleRSS()
			}
			sleep(loadCtx, time.Second)
		}
	})
	wg.Wait()
	elapsed := time.Since(start)

	// Quiesce: every node running, then every accepted job ends.
	s.logf("load stopped after %s; bringing every node back and waiting for the jobs", elapsed.Round(time.Second))
	for _, n := range s.nodes {
		n.signal(syscall.SIGCONT)
		if !n.running() {
			if err := n.start(); err != nil {
				return nil, err
			}
		}
	}
	rep := &Report{Seed: cfg.Seed, Duration: elapsed, Load: s.load, Faults: s.faults, Statuses: s.statuses, PeakMB: map[string]int64{}}
	s.checks(ctx, rep, models)
	return rep, nil
}

func (s *soak) logf(format string, args ...any) {
	fmt.Fprintf(s.cfg.Log, time.Now().UTC().Format("15:04:05 ")+format+"\n", args...)
}

func (s *soak) count(kind string) {
	s.mu.Lock()
	s.load[kind]++
	s.mu.Unlock()
}

func (s *soak) intn(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rng.IntN(n)
}

// pick returns a node at random (it may be down: the client sees the error
// and tries again, as a client behind a load balancer would).
func (s *soak) pick() *node { return s.nodes[s.intn(len(s.nodes))] }

func (n *node) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.exited == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// do sends one request and records its status; basic selects the Weave
// routes' Basic auth.
func (s *soak) do(ctx context.Context, n *node, method, path string, body any, basic bool) (int, []byte, error) {
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	return s.send(ctx, n, method, path, "application/json", b, basic)
}

// send sends one request with a raw body (nil: none) of the given content
// type and records its status.
func (s *soak) send(ctx context.Context, n *node, method, path, contentType string, body []byte, basic bool) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, n.url()+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if basic {
		req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("api:"+key)))
	} else {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", contentType)
	res, err := s.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	s.status(method+" "+path, res.StatusCode, b)
	return res.StatusCode, b, err
}

func (s *soak) status(what string, code int, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.statuses[code]++
	if code >= 500 && code != 503 {
		s.bad5xx = append(s.bad5xx, fmt.Sprintf("%d %s: %.200s", code, what, body))
	}
}

// must retries a request on any node until it answers 200 or ctx ends.
func (s *soak) must(ctx context.Context, method, path string, body any, out any) error {
	for {
		code, b, err := s.do(ctx, s.pick(), method, path, body, false)
		if err == nil && code == 200 {
			if out != nil {
				return json.Unmarshal(b, out)
			}
			return nil
		}
		if err == nil && code >= 400 && code < 500 && code != 429 {
			return fmt.Errorf("%s %s: %d %.200s", method, path, code, b)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s %s: %w (last: %d %v %.200s)", method, path, ctx.Err(), code, err, b)
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// setup creates the training loops' models: one per RL loop (rl0, rl1),
// then the SFT loop's (sft0), last.
func (s *soak) setup() ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var models []string
	for _, name := range []string{"rl0", "rl1", "sft0"} {
		var m struct{ ID string }
		if err := s.must(ctx, "POST", "/v1/preview/models", map[string]any{"project": "soak", "name": name, "base_model": "flywheel/tiny"}, &m); err != nil {
			return nil, err
		}
		models = append(models, m.ID)
	}
	return models, nil
}

// rlJob is a small RL job on flywheel/tiny built from a sampled completion
// (its reward a fixed score of the text), as ART's loop sends them.
func rlJob(modelID, sampled string, tok int) map[string]any {
	traj := func(reward float64, content string, tok int, lp float64) map[string]any {
		return map[string]any{"reward": reward, "messages_and_choices": []any{
			map[string]any{"role": "user", "content": strings.Repeat("Say hi ", 10)},
			map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": content},
				"logprobs": map[string]any{"content": []any{map[string]any{"token": fmt.Sprintf("token_id:%d", tok), "logprob": lp}}}},
		}}
	}
	reward := float64(len(sampled)%3) / 2
	var groups []any
	for range 4 {
		groups = append(groups, map[string]any{"trajectories": []any{traj(reward, "hi", tok, -0.3), traj(1-reward, "no", 853, -1.7)}})
	}
	return map[string]any{"model_id": modelID, "trajectory_groups": groups}
}

// rlLoop samples from the model's latest step, submits a job, waits for it,
// and reads the checkpoints, until ctx ends.
func (s *soak) rlLoop(ctx context.Context, i int, modelID string) {
	name := fmt.Sprintf("admin/soak/rl%d", i)
	for ctx.Err() == nil {
		var comp struct {
			Choices []struct {
				Message struct{ Content string }
			}
		}
		if err := s.must(ctx, "POST", "/v1/chat/completions", map[string]any{"model": name, "max_tokens": 4,
			"messages": []any{map[string]any{"role": "user", "content": "Say hi"}}}, &comp); err != nil {
			return
		}
		s.count("rl_samples")
		sampled := ""
		if len(comp.Choices) > 0 {
			sampled = comp.Choices[0].Message.Content
		}
		code, b, err := s.do(ctx, s.pick(), "POST", "/v1/preview/training-jobs", rlJob(modelID, sampled, 364), false)
		if err != nil || code != 200 {
			sleep(ctx, 300*time.Millisecond)
			continue
		}
		s.accepted(ctx, b, modelID, "rl_jobs")
	}
}

// accepted records a job the service accepted (the 200 body of its
// submission) for the end checks, waits for its end, and reads the model's
// latest checkpoint.
func (s *soak) accepted(ctx context.Context, body []byte, modelID, kind string) {
	var j struct{ ID string }
	if json.Unmarshal(body, &j) != nil || j.ID == "" {
		return
	}
	s.mu.Lock()
	s.jobs[j.ID] = modelID
	s.mu.Unlock()
	s.count(kind)
	for ctx.Err() == nil { // wait for the job's end
		var job struct{ Status string }
		if s.must(ctx, "GET", "/v1/preview/training-jobs/"+j.ID, nil, &job) != nil {
			break
		}
		if terminal(job.Status) {
			break
		}
		sleep(ctx, 500*time.Millisecond)
	}
	s.readLatest(ctx, modelID)
}

// sftData is a small chat JSONL training file (the SFT format ART uploads);
// n varies its content from job to job.
func sftData(n int) []byte {
	var b bytes.Buffer
	for i := range 4 {
		line, _ := json.Marshal(map[string]any{"messages": []any{
			map[string]any{"role": "user", "content": fmt.Sprintf("What is %d + %d?", n, i)},
			map[string]any{"role": "assistant", "content": fmt.Sprint(n + i)},
		}})
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// sftLoop uploads a JSONL file (POST /v1/files, purpose fine-tune), submits
// an SFT job on it (POST /v1/preview/sft-training-jobs with the file id as
// training_data_url, as ART's sft_training_jobs.create does), waits for the
// job's end and reads the checkpoints, until ctx ends.
func (s *soak) sftLoop(ctx context.Context, modelID string) {
	for ctx.Err() == nil {
		var mp bytes.Buffer
		mw := multipart.NewWriter(&mp)
		mw.WriteField("purpose", "fine-tune")
		fw, _ := mw.CreateFormFile("file", "sft.jsonl")
		fw.Write(sftData(s.intn(1000)))
		mw.Close()
		code, b, err := s.send(ctx, s.pick(), "POST", "/v1/files", mw.FormDataContentType(), mp.Bytes(), false)
		var f struct{ ID string }
		if err != nil || code != 200 || json.Unmarshal(b, &f) != nil || f.ID == "" {
			sleep(ctx, 300*time.Millisecond)
			continue
		}
		s.count("sft_uploads")
		code, b, err = s.do(ctx, s.pick(), "POST", "/v1/preview/sft-training-jobs", map[string]any{"model_id": modelID,
			"training_data_url": f.ID, "config": map[string]any{"batch_size": "auto", "learning_rate": 1e-4}}, false)
		if err != nil || code != 200 {
			sleep(ctx, 300*time.Millisecond)
			continue
		}
		s.accepted(ctx, b, modelID, "sft_jobs")
	}
}

func terminal(status string) bool {
	return status == "COMPLETED" || status == "FAILED" || status == "CANCELLED"
}

// readLatest records the step a desc listing of the checkpoints shows first.
func (s *soak) readLatest(ctx context.Context, modelID string) {
	var page struct {
		Data []struct{ Step int }
	}
	if s.must(ctx, "GET", "/v1/preview/models/"+modelID+"/checkpoints?limit=1&order=desc", nil, &page) != nil || len(page.Data) == 0 {
		return
	}
	s.mu.Lock()
	s.seen[modelID] = append(s.seen[modelID], page.Data[0].Step)
	s.mu.Unlock()
	s.count("checkpoint_reads")
}

// chatLoop streams chat completions from flywheel/tiny; one in five leaves
// after its first chunk (a client disconnecting mid-stream).
func (s *soak) chatLoop(ctx context.Context) {
	for ctx.Err() == nil {
		leave := s.intn(5) == 0
		b, _ := json.Marshal(map[string]any{"model": "flywheel/tiny", "max_tokens": 24, "stream": true,
			"messages": []any{map[string]any{"role": "user", "content": "Tell me a story"}}})
		rctx, cancel := context.WithCancel(ctx)
		req, _ := http.NewRequestWithContext(rctx, "POST", s.pick().url()+"/v1/chat/completions", bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := s.http.Do(req)
		if err != nil {
			cancel()
			sleep(ctx, 200*time.Millisecond)
			continue
		}
		if res.StatusCode != 200 {
			body, _ := io.ReadAll(res.Body)
			s.status("POST /v1/chat/completions (stream)", res.StatusCode, body)
			res.Body.Close()
			cancel()
			sleep(ctx, 200*time.Millisecond)
			continue
		}
		s.status("POST /v1/chat/completions (stream)", 200, nil)
		sc := bufio.NewScanner(res.Body)
		done := false
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data: ") && leave {
				break
			}
			if sc.Text() == "data: [DONE]" {
				done = true
			}
		}
		cancel()
		res.Body.Close()
		switch {
		case leave:
			s.count("chat_streams_left")
		case done:
			s.count("chat_streams")
		}
	}
}

// callLoop stores calls with upsert_batch (start and end of each) and reads
// stored ones back.
func (s *soak) callLoop(ctx context.Context) {
	const project = "admin/soak"
	for ctx.Err() == nil {
		var batch []any
		stored := map[string]call{}
		for range 4 {
			id := trace.NewUUIDv7()
			c := call{Inputs: map[string]any{"n": float64(s.intn(1 << 20)), "text": fmt.Sprintf("input %d é", s.intn(1000))},
				Output: map[string]any{"ok": true, "v": float64(s.intn(1000))}}
			now := time.Now().UTC()
			batch = append(batch,
				map[string]any{"mode": "start", "req": map[string]any{"project_id": project, "id": id, "op_name": "soak_op",
					"started_at": now.Format(time.RFC3339Nano), "attributes": map[string]any{}, "inputs": c.Inputs}},
				map[string]any{"mode": "end", "req": map[string]any{"project_id": project, "id": id,
					"ended_at": now.Add(time.Millisecond).Format(time.RFC3339Nano), "output": c.Output, "summary": map[string]any{}}})
			stored[id] = c
		}
		code, _, err := s.do(ctx, s.pick(), "POST", "/call/upsert_batch", map[string]any{"batch": batch}, true)
		if err == nil && code == 200 {
			s.mu.Lock()
			maps := s.calls
			for id, c := range stored {
				maps[id] = c
			}
			s.mu.Unlock()
			s.count("calls_stored")
		}
		// read one stored call back now (the full check is at the end)
		s.mu.Lock()
		var id string
		for k := range s.calls {
			id = k
			break
		}
		s.mu.Unlock()
		if id != "" {
			if code, _, err := s.do(ctx, s.pick(), "POST", "/call/read", map[string]any{"project_id": project, "id": id}, true); err == nil && code == 200 {
				s.count("calls_read")
			}
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// faultLoop injects one fault every few seconds on the seeded schedule.
func (s *soak) faultLoop(ctx context.Context) {
	kinds := []string{"kill9", "sigterm", "pause_past_lease"}
	if s.cfg.PGRestart != "" {
		kinds = append(kinds, "pg_restart_fast", "pg_restart_immediate")
	}
	sleep(ctx, 3*time.Second)
	for ctx.Err() == nil {
		kind := kinds[s.faultRng.IntN(len(kinds))]
		n := s.nodes[s.faultRng.IntN(len(s.nodes))]
		switch kind {
		case "kill9", "sigterm":
			if !n.running() {
				continue
			}
			sig, wait := syscall.SIGKILL, 5*time.Second
			if kind == "sigterm" {
				sig, wait = syscall.SIGTERM, 30*time.Second
			}
			s.logf("fault: %s %s", kind, n.name)
			n.stop(sig, wait)
			sleep(ctx, time.Duration(500+s.faultRng.IntN(2500))*time.Millisecond)
			if err := n.start(); err != nil {
				s.logf("restart of %s failed: %v", n.name, err)
			}
		case "pause_past_lease":
			if !n.running() {
				continue
			}
			s.logf("fault: SIGSTOP %s for %s", n.name, 2*s.cfg.LeaseTimeout)
			n.signal(syscall.SIGSTOP)
			sleep(context.Background(), 2*s.cfg.LeaseTimeout)
			n.signal(syscall.SIGCONT)
		default:
			mode := strings.TrimPrefix(kind, "pg_restart_")
			s.logf("fault: PostgreSQL restart -m %s", mode)
			s.pgDown.Store(true)
			if err := runShell(strings.ReplaceAll(s.cfg.PGRestart, "{mode}", mode)); err != nil {
				s.logf("PostgreSQL restart failed: %v", err)
			}
			s.pgDown.Store(false)
		}
		s.mu.Lock()
		s.faults[kind]++
		s.mu.Unlock()
		sleep(ctx, time.Duration(4000+s.faultRng.IntN(6000))*time.Millisecond)
	}
}

// checks waits for the accepted jobs to end and checks the invariants.
func (s *soak) checks(ctx context.Context, rep *Report, models []string) {
	add := func(name string, ok bool, format string, args ...any) {
		rep.Checks = append(rep.Checks, Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
	}
	// The checks read back every job and call the load made: their time
	// grows with the soak's (about 17 s after 3 minutes on 2 cores).
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute+s.cfg.Duration/2)
	defer cancel()

	// A job the service took while its 200 was lost to a fault (a node
	// killed as it answered) is checked too: it publishes a step like any.
	unseen := 0
	for _, m := range models {
		jobs, err := s.listAll(wctx, "/v1/preview/training-jobs?model_id="+m)
		if err != nil {
			add("jobs listed", false, "%s: %v", m, err)
			continue
		}
		for _, j := range jobs {
			if _, ok := s.jobs[j.ID]; !ok {
				s.jobs[j.ID] = m
				unseen++
			}
		}
	}

	// every accepted job ended exactly once
	status := map[string]string{}
	var notEnded, badEvents []string
	completed := map[string]int{}
	failed := map[string]int{} // FAILED jobs by error message
	for id, model := range s.jobs {
		var job struct {
			Status       string
			ErrorMessage string `json:"error_message"`
		}
		for wctx.Err() == nil {
			if s.must(wctx, "GET", "/v1/preview/training-jobs/"+id, nil, &job) != nil || terminal(job.Status) {
				break
			}
			sleep(wctx, time.Second)
		}
		status[id] = job.Status
		if !terminal(job.Status) {
			notEnded = append(notEnded, id+" "+job.Status)
			continue
		}
		if job.Status == "COMPLETED" {
			completed[model]++
		}
		if job.Status == "FAILED" {
			failed[job.ErrorMessage]++
		}
		evs, err := s.listAll(wctx, "/v1/preview/training-jobs/"+id+"/events")
		if err != nil {
			badEvents = append(badEvents, id+": "+err.Error())
			continue
		}
		ends := 0
		for _, e := range evs {
			if e.Type == "training_ended" || e.Type == "training_failed" {
				ends++
			}
		}
		if ends != 1 && !(job.Status == "CANCELLED" && ends == 0) {
			badEvents = append(badEvents, fmt.Sprintf("%s %s: %d end events", id, job.Status, ends))
		}
	}
	counts := map[string]int{}
	for _, st := range status {
		counts[st]++
	}
	add("jobs end exactly once", len(notEnded) == 0 && len(badEvents) == 0, "%d accepted (%d of them with the answer lost to a fault) %v; FAILED by message %v; not ended %v; bad end events %v",
		len(s.jobs), unseen, counts, failed, notEnded, badEvents)

	// checkpoints contiguous, complete, and each COMPLETED job published one
	var ckProblems []string
	for _, m := range models {
		cks, err := s.listAll(wctx, "/v1/preview/models/"+m+"/checkpoints")
		if err != nil {
			ckProblems = append(ckProblems, m+": "+err.Error())
			continue
		}
		steps := make([]int, 0, len(cks))
		for _, c := range cks {
			steps = append(steps, c.Step)
		}
		slices.Sort(steps)
		for i, st := range steps {
			if st != i {
				ckProblems = append(ckProblems, fmt.Sprintf("%s: steps %v are not 0..n without gaps or duplicates", m, steps))
				break
			}
			for _, f := range []string{"adapter_config.json", "adapter_model.safetensors"} {
				if fi, err := os.Stat(filepath.Join(s.layout.CheckpointDir(m, st), f)); err != nil || fi.Size() == 0 {
					ckProblems = append(ckProblems, fmt.Sprintf("%s step %d: %s missing or empty", m, st, f))
				}
			}
		}
		if len(steps) != completed[m]+1 {
			ckProblems = append(ckProblems, fmt.Sprintf("%s: %d checkpoints for %d COMPLETED jobs (want one more: step 0)", m, len(steps), completed[m]))
		}
		for _, st := range s.seen[m] {
			if len(steps) == 0 || st > steps[len(steps)-1] {
				ckProblems = append(ckProblems, fmt.Sprintf("%s: step %d was listed and is gone", m, st))
			}
		}
		tmp, _ := filepath.Glob(filepath.Join(s.layout.ModelDir(m), ".tmp-*"))
		for _, t := range tmp {
			ckProblems = append(ckProblems, "orphaned work folder "+t)
		}
	}
	add("checkpoints contiguous, complete, none lost, no work folders left", len(ckProblems) == 0, "%d models; problems %v", len(models), ckProblems)

	// no request body of an ended job left
	var orphans []string
	for id, st := range status {
		if terminal(st) {
			if _, err := os.Stat(s.layout.RequestPath(id)); err == nil {
				orphans = append(orphans, id)
			}
		}
	}
	add("no request bodies of ended jobs left", len(orphans) == 0, "%d ended jobs; bodies left %v", len(status), orphans)

	// every stored call reads back identical
	var callProblems []string
	for id, c := range s.calls {
		var r struct {
			Call struct {
				Inputs, Output any
			}
		}
		code, b, err := s.do(wctx, s.nodes[0], "POST", "/call/read", map[string]any{"project_id": "admin/soak", "id": id}, true)
		if err != nil || code != 200 || json.Unmarshal(b, &r) != nil {
			callProblems = append(callProblems, fmt.Sprintf("%s: %d %v", id, code, err))
			continue
		}
		if !reflect.DeepEqual(r.Call.Inputs, c.Inputs) || !reflect.DeepEqual(r.Call.Output, c.Output) {
			callProblems = append(callProblems, fmt.Sprintf("%s: read %v %v, stored %v %v", id, r.Call.Inputs, r.Call.Output, c.Inputs, c.Output))
		}
	}
	add("stored calls read back identical", len(callProblems) == 0, "%d calls; problems %v", len(s.calls), firstN(callProblems, 5))

	s.mu.Lock()
	bad := slices.Clone(s.bad5xx)
	s.mu.Unlock()
	detail := ""
	if len(bad) > 0 {
		detail = "; the nodes' errors: " + strings.Join(firstN(s.nodeErrors(), 8), " | ")
	}
	add("no 5xx but 503", len(bad) == 0, "%d 503s; others %v%s", s.statuses[503], firstN(bad, 5), detail)

	var over []string
	for _, n := range s.nodes {
		n.sampleRSS()
		rep.PeakMB[n.name] = n.peakKB >> 10
		if n.peakKB>>10 >= s.cfg.MemBoundMB {
			over = append(over, fmt.Sprintf("%s %d MiB", n.name, n.peakKB>>10))
		}
	}
	add(fmt.Sprintf("each node's memory under %d MiB", s.cfg.MemBoundMB), len(over) == 0, "peaks %v; over %v", rep.PeakMB, over)
}

// nodeErrors lists the distinct errors the nodes logged (level ERROR, the
// request log lines aside), most frequent first, to explain a 5xx.
func (s *soak) nodeErrors() []string {
	count := map[string]int{}
	for _, n := range s.nodes {
		b, err := os.ReadFile(n.logf.Name())
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.Contains(line, "level=ERROR") || strings.Contains(line, `msg="http request"`) {
				continue
			}
			if i := strings.Index(line, " err="); i >= 0 {
				line = line[i+1:]
			}
			count[line]++
		}
	}
	var out []string
	for e := range count {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b string) int { return count[b] - count[a] })
	for i, e := range out {
		out[i] = fmt.Sprintf("%dx %.300s", count[e], e)
	}
	return out
}

// item is an entry of a listing: an event or a checkpoint.
type item struct {
	ID   string
	Type string
	Step int
}

// listAll reads every page of a listing (ascending).
func (s *soak) listAll(ctx context.Context, path string) ([]item, error) {
	var all []item
	after := ""
	for {
		var page struct {
			Data    []item
			HasMore bool `json:"has_more"`
		}
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		if err := s.must(ctx, "GET", path+sep+"limit=100"+after, nil, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Data...)
		if !page.HasMore || len(page.Data) == 0 {
			return all, nil
		}
		after = "&after=" + page.Data[len(page.Data)-1].ID
	}
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("... %d more", len(s)-n))
	}
	return s
}
