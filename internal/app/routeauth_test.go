package app_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"flywheel/internal/api"
	"flywheel/internal/app"
	"flywheel/internal/httpx"
	"flywheel/internal/jobs"
)

// Every route of the wired app keeps its group, declared where it is
// registered: Bearer for the OpenAI-style API, Basic or Bearer for the
// Weave-compatible trace server (calls, costs, objects, files, tables,
// feedback, refs, OTLP export, the /v2 call writes, and the W&B GraphQL
// questions of Weave's Python SDK, all with the {"reason"} envelope) and
// W&B's file_stream (OpenAI envelope), none for health probes, server
// info, UI assets, metrics and the W&B upload URLs (a one-use token).
func TestRouteGroups(t *testing.T) {
	a := newApp(t, app.Config{DataDir: t.TempDir(), BootstrapKey: "fw_app_test_key_0123456789", Workers: jobs.DefaultWorkers})
	defer a.Close()
	srv := a.Handler().(*api.Server)
	none, bearer, callStore, wandb := httpx.Public, httpx.OpenAIAPI, httpx.CallStore, httpx.WandB
	for req, want := range map[string]httpx.Group{
		"GET /v1/health": none, "POST /v1/health": none, "GET /v1/system-check": none, "GET /health": none, "GET /server_info": none,
		"GET /metrics": none, "GET /ui/": none, "GET /ui": none, "GET /ui/app.js": none, "PUT /wandb/uploads/t": none,
		"POST /v1/chat/completions": bearer, "POST /tokenize": bearer, "GET /tokenize": bearer, "POST /detokenize": bearer,
		"POST /v1/completions": bearer, "POST /v1/responses": bearer, "GET /v1/models": bearer, "GET /v1/models/a/b": bearer,
		"POST /v1/training/runs:resolve": bearer, "GET /v1/training/runs/r/operations/o": bearer,
		"POST /v1/preview/models": bearer, "GET /v1/preview/training-jobs": bearer, "POST /v1/preview/sft-training-jobs": bearer,
		"POST /v1/files": bearer, "GET /v1/files/f/content": bearer, "GET /v1/no/such/route": bearer, "GET /v1": bearer,
		"POST /call/read": callStore, "POST /calls/stream_query": callStore, "GET /calls/projects": callStore, "POST /cost/create": callStore,
		"POST /obj/create": callStore, "POST /objs/query": callStore, "POST /file/create": callStore, "POST /file/content": callStore,
		"POST /table/query": callStore, "POST /feedback/create": callStore, "POST /feedback/batch/create": callStore,
		"POST /refs/read_batch": callStore, "POST /graphql": callStore, "GET /graphql": callStore, "POST /otel/v1/traces": callStore,
		"POST /v2/alice/p1/calls/complete": callStore, "POST /v2/alice/p1/call/start": callStore, "POST /v2/alice/p1/call/end": callStore,
		"POST /call/no_such_route":      callStore,
		"POST /files/e/p/r/file_stream": wandb,
		"GET /v2/alice/p1/datasets":     none, "GET /no/such/route": none, "GET /call": none, // not served: the mux's 404
	} {
		method, path, _ := strings.Cut(req, " ")
		if got := srv.RouteGroup(httptest.NewRequest(method, path, nil)); got != want {
			t.Errorf("%s: group %+v, want %+v", req, got, want)
		}
	}
}
