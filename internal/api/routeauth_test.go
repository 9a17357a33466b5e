package api

import "testing"

// Every route group gets its authentication: Bearer for the OpenAI-style
// API, Basic or Bearer for the Weave-compatible trace server (calls, costs,
// objects, files, tables, feedback, refs, OTLP export, the /v2 call writes,
// and the W&B GraphQL questions of Weave's Python SDK), none for health
// probes.
func TestRouteAuth(t *testing.T) {
	for path, want := range map[string]authMode{
		"/v1/health": authNone, "/v1/system-check": authNone, "/health": authNone, "/server_info": authNone,
		"/v1/chat/completions": authBearer, "/tokenize": authBearer, "/v1/training/runs:resolve": authBearer, "/v1/training/runs/r/operations/o": authBearer, "/detokenize": authBearer,
		"/call/read": authBasicBearer, "/calls/stream_query": authBasicBearer, "/cost/create": authBasicBearer,
		"/obj/create": authBasicBearer, "/objs/query": authBasicBearer, "/file/create": authBasicBearer, "/file/content": authBasicBearer,
		"/table/query": authBasicBearer, "/feedback/create": authBasicBearer, "/feedback/batch/create": authBasicBearer,
		"/refs/read_batch": authBasicBearer, "/graphql": authBasicBearer, "/files/e/p/r/file_stream": authBasicBearer, "/wandb/uploads/t": authNone, "/otel/v1/traces": authBasicBearer,
		"/v2/alice/p1/calls/complete": authBasicBearer, "/v2/alice/p1/call/start": authBasicBearer, "/v2/alice/p1/call/end": authBasicBearer,
		"/v2/alice/p1/datasets": authNone, // not served: the mux's 404
	} {
		if got := routeAuth(path); got != want {
			t.Errorf("%s: auth %d, want %d", path, got, want)
		}
	}
}
