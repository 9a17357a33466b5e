// Package app is the one constructor of the flywheel service: it opens the
// store, writes the built-in tiny model, creates the first user, and wires
// the engine registry, the call store, the trainer, the inference server,
// the checkpoint lifecycle, the job queue and the HTTP layer together.
// cmd/flywheel and the end-to-end tests both build the service with New, so
// what the tests run is the wiring that ships.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"flywheel/internal/api"
	"flywheel/internal/atomicfile"
	"flywheel/internal/checkpoints"
	"flywheel/internal/engine"
	"flywheel/internal/engine/tiny"
	"flywheel/internal/jobs"
	"flywheel/internal/runs"
	"flywheel/internal/serve"
	"flywheel/internal/store"
	"flywheel/internal/trace"
	"flywheel/internal/train"
	"flywheel/internal/ui"
)

// Config is what the service is built from; cmd/flywheel fills it from
// flags and environment variables (README.md lists them). Zero values mean
// the defaults noted.
type Config struct {
	DataDir string // database, checkpoints, uploads, job requests; created when missing (required)
	// Database is a PostgreSQL URL (postgres://...: several nodes may share
	// it and the data dir, see docs/deployment.md) or an SQLite path (PATH,
	// sqlite://PATH, file:PATH); default <DataDir>/flywheel.db.
	Database  string
	ModelsDir string // base models; default <DataDir>/models; created, with flywheel/tiny written into it

	// Workers is how many training jobs run in parallel across models;
	// 0 means none, an API-only node (as `flywheel serve --workers 0`;
	// the CLI's default is jobs.DefaultWorkers).
	Workers int
	// NodeID names this node in its job leases (default
	// jobs.DefaultNodeID); LeaseTimeout is how long a job of a node that
	// stopped renewing its lease waits before another node runs it
	// (default jobs.DefaultLeaseTimeout).
	NodeID       string
	LeaseTimeout time.Duration

	MaxBodyBytes int64 // request body limit; default api.DefaultMaxBodyBytes
	Version      string
	Logger       *slog.Logger // default slog.Default()

	// Connection timeouts (see Serve): ReadHeaderTimeout (default
	// DefaultReadHeaderTimeout) for a request's headers, IdleTimeout
	// (default DefaultIdleTimeout) for a kept-alive connection between
	// requests, BodyReadTimeout (default api.DefaultBodyReadTimeout) for a
	// request body between two reads that bring bytes.
	ReadHeaderTimeout, IdleTimeout, BodyReadTimeout time.Duration

	// Serve configures inference: the scheduler (MaxBatch, MaxQueue,
	// PrefillChunk, AdapterCacheSize, ...). Its Logger defaults to Logger.
	Serve serve.Options
	// MaxQueuedJobsPerUser bounds one user's QUEUED training jobs (see
	// api.Config.MaxQueuedJobsPerUser).
	MaxQueuedJobsPerUser int
	// TokensPerStep is the training packing budget per gradient step
	// (default: the trainer's).
	TokensPerStep int

	// PricesFile is a JSON file of the call store's default-level prices,
	// loaded at start; ServicePrice the per-token price of the service's
	// own models. Both optional.
	PricesFile   string
	ServicePrice *trace.TokenPrice

	// BootstrapKey is the API key of user admin, created when the database
	// has no API key (a fresh data dir); when empty a key is generated and
	// written to <DataDir>/admin-api-key (see App.BootstrapKeyFile). A key
	// store.ValidateKey refuses makes New fail before anything is written.
	BootstrapKey string

	// Trainer runs training jobs; nil means the built-in trainer
	// (internal/train) over the shared engine registry. The restart tests
	// of cmd/flywheel put a slow stand-in here.
	Trainer jobs.Trainer
}

// App is the built service. Its parts are exported for the CLI and tests
// that look inside (the store, the queue); the HTTP handler serves them all.
type App struct {
	DataDir, ModelsDir string // absolute

	Store       store.Database
	Models      *engine.Registry // base models, loaded once, shared by training and inference
	Calls       *trace.Service   // the call store
	Chat        *serve.Server    // chat completions, /v1/models, /tokenize
	Checkpoints *checkpoints.Manager
	Queue       *jobs.Queue
	Runs        *runs.Service // the training-run API and its executor

	// BootstrapKeyFile is where New wrote the generated key of user admin;
	// empty when no user was created or the key came from BootstrapKey.
	BootstrapKeyFile string

	layout  store.Layout // the data dir's paths
	handler *api.Server
	version string
	log     *slog.Logger
	closers []func() // run in reverse order by Close

	readHeaderTimeout, idleTimeout time.Duration
}

