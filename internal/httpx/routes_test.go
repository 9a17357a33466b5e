package httpx

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Lookup gives a matched route its declared group (the zero, denied Group
// when none was declared), a path served under other methods the group of
// that route, an unmatched path the group of its longest declared prefix
// (a prefix without a final slash only itself), and anything else Public.
func TestRoutesLookup(t *testing.T) {
	rt := NewRoutes(http.NewServeMux())
	nop := func(http.ResponseWriter, *http.Request) {}
	rt.In(CallStore).HandleFunc("POST /call/read", nop)
	rt.In(Public).HandleFunc("GET /v1/health", nop)
	rt.In(Group{}).HandleFunc("GET /forgot", nop)
	rt.Prefix(OpenAIAPI, "/v1/", "/v1")
	rt.Prefix(CallStore, "/call/")
	rt.Mux().HandleFunc("/", nop)
	for req, want := range map[string]struct {
		pattern string
		g       Group
	}{
		"POST /call/read":     {"POST /call/read", CallStore},
		"GET /call/read":      {"", CallStore},
		"GET /call/other":     {"", CallStore},
		"GET /call":           {"", Public},
		"POST /v1/health":     {"", Public},
		"GET /v1/x/y":         {"", OpenAIAPI},
		"GET /v1":             {"", OpenAIAPI},
		"GET /v1x":            {"", Public},
		"GET /forgot":         {"GET /forgot", Group{}},
		"GET /nowhere/at/all": {"", Public},
	} {
		method, path, _ := strings.Cut(req, " ")
		pattern, g := rt.Lookup(httptest.NewRequest(method, path, nil))
		if pattern != want.pattern || g != want.g {
			t.Errorf("%s: %q %+v, want %q %+v", req, pattern, g, want.pattern, want.g)
		}
	}
	if (Group{}).Auth != AuthUndeclared {
		t.Error("the zero Group is not denied")
	}
}
