package api

import "testing"

// Every route group gets its authentication: Bearer for the OpenAI-style
// API, Basic or Bearer for the Weave-compatible trace server (calls, costs,
// objects, files), none for health probes.
func TestRouteAuth(t *testing.T) {
	for path, want := range map[string]authMode{
		"/v1/health": authNone, "/v1/system-check": authNone, "/health": authNone, "/server_info": authNone,
		"/v1/chat/completions": authBearer, "/tokenize": authBearer, "/v1/training/runs:resolve": authBearer, "/v1/training/runs/r/operations/o": authBearer, "/detokenize": authBearer,
		"/call/read": authBasicBearer, "/calls/stream_query": authBasicBearer, "/cost/create": authBasicBearer,
		"/obj/create": authBasicBearer, "/objs/query": authBasicBearer, "/file/create": authBasicBearer, "/file/content": authBasicBearer,
	} {
		if got := routeAuth(path); got != want {
			t.Errorf("%s: auth %d, want %d", path, got, want)
		}
	}
}
