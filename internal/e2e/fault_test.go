package e2e

import (
	"bufio"
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
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"flywheel/internal/app"
	"flywheel/internal/store"
)

// live is the service built by app.New and served by App.Serve (the
// http.Server flywheel serve runs, with its timeouts) on a loopback port.
type live struct {
	t      *testing.T
	a      *app.App
	url    string
	addr   string
	key    string
	client *http.Client
	stop   func() // stops serving and closes the app; idempotent
	models string // the models dir
}

func startLive(t *testing.T) *live {
	t.Helper()
	dir := t.TempDir()
	l := &live{t: t, key: testKey, models: filepath.Join(dir, "models")}
	a, err := app.New(t.Context(), app.Config{DataDir: filepath.Join(dir, "data"), ModelsDir: l.models,
		BootstrapKey: testKey, Logger: slog.New(slog.DiscardHandler), Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { a.Serve(ctx, ln); close(served) }()
	l.a, l.addr, l.url = a, ln.Addr().String(), "http://"+ln.Addr().String()
	l.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 60 * time.Second}
	var once sync.Once
	l.stop = func() {
		once.Do(func() {
			cancel()
			<-served
			a.Close()
			l.client.CloseIdleConnections()
		})
	}
	t.Cleanup(l.stop)
	return l
}

// do sends a JSON request and decodes the JSON answer; it returns the status.
func (l *live) do(method, path string, body any, out any) int {
	l.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, l.url+path, rd)
	req.Header.Set("Authorization", "Bearer "+l.key)
	res, err := l.client.Do(req)
	if err != nil {
		l.t.Errorf("%s %s: %v", method, path, err)
		return 0
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	if out != nil {
		json.Unmarshal(data, out)
	}
	return res.StatusCode
}

func (l *live) createModel(name string) string {
	var m struct{ ID string }
	if st := l.do("POST", "/v1/preview/models", map[string]any{"project": "load", "name": name, "base_model": "flywheel/tiny"}, &m); st != 200 {
		l.t.Fatalf("create model: %d", st)
	}
	return m.ID
}

// rlJob is a small valid RL request (the README's) for model id.
func rlJob(id string, lr float64) map[string]any {
	traj := func(reward float64, content string, tok int, lp float64) map[string]any {
		return map[string]any{"reward": reward, "messages_and_choices": []any{
			map[string]any{"role": "user", "content": "Say hi"},
			map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": content},
				"logprobs": map[string]any{"content": []any{map[string]any{"token": fmt.Sprintf("token_id:%d", tok), "logprob": lp}}}},
		}}
	}
	body := map[string]any{"model_id": id, "trajectory_groups": []any{map[string]any{"trajectories": []any{
		traj(1, "hi", 364, -0.3), traj(0, "no", 853, -1.7)}}}}
	if lr > 0 {
		body["experimental_config"] = map[string]any{"learning_rate": lr}
	}
	return body
}

// stream runs one streaming chat completion to its end and reports
// whether it saw [DONE].
func (l *live) stream(ctx context.Context, model string, maxTokens int) (bool, error) {
	b, _ := json.Marshal(map[string]any{"model": model, "messages": []any{map[string]any{"role": "user", "content": "Tell me a story"}},
		"max_tokens": maxTokens, "stream": true, "temperature": 1, "seed": 1})
	req, _ := http.NewRequestWithContext(ctx, "POST", l.url+"/v1/chat/completions", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+l.key)
	res, err := l.client.Do(req)
	if err != nil {
		return false, err
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		data, _ := io.ReadAll(res.Body)
		return false, fmt.Errorf("%d %s", res.StatusCode, data)
	}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if sc.Text() == "data: [DONE]" {
			return true, nil
		}
	}
	return false, sc.Err()
}

type job struct {
	Status store.JobStatus `json:"status"`
}

func (l *live) job(id string) job {
	var j job
	l.do("GET", "/v1/preview/training-jobs/"+id, nil, &j)
	return j
}

func final(status store.JobStatus) bool { return status.Ended() }

// openFDs counts this process's open file descriptors (-1 where /proc is
// missing), leaving out the database's: the connection pool opens up to
// its bound (8 connections) on demand and keeps them idle for minutes.
func openFDs() int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	n := 0
	for _, e := range entries {
		target, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if !strings.Contains(filepath.Base(target), "flywheel.db") {
			n++
		}
	}
	return n
}

