package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"flywheel/internal/app"
	"flywheel/internal/jobs"
	"flywheel/internal/store"
)

// scale is what the dashboard must page through quickly (issue 14): a model
// of 1,000 training steps and a call-store project of 100,000 calls.
type scale struct {
	url, key, modelID string
	steps, calls      int
	start             time.Time // the first seeded call's started_at; call i starts i ms later
}

// seedScale builds a service holding a model of steps training steps (one
// job each through the store's own job lifecycle: claimed, a training_started
// and a gradient_step event, completed with the job's metrics, then a /log of
// val metrics) and a project admin/scale of calls calls written through
// /call/upsert_batch (ops op-0..op-4; every tenth call an error).
func seedScale(tb testing.TB, dir string, steps, calls int) scale {
	tb.Helper()
	ctx := context.Background()
	cfg := app.Config{DataDir: dir, Workers: jobs.DefaultWorkers, Logger: slog.New(slog.DiscardHandler), BootstrapKey: os.Getenv("FLYWHEEL_BOOTSTRAP_API_KEY")}
	a, err := app.New(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	a.Close() // the store is seeded with no queue running that could claim the jobs
	st, _, err := store.OpenDataDir(ctx, dir, "")
	if err != nil {
		tb.Fatal(err)
	}
	m, err := st.CreateModel(ctx, store.TrainedModel{ID: store.NewID(), Entity: "admin", Project: "scale", Name: "long",
		BaseModel: "flywheel/tiny", LoRA: store.LoRA{Rank: 16, Alpha: 32}}, store.Checkpoint{ID: store.NewID(), Step: 0, Dir: dir + "/none"})
	if err != nil {
		tb.Fatal(err)
	}
	for i := 0; i < steps; i++ {
		if _, err := st.CreateJob(ctx, store.Job{ModelID: m.ID, Kind: store.KindRL}); err != nil {
			tb.Fatal(err)
		}
		j, ok, err := st.ClaimNext(ctx, "seed", time.Hour, nil)
		if err != nil || !ok {
			tb.Fatalf("claim: %v %v", ok, err)
		}
		if _, err := st.AppendEvent(ctx, j.Lease(), store.NewID(), "training_started", map[string]any{"num_sequences": 1}); err != nil {
			tb.Fatal(err)
		}
		loss := 1 / float64(i+1)
		if _, err := st.AppendEvent(ctx, j.Lease(), store.NewID(), "gradient_step", map[string]any{"gradient_step": 1, "loss": loss, "grad_norm": 2 * loss, "entropy": 3 - loss}); err != nil {
			tb.Fatal(err)
		}
		reward := float64(i) / float64(steps)
		lt, err := st.LockLease(ctx, j.Lease())
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := lt.Complete(ctx, store.Checkpoint{ID: store.NewID(), ModelID: m.ID, Step: i + 1, Dir: dir + "/none",
			Metrics: map[string]float64{"reward": reward, "loss": loss}}, map[string]any{"reward": reward}); err != nil {
			tb.Fatal(err)
		}
		if _, err := st.LogMetrics(ctx, m.ID, "val", map[string]float64{"val/reward": reward / 2}); err != nil {
			tb.Fatal(err)
		}
	}
	st.Close()

	a, err = app.New(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(a.Close)
	_, key, err := a.Store.CreateKey(ctx, "admin", "test", "")
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	tb.Cleanup(srv.Close)
	s := scale{url: srv.URL, key: key, modelID: m.ID, steps: steps, calls: calls, start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	const batch = 1000
	for from := 0; from < calls; from += batch {
		var b bytes.Buffer
		b.WriteString(`{"batch": [`)
		for i := from; i < min(from+batch, calls); i++ {
			if i > from {
				b.WriteByte(',')
			}
			at := s.start.Add(time.Duration(i) * time.Millisecond)
			exc := "null"
			if i%10 == 0 {
				exc = `"boom"`
			}
			fmt.Fprintf(&b, `{"mode": "start", "req": {"start": {"project_id": "admin/scale", "id": "%s", "op_name": "op-%d", "started_at": %q,
				"attributes": {}, "inputs": {"i": %d, "text": "some input text"}}}}, {"mode": "end", "req": {"end": {"project_id": "admin/scale",
				"id": "%s", "ended_at": %q, "output": {"ok": true}, "summary": {}, "exception": %s}}}`,
				callID(i), i%5, at.Format(time.RFC3339Nano), i, callID(i), at.Add(time.Millisecond).Format(time.RFC3339Nano), exc)
		}
		b.WriteString(`]}`)
		req, _ := http.NewRequest("POST", s.url+"/call/upsert_batch", &b)
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			tb.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			tb.Fatalf("upsert_batch: %d %s", res.StatusCode, body)
		}
	}
	return s
}

// callID is the id of the i-th seeded call (an OpenTelemetry-style hex id).
func callID(i int) string { return fmt.Sprintf("%016x", 0xa000000000000000+uint64(i)) }

// get sends a request and returns the body, failing on a non-200 status.
func (s scale) get(tb testing.TB, method, path, body string) []byte {
	tb.Helper()
	req, _ := http.NewRequest(method, s.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+s.key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		tb.Fatalf("%s %s: %d %s", method, path, res.StatusCode, b)
	}
	return b
}

type listPage struct {
	Data    []json.RawMessage `json:"data"`
	LastID  string            `json:"last_id"`
	HasMore bool              `json:"has_more"`
}

// modelPage makes the requests the model page makes on load: every
// checkpoint and every gradient step, 100 a page, and the latest jobs. It
// returns the items read and the largest response.
func (s scale) modelPage(tb testing.TB) (checkpoints, steps, biggest int) {
	for _, p := range []struct {
		path string
		n    *int
	}{{"/v1/preview/models/" + s.modelID + "/checkpoints?order=asc", &checkpoints},
		{"/v1/preview/models/" + s.modelID + "/events?type=gradient_step", &steps}} {
		after := ""
		for {
			b := s.get(tb, "GET", p.path+"&limit=100&after="+after, "")
			biggest = max(biggest, len(b))
			var page listPage
			if err := json.Unmarshal(b, &page); err != nil {
				tb.Fatal(err)
			}
			*p.n += len(page.Data)
			if !page.HasMore {
				break
			}
			after = page.LastID
		}
	}
	b := s.get(tb, "GET", "/v1/preview/training-jobs?model_id="+s.modelID+"&limit=20&order=desc", "")
	return checkpoints, steps, max(biggest, len(b))
}

// callsPage is the calls page's one query: a page of 51 (50 shown, one to
// know there are more) at offset, newest first, with the filter.
func (s scale) callsPage(tb testing.TB, offset int, filter string) []map[string]any {
	b := s.get(tb, "POST", "/calls/query", fmt.Sprintf(`{"project_id": "admin/scale", "filter": %s, "limit": 51, "offset": %d,
		"sort_by": [{"field": "started_at", "direction": "desc"}], "include_costs": true, "include_storage_size": true}`, filter, offset))
	var out struct {
		Calls []map[string]any `json:"calls"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		tb.Fatal(err)
	}
	return out.Calls
}

// TestDashboardAtScale: with a model of 1,000 steps and a project of
// 100,000 calls, every request a dashboard page makes is a bounded page
// (the model page: 11 + 10 pages of at most 100 items; the calls page: 51
// calls), and the pages hold the right items: every step in order, the
// newest calls first, deep offsets, the status and time filters.
func TestDashboardAtScale(t *testing.T) {
	steps, calls := 1000, 100_000
	if testing.Short() || raceEnabled {
		steps, calls = 100, 5_000 // the same paths; the full size runs without the race detector
	}
	s := seedScale(t, t.TempDir(), steps, calls)
	cks, gsteps, biggest := s.modelPage(t)
	if cks != steps+1 || gsteps != steps {
		t.Errorf("model page read %d checkpoints and %d gradient steps, want %d and %d", cks, gsteps, steps+1, steps)
	}
	if biggest > 128<<10 {
		t.Errorf("a model-page response has %d bytes", biggest)
	}
	var last listPage
	json.Unmarshal(s.get(t, "GET", "/v1/preview/models/"+s.modelID+"/checkpoints?order=desc&limit=1", ""), &last)
	var ck struct {
		Step    int                `json:"step"`
		Metrics map[string]float64 `json:"metrics"`
	}
	json.Unmarshal(last.Data[0], &ck)
	if want := float64(steps-1) / float64(steps); ck.Step != steps || ck.Metrics["reward"] != want || ck.Metrics["val/reward"] != want/2 {
		t.Errorf("latest checkpoint %+v", ck)
	}

	first := s.callsPage(t, 0, "{}")
	if len(first) != 51 || first[0]["id"] != callID(calls-1) {
		t.Fatalf("first page: %d calls, first %v", len(first), first[0]["id"])
	}
	deep := s.callsPage(t, calls-50, "{}")
	if len(deep) != 50 || deep[49]["id"] != callID(0) {
		t.Errorf("last page: %d calls, last %v", len(deep), deep[len(deep)-1]["id"])
	}
	// the dashboard's cursor paging reaches the oldest page without an offset
	oldest := s.callsPage(t, 0, fmt.Sprintf(`{"started_before": %q}`, s.start.Add(50*time.Millisecond).Format(time.RFC3339Nano)))
	if len(oldest) != 50 || oldest[0]["id"] != callID(49) || oldest[49]["id"] != callID(0) {
		t.Errorf("oldest page by cursor: %d calls", len(oldest))
	}
	errs := s.callsPage(t, 0, `{"statuses": ["error"], "op_names": ["op-0"]}`)
	for _, c := range errs {
		if c["exception"] != "boom" || c["op_name"] != "op-0" {
			t.Fatalf("error filter gave %v %v", c["id"], c["exception"])
		}
	}
	if len(errs) != 51 {
		t.Errorf("error filter: %d calls", len(errs))
	}
	// started in [start+1000ms, start+1010ms): calls 1000..1009
	window := s.callsPage(t, 0, fmt.Sprintf(`{"started_after": %q, "started_before": %q}`,
		s.start.Add(time.Second).Format(time.RFC3339Nano), s.start.Add(1010*time.Millisecond).Format(time.RFC3339Nano)))
	if len(window) != 10 || window[0]["id"] != callID(1009) || window[9]["id"] != callID(1000) {
		t.Errorf("time window: %d calls", len(window))
	}
	for _, bad := range []string{`{"statuses": ["nope"]}`, `{"started_after": "yesterday"}`} {
		req, _ := http.NewRequest("POST", s.url+"/calls/query", strings.NewReader(`{"project_id": "admin/scale", "filter": `+bad+`}`))
		req.Header.Set("Authorization", "Bearer "+s.key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 400 || !strings.Contains(string(b), "filter.") {
			t.Errorf("filter %s: %d %s", bad, res.StatusCode, b)
		}
	}
}

// BenchmarkDashboardModelPage: the model page's requests (docs/benchmarks.md)
// for a model of 1,000 steps.
func BenchmarkDashboardModelPage(b *testing.B) {
	s := seedScale(b, b.TempDir(), 1000, 0)
	b.ResetTimer()
	for range b.N {
		s.modelPage(b)
	}
}

// BenchmarkDashboardCallsPage: the calls page's query on a project of
// 100,000 calls: the newest page, the oldest page (by offset 99,950, and by
// the started_before cursor the dashboard pages with), and a
// filter nothing matches (op-3's errors: a scan of every call).
func BenchmarkDashboardCallsPage(b *testing.B) {
	s := seedScale(b, b.TempDir(), 0, 100_000)
	for _, c := range []struct {
		name, filter string
		offset       int
	}{{"newest", "{}", 0}, {"oldest-by-offset", "{}", 99_950},
		{"oldest-by-cursor", fmt.Sprintf(`{"started_before": %q}`, s.start.Add(50*time.Millisecond).Format(time.RFC3339Nano)), 0}, {"filter-matching-nothing", `{"statuses": ["error"], "op_names": ["op-3"]}`, 0}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				s.callsPage(b, c.offset, c.filter)
			}
		})
	}
}

// TestSeedDashboardDataDir writes the scale data set (a model of 1,000 steps,
// admin/scale/long, and the project admin/scale of 100,000 calls) into the
// data dir FLYWHEEL_UI_SEED_DIR, for the browser test (clients/ui-browser)
// to serve; the bootstrap key is FLYWHEEL_BOOTSTRAP_API_KEY. Skipped when
// the variable is unset.
func TestSeedDashboardDataDir(t *testing.T) {
	dir := os.Getenv("FLYWHEEL_UI_SEED_DIR")
	if dir == "" {
		t.Skip("FLYWHEEL_UI_SEED_DIR not set")
	}
	seedScale(t, dir, 1000, 100_000)
}
