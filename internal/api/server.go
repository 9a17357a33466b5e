// Package api is flywheel's HTTP layer: it builds the root mux, mounts the
// control-plane routes (models, checkpoints, training jobs, files, health)
// and the routes of other packages (Registrars), and wraps everything in the
// cross-cutting middleware: request ids, structured logs, panic recovery,
// Prometheus metrics, body limits and authentication.
//
// Handlers only translate between the wire format of the contract
// (docs: api.md) and the store, the checkpoint lifecycle and the job queue.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"flywheel/internal/checkpoints"
	"flywheel/internal/httpx"
	"flywheel/internal/jobs"
	"flywheel/internal/store"
	"flywheel/internal/trace"
)

// Registrar mounts a package's routes on the root mux, with Go 1.22
// patterns ("POST /call/read"). Routes are wrapped in the server's
// middleware: by the time a handler of an authenticated group runs,
// httpx.Principal returns the caller.
//
// A registrar names the group of every route where it mounts it
// (rt.In(httpx.CallStore).Route(...)): the group decides the route's
// authentication and error envelope. A route mounted without a group is
// denied (401), and a path no route matches is a 404, so nothing is public
// unless its registrar says so (httpx.Public).
type Registrar interface {
	Register(rt *httpx.Routes)
}

// RegistrarFunc adapts a function to Registrar.
type RegistrarFunc func(rt *httpx.Routes)

// Register calls f(rt).
func (f RegistrarFunc) Register(rt *httpx.Routes) { f(rt) }

// Queue is the job queue as the handlers use it (implemented by
// *jobs.Queue).
type Queue interface {
	// Prepare starts storing a job's request body while it is read and
	// validated; the pending job is then submitted or discarded.
	Prepare() (*jobs.Pending, error)
	// Cancel cancels a queued or running job.
	Cancel(ctx context.Context, id string) error
}

// DefaultMaxBodyBytes is the default request body limit (256 MiB).
const DefaultMaxBodyBytes = 256 << 20

// Config configures the HTTP server.
type Config struct {
	// Checkpoints creates and deletes models' checkpoint folders (required).
	Checkpoints  *checkpoints.Manager
	DataDir      string // absolute data dir (uploaded files)
	ModelsDir    string // absolute models dir (base models)
	MaxBodyBytes int64  // request body limit; default DefaultMaxBodyBytes
	Version      string // reported by /v1/health
	Logger       *slog.Logger
	// Registry receives the server's metrics; a new registry (with Go and
	// process collectors) when nil. It is served at /metrics.
	Registry *prometheus.Registry
	// AuthCacheTTL is how long a resolved API key is cached; default 5s,
	// negative disables the cache.
	AuthCacheTTL time.Duration
	// BodyReadTimeout is how long a request body may go without bringing a
	// byte before its read fails and the connection is closed (a progress
	// deadline, not a total one: slow but live uploads go on); default
	// DefaultBodyReadTimeout.
	BodyReadTimeout time.Duration
	// Links finds the calls behind trained-on choices (the checkpoint
	// trajectories route); nil: choices show no call.
	Links trace.ChoiceLinker
	// MaxQueuedJobsPerUser bounds the QUEUED training jobs of one user;
	// past it a job request is 429 with retry-after (default
	// DefaultMaxQueuedJobsPerUser; negative: no limit).
	MaxQueuedJobsPerUser int
}

// DefaultBodyReadTimeout is Config.BodyReadTimeout's default.
const DefaultBodyReadTimeout = 60 * time.Second

// DefaultMaxQueuedJobsPerUser is Config.MaxQueuedJobsPerUser's default.
const DefaultMaxQueuedJobsPerUser = 64