// fdTargets lists what the open file descriptors point at.
func fdTargets() []string {
	entries, _ := os.ReadDir("/proc/self/fd")
	var out []string
	for _, e := range entries {
		target, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		out = append(out, target)
	}
	return out
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// settle waits (up to 5 s) until cond holds.
func settle(cond func() bool) bool {
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// The load-and-fault test: many concurrent chat streams and training jobs
// over loopback while one connection stalls mid-body and a client
// disconnects mid-stream. Afterwards every job is in a final state with
// its final event, and nothing leaked: goroutines, file descriptors and
// the heap are back near where they were before the load, and goroutines
// near where they were before the service was built once it is closed.
// Bounded: a fixed count of requests and jobs, a few seconds.
func TestLoadAndFaults(t *testing.T) {
	streams, jobsPerModel := 48, 4
	if raceEnabled || testing.Short() {
		streams, jobsPerModel = 8, 2
	}
	startGoroutines := runtime.NumGoroutine()
	l := startLive(t)
	models := []string{l.createModel("a"), l.createModel("b"), l.createModel("c")}

	// Warm up what is made once: the base model, its scheduler, the
	// trainer's first job, an adapter in the cache.
	if ok, err := l.stream(t.Context(), "flywheel/tiny", 4); !ok {
		t.Fatalf("warm-up stream: %v", err)
	}
	var first struct{ ID string }
	if st := l.do("POST", "/v1/preview/training-jobs", rlJob(models[0], 0), &first); st != 200 {
		t.Fatalf("warm-up job: %d", st)
	}
	if !settle(func() bool { return final(l.job(first.ID).Status) }) {
		t.Fatal("warm-up job did not end")
	}
	if ok, err := l.stream(t.Context(), "admin/load/a", 4); !ok {
		t.Fatalf("warm-up stream of the trained model: %v", err)
	}
	l.client.CloseIdleConnections()
	baseG, baseFD, baseHeap := runtime.NumGoroutine(), openFDs(), heapAlloc()

	// The stalled connection: a training-job request that announces 1 MB
	// and sends 100 bytes, then nothing.
	stalled, err := net.Dial("tcp", l.addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(stalled, "POST /v1/preview/training-jobs HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n%s",
		l.addr, l.key, strings.Repeat(" ", 100))

	var wg sync.WaitGroup
	var mu sync.Mutex
	var jobIDs []string
	var errs []string
	fail := func(format string, args ...any) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	start := time.Now()
	// The client that leaves mid-stream: reads the first event, then hangs up.
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		b, _ := json.Marshal(map[string]any{"model": "flywheel/tiny", "messages": []any{map[string]any{"role": "user", "content": "go"}},
			"max_tokens": 2000, "stream": true, "temperature": 1, "ignore_eos": true})
		req, _ := http.NewRequestWithContext(ctx, "POST", l.url+"/v1/chat/completions", bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+l.key)
		res, err := l.client.Do(req)
		if err != nil {
			fail("disconnecting client: %v", err)
			return
		}
		bufio.NewReader(res.Body).ReadString('\n')
		cancel()
		res.Body.Close()
	}()
	for i := 0; i < streams; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			model := "flywheel/tiny"
			if i%3 == 1 {
				model = "admin/load/a"
			}
			if ok, err := l.stream(t.Context(), model, 8+i%8); !ok {
				fail("stream %d: %v", i, err)
			}
		}()
	}
	for _, m := range models {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < jobsPerModel; k++ {
				var j struct{ ID string }
				if st := l.do("POST", "/v1/preview/training-jobs", rlJob(m, 0), &j); st != 200 {
					fail("job: %d", st)
					continue
				}
				mu.Lock()
				jobIDs = append(jobIDs, j.ID)
				mu.Unlock()
			}
			// A diverging learning rate is refused at creation.
			if st := l.do("POST", "/v1/preview/training-jobs", rlJob(m, 1e30), nil); st != 400 {
				fail("learning_rate 1e30: %d, want 400", st)
			}
		}()
	}
	wg.Wait()
	// One more job, cancelled at once: it ends CANCELLED.
	var c struct{ ID string }
	if st := l.do("POST", "/v1/preview/training-jobs", rlJob(models[1], 0), &c); st == 200 {
		jobIDs = append(jobIDs, c.ID)
		l.do("POST", "/v1/preview/training-jobs/"+c.ID+"/cancel", nil, nil)
	}
	for _, e := range errs {
		t.Error(e)
	}
	for _, id := range jobIDs {
		if !settle(func() bool { return final(l.job(id).Status) }) {
			t.Errorf("job %s did not reach a final state: %s", id, l.job(id).Status)
			continue
		}
		var evs struct {
			Data []struct{ Type string } `json:"data"`
		}
		l.do("GET", "/v1/preview/training-jobs/"+id+"/events?limit=100", nil, &evs)
		if n := len(evs.Data); n == 0 || evs.Data[n-1].Type != "training_ended" && evs.Data[n-1].Type != "training_failed" {
			t.Errorf("job %s: events %+v end without a final event", id, evs.Data)
		}
	}
	t.Logf("%d streams, %d jobs in %v", streams, len(jobIDs), time.Since(start).Round(time.Millisecond))

	// The stalled connection did not hold the others up; now it goes too.
	stalled.Close()
	l.client.CloseIdleConnections()
	if !settle(func() bool { return runtime.NumGoroutine() <= baseG+2 }) {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines: %d after the load, %d before\n%s", runtime.NumGoroutine(), baseG, buf[:runtime.Stack(buf, true)])
	}
	if baseFD >= 0 && !settle(func() bool { return openFDs() <= baseFD+2 }) {
		t.Errorf("file descriptors: %d after the load, %d before: %v", openFDs(), baseFD, fdTargets())
	}
	if h := heapAlloc(); h > baseHeap+32<<20 {
		t.Errorf("heap: %d MiB after the load, %d MiB before", h>>20, baseHeap>>20)
	}

	l.stop()
	if !settle(func() bool { return runtime.NumGoroutine() <= startGoroutines+3 }) {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines: %d after Close, %d before New\n%s", runtime.NumGoroutine(), startGoroutines, buf[:runtime.Stack(buf, true)])
	}
}

