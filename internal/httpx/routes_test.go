package httpx

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"flywheel/internal/auth"
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

// Principal is the caller the middleware put in the context, or a 401
// (never an empty principal) when there is none.
func TestPrincipal(t *testing.T) {
	r := httptest.NewRequest("GET", "/v1/files", nil)
	if p, err := Principal(r); p != nil || err == nil || err.(*Error).Status != http.StatusUnauthorized {
		t.Errorf("no caller: %v, %v; want nil and a 401", p, err)
	}
	want := &auth.Principal{UserID: "u1", UserName: "alice", Entities: []string{"alice"}}
	r = r.WithContext(auth.WithPrincipal(r.Context(), want))
	if p, err := Principal(r); p != want || err != nil {
		t.Errorf("caller: %v, %v; want %v", p, err, want)
	}
}