// Server is the HTTP server's handler.
type Server struct {
	cfg     Config
	st      store.Store
	q       Queue
	mux     *http.ServeMux
	rt      *httpx.Routes   // mux with each route's group
	public  *httpx.GroupMux // routes in httpx.Public
	openai  *httpx.GroupMux // routes in httpx.OpenAIAPI
	handler http.Handler
	layout  store.Layout
	ck      *checkpoints.Manager
	log     *slog.Logger
	metrics *metrics
	auth    *authCache
	started time.Time
	wandb   artifacts // W&B artifacts being logged (wandb.go)
}

// New builds the server over a store and a job queue, mounting the routes
// of extra registrars beside its own.
func New(cfg Config, st store.Store, q Queue, extra ...Registrar) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.BodyReadTimeout <= 0 {
		cfg.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if cfg.MaxQueuedJobsPerUser == 0 {
		cfg.MaxQueuedJobsPerUser = DefaultMaxQueuedJobsPerUser
	}
	if cfg.AuthCacheTTL == 0 {
		cfg.AuthCacheTTL = 5 * time.Second
	}
	if abs, err := filepath.Abs(cfg.DataDir); err == nil {
		cfg.DataDir = abs
	}
	if abs, err := filepath.Abs(cfg.ModelsDir); err == nil {
		cfg.ModelsDir = abs
	}
	s := &Server{
		cfg: cfg, st: st, q: q, mux: http.NewServeMux(),
		layout: store.Layout{DataDir: cfg.DataDir}, ck: cfg.Checkpoints, log: cfg.Logger,
		auth: newAuthCache(cfg.AuthCacheTTL), started: time.Now(),
	}
	s.rt = httpx.NewRoutes(s.mux)
	s.rt.SetLogger(cfg.Logger)
	s.public = s.rt.In(httpx.Public).MapErrors(storeErrors)
	s.openai = s.rt.In(httpx.OpenAIAPI).MapErrors(storeErrors)
	s.metrics = newMetrics(cfg.Registry, st)
	s.routes()
	for _, r := range extra {
		r.Register(s.rt)
	}
	s.handler = s.middleware(s.mux)
	return s
}

// RouteGroup returns the group r is authenticated and answered in.
func (s *Server) RouteGroup(r *http.Request) httpx.Group {
	_, g := s.rt.Lookup(r)
	return g
}

// ServeHTTP serves a request through the middleware and the root mux.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Registry returns the Prometheus registry served at /metrics, so other
// packages can add collectors.
func (s *Server) Registry() *prometheus.Registry { return s.metrics.reg }

func (s *Server) routes() {
	s.registerHealth()
	s.registerModels()
	s.registerJobs()
	s.registerFiles()
	s.registerWandB()
	s.registerDashboard()
	s.rt.Prefix(httpx.OpenAIAPI, "/v1/", "/v1")
	s.public.Handle("GET /metrics", s.metrics.handler())
	s.mux.HandleFunc("/", s.noRoute) // the catch-all: no route, in the path's group

}

// noRoute answers requests no pattern matched: 405 (with Allow) when the
// path exists for other methods, else 404, in the route group's envelope.
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) {
	var allowed []string
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		if m == r.Method {
			continue
		}
		r2 := r.Clone(r.Context())
		r2.Method = m
		if _, pattern := s.mux.Handler(r2); pattern != "/" && pattern != "" {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) > 0 {
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeError(w, r, &httpx.Error{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed",
			Message: fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allowed, ", "))})
		return
	}
	writeError(w, r, httpx.NotFound("no route for %s %s", r.Method, r.URL.Path))
}

// storeErrors is this package's domain-to-HTTP error mapping (the
// handler adapter, httpx.GroupMux.Route, applies it): the store's
// sentinels become 404 and 409.
func storeErrors(err error) error {
	var he *httpx.Error
	switch {
	case errors.As(err, &he):
		return he
	case errors.Is(err, store.ErrNotFound):
		return httpx.NotFound("not found")
	case errors.Is(err, store.ErrConflict):
		return &httpx.Error{Status: http.StatusConflict, Message: "conflict", Code: "conflict"}
	}
	return err
}
