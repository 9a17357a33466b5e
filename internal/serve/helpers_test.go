package serve

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"

	"flywheel/internal/auth"
	"flywheel/internal/engine"
	"flywheel/internal/engine/tiny"
	"flywheel/internal/httpx"
	"flywheel/internal/store"
)

const testKey = "test-key"

var (
	modelsOnce sync.Once
	modelsDir  string
	modelsErr  error
	sharedReg  *engine.Registry
)

func TestMain(m *testing.M) {
	code := m.Run()
	if modelsDir != "" {
		os.RemoveAll(modelsDir)
	}
	os.Exit(code)
}

// testRegistry returns a registry holding flywheel/tiny, shared by tests.
func testRegistry(t testing.TB) *engine.Registry {
	t.Helper()
	modelsOnce.Do(func() {
		modelsDir, modelsErr = os.MkdirTemp("", "serve-models-")
		if modelsErr != nil {
			return
		}
		if modelsErr = tiny.Ensure(modelsDir); modelsErr != nil {
			return
		}
		sharedReg = engine.NewRegistry(modelsDir)
	})
	if modelsErr != nil {
		t.Fatal(modelsErr)
	}
	return sharedReg
}

var testPrincipal = &auth.Principal{UserID: "u1", UserName: "alice", PersonalEntity: "alice", Entities: []string{"alice", "team"}, KeyID: "k1"}

// authMiddleware is a test stand-in for internal/api's Bearer auth.
func authMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testKey {
			httpx.WriteOpenAIError(w, &httpx.Error{Status: http.StatusUnauthorized, Message: "invalid API key", Code: "invalid_api_key"})
			return
		}
		next.ServeHTTP(w, r.WithContext(auth.WithPrincipal(r.Context(), testPrincipal)))
	})
}

// fakeRecorder records calls in memory.
type fakeRecorder struct {
	mu    sync.Mutex
	calls []recordedCall
	fail  bool
}

type recordedCall struct {
	Project, Op             string
	Inputs, Output, Summary json.RawMessage
	Exception               string
	ID                      string
	StartedAt, EndedAt      time.Time
}

func (f *fakeRecorder) RecordCall(ctx context.Context, p *auth.Principal, projectID, opName string, startedAt, endedAt time.Time, inputs, output, summary json.RawMessage, exception string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return "", context.DeadlineExceeded
	}
	id := randomID("call-", 12)
	f.calls = append(f.calls, recordedCall{projectID, opName, inputs, output, summary, exception, id, startedAt, endedAt})
	return id, nil
}

func (f *fakeRecorder) last() (recordedCall, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) == 0 {
		return recordedCall{}, false
	}
	return f.calls[len(f.calls)-1], true
}

type testEnv struct {
	srv    *Server
	http   *httptest.Server
	client openai.Client
	rec    *fakeRecorder
	res    *fakeResolver
	reg    *engine.Registry
}

func newTestEnv(t testing.TB, opts Options) *testEnv {
	t.Helper()
	return newTestEnvWith(t, testRegistry(t), opts)
}

// newTestEnvWith is newTestEnv over the base models of reg.
func newTestEnvWith(t testing.TB, reg *engine.Registry, opts Options) *testEnv {
	t.Helper()
	rec := &fakeRecorder{}
	res := &fakeResolver{}
	if opts.Responses == nil {
		db, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "flywheel.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		opts.Responses = db
	}
	srv := New(reg, res, rec, opts)
	mux := http.NewServeMux()
	srv.Register(httpx.NewRoutes(mux))
	hs := httptest.NewServer(authMiddleware(mux))
	t.Cleanup(func() {
		hs.Close()
		srv.Close()
	})
	client := openai.NewClient(option.WithBaseURL(hs.URL+"/v1/"), option.WithAPIKey(testKey), option.WithMaxRetries(0))
	return &testEnv{srv: srv, http: hs, client: client, rec: rec, res: res, reg: reg}
}

// fakeResolver serves trained models from a map.
type fakeResolver struct {
	mu      sync.Mutex
	targets map[string]Target // by "entity/project/name:stepN" and "entity/project/name" (latest)
}

func (f *fakeResolver) Resolve(ctx context.Context, p *auth.Principal, model string) (Target, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ref, _ := ParseModelRef(model)
	if !p.Member(ref.Entity) {
		return Target{}, ModelNotFound("model %q not found", model)
	}
	if t, ok := f.targets[model]; ok {
		return t, nil
	}
	base := ref.Entity + "/" + ref.Project + "/" + ref.Name
	if _, ok := f.targets[base]; ok && ref.Step >= 0 {
		return Target{}, ModelNotFound("model %s has no checkpoint at step %d", base, ref.Step)
	}
	return Target{}, ModelNotFound("model %q not found", model)
}

func (f *fakeResolver) List(ctx context.Context, p *auth.Principal) ([]Target, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Target
	for k, t := range f.targets {
		if !strings.Contains(k, ":") && p.Member(t.Entity) {
			out = append(out, t)
		}
	}
	return out, nil
}

func (f *fakeResolver) add(key string, t Target) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.targets == nil {
		f.targets = map[string]Target{}
	}
	f.targets[key] = t
}

// gatherMetrics collects srv's metrics: each counter's or gauge's value by
// name (the last series of a labelled one).
func gatherMetrics(t *testing.T, srv *Server) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(srv)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				found[mf.GetName()] = m.Counter.GetValue()
			case m.Gauge != nil:
				found[mf.GetName()] = m.Gauge.GetValue()
			}
		}
	}
	return found
}