// New builds the service and starts its job queue: jobs interrupted by a
// previous process are re-queued and crash leftovers swept before New
// returns, so serve its Handler only after. Close releases everything.
func New(ctx context.Context, cfg Config) (a *App, err error) {
	if cfg.DataDir == "" {
		return nil, errors.New("app: no data dir")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// Checked before anything is written: a key that cannot be used must
	// not leave a half-made admin behind.
	if cfg.BootstrapKey != "" {
		if err := store.ValidateKey(cfg.BootstrapKey); err != nil {
			return nil, fmt.Errorf("FLYWHEEL_BOOTSTRAP_API_KEY: %w", err)
		}
	}
	a = &App{version: cfg.Version, log: cfg.Logger, readHeaderTimeout: cfg.ReadHeaderTimeout, idleTimeout: cfg.IdleTimeout}
	if a.readHeaderTimeout <= 0 {
		a.readHeaderTimeout = DefaultReadHeaderTimeout
	}
	if a.idleTimeout <= 0 {
		a.idleTimeout = DefaultIdleTimeout
	}
	built := a // "return nil, err" sets a to nil before this runs
	defer func() {
		if err != nil {
			a = built // the closers refer to a
			a.Close()
			a = nil
		}
	}()
	if a.Store, a.layout, err = store.OpenDataDir(ctx, cfg.DataDir, cfg.Database); err != nil {
		return nil, err
	}
	a.DataDir = a.layout.DataDir
	a.closers = append(a.closers, func() { a.Store.Close() })

	a.ModelsDir = cfg.ModelsDir
	if a.ModelsDir == "" {
		a.ModelsDir = a.layout.DefaultModelsDir()
	}
	if a.ModelsDir, err = filepath.Abs(a.ModelsDir); err != nil {
		return nil, fmt.Errorf("models dir: %w", err)
	}
	if err := os.MkdirAll(a.ModelsDir, 0o755); err != nil {
		return nil, fmt.Errorf("create models dir: %w", err)
	}
	if err := tiny.Ensure(a.ModelsDir); err != nil {
		return nil, fmt.Errorf("write the built-in tiny model: %w", err)
	}
	if err := a.bootstrap(ctx, cfg.BootstrapKey); err != nil {
		return nil, err
	}
	a.sweepUploads()

	a.Models = engine.NewRegistry(a.ModelsDir)
	topts := trace.Options{PricesFile: cfg.PricesFile, DefaultServicePrice: cfg.ServicePrice, Logger: cfg.Logger}
	topts.Dialect = a.Store.Dialect()
	if bases, err := a.Models.List(); err == nil {
		topts.BaseModels = bases
	}
	if a.Calls, err = trace.New(a.Store.DB(), topts); err != nil {
		return nil, fmt.Errorf("call store: %w", err)
	}
	a.closers = append(a.closers, func() { a.Calls.Close() })

	trainer := cfg.Trainer
	if trainer == nil {
		trainer = train.New(a.Models, train.Options{TokensPerStep: cfg.TokensPerStep, Logger: cfg.Logger})
	}
	sopts := cfg.Serve
	if sopts.Logger == nil {
		sopts.Logger = cfg.Logger
	}
	if sopts.Responses == nil {
		rs, ok := a.Store.(store.Responses)
		if !ok {
			return nil, errors.New("app: the store keeps no stored responses")
		}
		sopts.Responses = rs
	}
	a.Chat = serve.New(a.Models, serve.NewStoreResolver(a.Store), a.Calls, sopts)
	a.closers = append(a.closers, a.Chat.Close)

	a.Checkpoints = checkpoints.New(a.Store, a.layout, cfg.Logger, a.Store.Shared())
	a.Queue = jobs.New(a.Store, jobs.Config{DataDir: a.DataDir, ModelsDir: a.ModelsDir, Workers: cfg.Workers,
		NodeID: cfg.NodeID, LeaseTimeout: cfg.LeaseTimeout, Shared: a.Store.Shared(),
		Trainer: trainer, Checkpoints: a.Checkpoints, Logger: cfg.Logger})
	if err := a.Queue.Start(ctx); err != nil {
		return nil, err
	}
	a.closers = append(a.closers, a.shutdownQueue)

	rstore, ok := a.Store.(runs.Store)
	if !ok {
		return nil, errors.New("app: the store keeps no training runs")
	}
	a.Runs = runs.New(runs.Config{Store: rstore, Models: a.Models, ModelsDir: a.ModelsDir, Layout: a.layout,
		Checkpoints: a.Checkpoints, NodeID: cfg.NodeID, Shared: a.Store.Shared(),
		LeaseTTL: cfg.LeaseTimeout, Logger: cfg.Logger})
	if err := a.Runs.Start(ctx); err != nil {
		return nil, fmt.Errorf("training runs: %w", err)
	}
	a.closers = append(a.closers, a.Runs.Close)

	acfg := api.Config{Checkpoints: a.Checkpoints, DataDir: a.DataDir, ModelsDir: a.ModelsDir,
		MaxBodyBytes: cfg.MaxBodyBytes, BodyReadTimeout: cfg.BodyReadTimeout, Version: cfg.Version, Logger: cfg.Logger,
		Links: a.Calls, MaxQueuedJobsPerUser: cfg.MaxQueuedJobsPerUser}
	a.handler = api.New(acfg, a.Store, a.Queue, a.Chat, a.Calls, a.Runs, api.RegistrarFunc(ui.Register))
	a.Calls.ExtendGraphQL(a.handler.WandBGraphQL) // W&B artifacts on the one /graphql
	if err := a.handler.Registry().Register(a.Chat); err != nil {
		cfg.Logger.Warn("serve metrics not registered", "err", err)
	}
	return a, nil
}

// Handler serves the whole HTTP API (control plane, inference, call store,
// health and metrics) through the middleware.
func (a *App) Handler() http.Handler { return a.handler }

// Defaults of Config.ReadHeaderTimeout and Config.IdleTimeout.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
)