// A job whose learning rate got past the HTTP check (here submitted to the
// queue directly) fails: FAILED, a training_failed event saying why, and no
// new checkpoint.
func TestDivergingJobFailsWithoutACheckpoint(t *testing.T) {
	l := startLive(t)
	id := l.createModel("d")
	body, _ := json.Marshal(rlJob(id, 1e30))
	p, err := l.a.Queue.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	p.Write(body)
	j, err := p.Submit(t.Context(), store.Job{ModelID: id, Kind: store.KindRL})
	if err != nil {
		t.Fatal(err)
	}
	if !settle(func() bool { return final(l.job(j.ID).Status) }) {
		t.Fatal("job did not end")
	}
	var rec struct {
		Status       store.JobStatus `json:"status"`
		ErrorMessage string          `json:"error_message"`
	}
	l.do("GET", "/v1/preview/training-jobs/"+j.ID, nil, &rec)
	var evs struct {
		Data []struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		} `json:"data"`
	}
	l.do("GET", "/v1/preview/training-jobs/"+j.ID+"/events?limit=100", nil, &evs)
	last := evs.Data[len(evs.Data)-1]
	if rec.Status != store.StatusFailed || last.Type != "training_failed" || !strings.Contains(fmt.Sprint(last.Data), "learning_rate") {
		t.Errorf("job %+v, last event %+v", rec, last)
	}
	var cks struct {
		Data []struct{ Step int } `json:"data"`
	}
	l.do("GET", "/v1/preview/models/"+id+"/checkpoints?order=desc&limit=1", nil, &cks)
	if len(cks.Data) != 1 || cks.Data[0].Step != 0 {
		t.Errorf("checkpoints after a diverging job: %+v", cks.Data)
	}
}

// The base model's weights truncated under the running server (a careless
// cp or truncate): the server lives on and keeps answering from the
// weights it loaded.
func TestWeightsTruncatedUnderTheServer(t *testing.T) {
	l := startLive(t)
	if ok, err := l.stream(t.Context(), "flywheel/tiny", 8); !ok {
		t.Fatal(err)
	}
	path := filepath.Join(l.models, "flywheel", "tiny", "model.safetensors")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("tiny's weights are not one file: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- os.Truncate(path, 0) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("truncate held for 30 s")
	}
	for i := 0; i < 3; i++ {
		if ok, err := l.stream(t.Context(), "flywheel/tiny", 16); !ok {
			t.Fatalf("completion after the truncate: %v", err)
		}
	}
}
