package httpx

import (
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"flywheel/internal/auth"
)

// Auth is how a route group authenticates its callers. Its zero value,
// AuthUndeclared, is what a route mounted without a group gets: the server's
// middleware denies it (401), so a new route is never public by accident.
type Auth int

const (
	// AuthUndeclared marks a route whose registrar declared no group; it is
	// denied.
	AuthUndeclared Auth = iota
	// AuthNone: public (health probes, server info, UI assets, metrics, and
	// URLs whose path holds a one-use secret).
	AuthNone
	// AuthBearer: Authorization: Bearer <API key> (the OpenAI-style API).
	AuthBearer
	// AuthBasicBearer: Basic base64(user:API key) or Bearer (the
	// Weave-compatible call store and W&B's SDK).
	AuthBasicBearer
)

// Envelope is the shape of a route group's error bodies.
type Envelope int

const (
	// EnvelopeOpenAI: {"error": {"message", "type", "code"}}.
	EnvelopeOpenAI Envelope = iota
	// EnvelopeReason: {"reason": "..."} (Weave's trace server).
	EnvelopeReason
)

// Group is a route group: how its routes authenticate and how they write
// errors. Each registrar names the group of every route it mounts.
type Group struct {
	Name     string
	Auth     Auth
	Envelope Envelope
}

// The route groups of flywheel.
var (
	// Public routes need no key: health, system check, server info, UI
	// assets, metrics, and the W&B upload URLs (their path holds a one-use
	// secret token).
	Public = Group{Name: "public", Auth: AuthNone, Envelope: EnvelopeOpenAI}
	// OpenAIAPI is the Bearer-authenticated API under /v1 (and /tokenize,
	// /detokenize), with OpenAI's error envelope.
	OpenAIAPI = Group{Name: "openai", Auth: AuthBearer, Envelope: EnvelopeOpenAI}
	// CallStore is the Weave-compatible trace server: Basic or Bearer,
	// {"reason"} errors.
	CallStore = Group{Name: "callstore", Auth: AuthBasicBearer, Envelope: EnvelopeReason}
	// WandB is what W&B's SDK calls with its Basic credentials (file_stream),
	// with OpenAI's error envelope.
	WandB = Group{Name: "wandb", Auth: AuthBasicBearer, Envelope: EnvelopeOpenAI}
)

// WriteError writes err in the group's envelope.
func (g Group) WriteError(w http.ResponseWriter, err error) {
	if g.Envelope == EnvelopeReason {
		WriteReason(w, err)
		return
	}
	WriteOpenAIError(w, err)
}

// Routes is the root mux as registrars see it: every pattern is mounted
// with its group, and every path prefix a group owns (for the 401/404 of
// paths no pattern matches) is declared the same way.
type Routes struct {
	mux      *http.ServeMux
	log      *slog.Logger // where the handler adapter logs failed requests
	mu       sync.RWMutex
	groups   map[string]Group // by pattern
	prefixes map[string]Group // by path prefix ending in "/"
}

// NewRoutes wraps mux.
func NewRoutes(mux *http.ServeMux) *Routes {
	return &Routes{mux: mux, groups: map[string]Group{}, prefixes: map[string]Group{}}
}

// SetLogger sets where the handler adapter (GroupMux.Route) logs the
// requests that failed with a 5xx; slog.Default() until set.
func (rt *Routes) SetLogger(l *slog.Logger) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.log = l
}

func (rt *Routes) logger() *slog.Logger {
	rt.mu.RLock()
	defer rt.mu.RUnlock()
	if rt.log == nil {
		return slog.Default()
	}
	return rt.log
}

// Mux returns the underlying mux (to serve it).
func (rt *Routes) Mux() *http.ServeMux { return rt.mux }

// In returns a mux that mounts routes in group g.
func (rt *Routes) In(g Group) *GroupMux { return &GroupMux{rt: rt, g: g} }

// Prefix declares that the paths no pattern matches under each prefix (a
// prefix ending in "/" holds its subtree, any other only itself) belong
// to g: they are authenticated as g's routes are and answered 404/405 in
// its envelope.
func (rt *Routes) Prefix(g Group, prefixes ...string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, p := range prefixes {
		rt.prefixes[p] = g
	}
}

// Lookup returns the pattern r matches ("" when none but the catch-all)
// and its group. A path no pattern matches takes the group of a pattern
// that matches it under another method (so a 405 is authenticated as the
// route is), else of its longest declared prefix, else Public (a plain
// 404).
func (rt *Routes) Lookup(r *http.Request) (string, Group) {
	_, pattern := rt.mux.Handler(r)
	rt.mu.RLock()
	defer rt.mu.RUnlock()
	if pattern != "" && pattern != "/" {
		return pattern, rt.groups[pattern] // undeclared: the zero Group, denied
	}
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		if m == r.Method {
			continue
		}
		r2 := *r
		r2.Method = m
		if _, p := rt.mux.Handler(&r2); p != "" && p != "/" {
			return "", rt.groups[p]
		}
	}
	best, g := "", Public
	for p, pg := range rt.prefixes {
		under := r.URL.Path == p || strings.HasSuffix(p, "/") && strings.HasPrefix(r.URL.Path, p)
		if under && len(p) > len(best) {
			best, g = p, pg
		}
	}
	return "", g
}

// GroupMux mounts routes in one group.
type GroupMux struct {
	rt     *Routes
	g      Group
	mapErr func(error) error // a package's domain errors to *Error; nil: none
}

// MapErrors returns a mux of the same group whose Route handlers pass a
// returned error through mapErr before it is answered: where a package
// turns its domain errors (a store's not-found) into *Error once, instead
// of in every handler. Errors mapErr leaves alone are answered as AsError
// says.
func (m *GroupMux) MapErrors(mapErr func(error) error) *GroupMux {
	return &GroupMux{rt: m.rt, g: m.g, mapErr: mapErr}
}

// Route mounts fn at pattern in the group through the handler adapter: an
// error fn returns is answered in the group's envelope (see HandlerFunc).
func (m *GroupMux) Route(pattern string, fn HandlerFunc) {
	m.Handle(pattern, m.adapt(fn))
}

// Handle mounts h at pattern in the group.
func (m *GroupMux) Handle(pattern string, h http.Handler) {
	m.rt.mu.Lock()
	m.rt.groups[pattern] = m.g
	m.rt.mu.Unlock()
	m.rt.mux.Handle(pattern, h)
}

// HandleFunc mounts h at pattern in the group.
func (m *GroupMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

// Principal returns the caller the middleware authenticated for r's route
// group, or a 401 when there is none (a route of the Public group, or a
// handler served without the middleware). It is the one way handlers get
// the caller.
func Principal(r *http.Request) (*auth.Principal, error) {
	if p, ok := auth.FromContext(r.Context()); ok && p != nil {
		return p, nil
	}
	return nil, &Error{Status: http.StatusUnauthorized, Code: "invalid_api_key",
		Message: "authentication required: send the API key as a Bearer token (or, on the call store, as the Basic auth password)"}
}