// Serve serves HTTP on ln until ctx ends, then drains the requests in
// flight (up to 30 s). It returns the listener's error when serving stops
// on its own; call Close afterwards either way.
//
// Timeouts: headers must arrive within ReadHeaderTimeout and an idle
// kept-alive connection is closed after IdleTimeout. There is deliberately no
// total ReadTimeout or WriteTimeout, which would cut slow-but-live uploads
// of large training payloads and long SSE streams: request bodies are held
// to a progress deadline instead (api.Config.BodyReadTimeout), and a
// stream's own client going away cancels it.
func (a *App) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{Handler: a.handler, ReadHeaderTimeout: a.readHeaderTimeout, IdleTimeout: a.idleTimeout,
		MaxHeaderBytes: 1 << 20, ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelWarn)}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	a.log.Info("flywheel listening", "addr", ln.Addr().String(), "data_dir", a.DataDir, "models_dir", a.ModelsDir,
		"workers", a.Queue.Workers(), "version", a.version)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	a.log.Info("shutting down: draining HTTP requests and re-queueing running jobs")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		a.log.Warn("HTTP shutdown", "err", err)
	}
	return nil
}

// Close stops the service: running training jobs are stopped and
// re-queued (waiting up to 30 s), the schedulers stop, and the call store
// and the database are closed. Stop serving the Handler first.
func (a *App) Close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
	a.closers = nil
}

func (a *App) shutdownQueue() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Queue.Shutdown(ctx); err != nil {
		a.log.Warn("job queue shutdown", "err", err)
	}
}

// bootstrap gives user admin (personal entity admin) a key when nobody can
// log in: the database holds no API key at all. The key is key, or a
// generated one written to <data-dir>/admin-api-key (mode 0600). User, key
// and key file are written together (store.Bootstrap): a failure leaves
// none of them, so the next start bootstraps again instead of leaving an
// admin nobody can log in as.
func (a *App) bootstrap(ctx context.Context, key string) error {
	path := a.layout.AdminKeyPath()
	wrote := false
	_, ok, err := a.Store.Bootstrap(ctx, "admin", "bootstrap", key, func(created string) error {
		if key != "" {
			return nil
		}
		if err := atomicfile.WriteFile(path, []byte(created+"\n"), store.FileMode); err != nil {
			return fmt.Errorf("write admin key: %w", err)
		}
		wrote = true
		return nil
	})
	if err != nil {
		if wrote {
			os.Remove(path) // the key it holds was never committed
		}
		return fmt.Errorf("bootstrap user admin: %w", err)
	}
	if !ok {
		return nil
	}
	if key != "" {
		a.log.Info("created user admin with the given bootstrap key")
		return nil
	}
	a.log.Info("created user admin; its API key is in the data dir", "file", filepath.Base(path))
	a.BootstrapKeyFile = path
	return nil
}

// sweepUploads removes uploads cut short by a crash (atomicfile's .tmp-*
// files under <data-dir>/files, and .part files of earlier versions): a
// request in flight when the process died, even by kill -9. Run at start-up, before requests are served.
// On a data dir shared with other nodes only files older than an hour go:
// a recent one may be another node's upload in progress.
func (a *App) sweepUploads() {
	removed, err := store.Sweep(a.layout.FilesDir(), a.Store.Shared(), func(name string) bool {
		return store.IsWork(name) || strings.HasSuffix(name, ".part")
	})
	for _, name := range removed {
		a.log.Info("removed an upload interrupted by a restart", "file", name)
	}
	if err != nil {
		a.log.Warn("remove an interrupted upload", "err", err)
	}
}
