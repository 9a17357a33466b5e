package api_test

import (
	"net/http"
	"testing"

	"flywheel/internal/api"
	"flywheel/internal/httpx"
)

// A route mounted without declaring a group is denied (401, in a JSON
// envelope) even with a valid key, and a path no route matches is a 404:
// nothing is public unless its registrar says so. The full table of every
// route's group is internal/app's TestRouteGroups (the app's wiring).
func TestUndeclaredRouteDenied(t *testing.T) {
	served := false
	undeclared := api.RegistrarFunc(func(rt *httpx.Routes) {
		rt.In(httpx.Group{}).HandleFunc("GET /secret/{thing}", func(w http.ResponseWriter, r *http.Request) {
			served = true
			httpx.WriteJSON(w, 200, map[string]any{"leaked": true})
		})
	})
	e := newEnv(t, envOpts{extra: []api.Registrar{undeclared}, noAuthTT: true})
	for _, key := range []string{"", e.alice} {
		r := e.do("GET", "/secret/x", key, nil)
		if r.status != http.StatusUnauthorized || r.errCode() != "invalid_api_key" {
			t.Errorf("undeclared route with key %q: %d %s, want 401 invalid_api_key", key, r.status, r.raw)
		}
	}
	if served {
		t.Error("the undeclared route's handler ran")
	}
	if r := e.do("GET", "/no/such/route", "", nil); r.status != http.StatusNotFound || r.errCode() != "not_found" {
		t.Errorf("unknown path: %d %s, want 404 not_found", r.status, r.raw)
	}
	if r := e.do("GET", "/v1/no/such/route", "", nil); r.status != http.StatusUnauthorized {
		t.Errorf("unknown path under /v1 without a key: %d %s, want 401", r.status, r.raw)
	}
	if r := e.do("GET", "/v1/no/such/route", e.alice, nil); r.status != http.StatusNotFound || r.errCode() != "not_found" {
		t.Errorf("unknown path under /v1: %d %s, want 404 not_found", r.status, r.raw)
	}
}
