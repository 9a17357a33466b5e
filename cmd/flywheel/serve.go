package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"flywheel/internal/api"
	"flywheel/internal/checkpoints"
	"flywheel/internal/engine/tiny"
	"flywheel/internal/jobs"
	"flywheel/internal/store"
)

// serveEnv is what the service's parts are built from; wire receives it.
type serveEnv struct {
	Store     *store.SQLite // Store.DB() for packages keeping their own tables
	DataDir   string        // absolute
	ModelsDir string        // absolute
	Logger    *slog.Logger
	Registry  *prometheus.Registry // Prometheus registry served at /metrics
}

// wired is what other packages contribute to the service.
type wired struct {
	Trainer    jobs.Trainer    // nil: training jobs fail with a clear error
	Registrars []api.Registrar // extra route groups (call store, chat completions, ...)
	Close      func()          // optional, called at shutdown after the HTTP server stopped
}

// defaultLRer is implemented by trainers whose default learning rate
// depends on the base model.
type defaultLRer interface {
	DefaultLR(baseModel string) float64
}

// wire builds the trainer and the extra route groups (see wire.go). Tests
// replace it to inject a stand-in trainer.
var wire = wireService

// serveCmd runs the HTTP service until SIGINT or SIGTERM.
func serveCmd(args []string, stderr io.Writer) error {
	var d dataFlags
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	d.register(fs)
	addr := fs.String("addr", envOr("FLYWHEEL_ADDR", "127.0.0.1:8080"), "listen address (env FLYWHEEL_ADDR)")
	modelsDir := fs.String("models-dir", envOr("FLYWHEEL_MODELS_DIR", ""), "base models directory (env FLYWHEEL_MODELS_DIR; default <data-dir>/models)")
	workers := fs.Int("workers", envInt("FLYWHEEL_WORKERS", 2), "training jobs run in parallel across models (env FLYWHEEL_WORKERS)")
	maxBody := fs.Int64("max-body-bytes", envInt64("FLYWHEEL_MAX_BODY_BYTES", api.DefaultMaxBodyBytes), "request body limit in bytes (env FLYWHEEL_MAX_BODY_BYTES)")
	logFormat := fs.String("log-format", envOr("FLYWHEEL_LOG_FORMAT", "text"), "log format: text or json (env FLYWHEEL_LOG_FORMAT)")
	logLevel := fs.String("log-level", envOr("FLYWHEEL_LOG_LEVEL", "info"), "log level: debug, info, warn, error (env FLYWHEEL_LOG_LEVEL)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	var handler slog.Handler
	switch *logFormat {
	case "json":
		handler = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level})
	case "text":
		handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})
	default:
		return fmt.Errorf("--log-format must be text or json, got %q", *logFormat)
	}
	log := slog.New(handler)
	slog.SetDefault(log)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	st, err := d.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	if *modelsDir == "" {
		*modelsDir = filepath.Join(d.dataDir, "models")
	}
	if *modelsDir, err = filepath.Abs(*modelsDir); err != nil {
		return err
	}
	if err := os.MkdirAll(*modelsDir, 0o755); err != nil {
		return fmt.Errorf("create models dir: %w", err)
	}
	if err := tiny.Ensure(*modelsDir); err != nil {
		return fmt.Errorf("write the built-in tiny model: %w", err)
	}
	if err := bootstrap(ctx, st, d.dataDir, stderr, log); err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	w, err := wire(serveEnv{Store: st, DataDir: d.dataDir, ModelsDir: *modelsDir, Logger: log, Registry: reg})
	if err != nil {
		return err
	}
	if w.Close != nil {
		defer w.Close()
	}
	ck := checkpoints.New(st, store.Layout{DataDir: d.dataDir}, log)
	q := jobs.New(st, jobs.Config{DataDir: d.dataDir, ModelsDir: *modelsDir, Workers: *workers, Trainer: w.Trainer, Checkpoints: ck, Logger: log})
	if err := q.Start(ctx); err != nil {
		return err
	}
	if w.Trainer == nil {
		log.Warn("no trainer is wired into this build: training jobs will fail with a clear error")
	}
	cfg := api.Config{
		Checkpoints: ck, DataDir: d.dataDir, ModelsDir: *modelsDir, MaxBodyBytes: *maxBody, Version: version, Logger: log, Registry: reg,
	}
	if lr, ok := w.Trainer.(defaultLRer); ok {
		cfg.DefaultLR = lr.DefaultLR // job records show the learning rate the trainer will use
	}
	srv := api.New(cfg, st, q, w.Registrars...)

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		shutdownQueue(q, log)
		return err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 30 * time.Second, ErrorLog: slog.NewLogLogger(handler, slog.LevelWarn)}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info("flywheel listening", "addr", ln.Addr().String(), "data_dir", d.dataDir, "models_dir", *modelsDir,
		"workers", *workers, "version", version)

	select {
	case err := <-errc:
		shutdownQueue(q, log)
		return err
	case <-ctx.Done():
	}
	stop()
	log.Info("shutting down: draining HTTP requests and re-queueing running jobs")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		log.Warn("HTTP shutdown", "err", err)
	}
	shutdownQueue(q, log)
	log.Info("stopped")
	return nil
}

func shutdownQueue(q *jobs.Queue, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := q.Shutdown(ctx); err != nil {
		log.Warn("job queue shutdown", "err", err)
	}
}

// bootstrap creates user admin (personal entity admin) when the database
// has no users, with the key in FLYWHEEL_BOOTSTRAP_API_KEY, or a generated
// key written to <data-dir>/admin-api-key (mode 0600).
func bootstrap(ctx context.Context, st *store.SQLite, dataDir string, stderr io.Writer, log *slog.Logger) error {
	n, err := st.CountUsers(ctx)
	if err != nil || n > 0 {
		return err
	}
	if _, err := st.EnsureUser(ctx, "admin"); err != nil {
		return fmt.Errorf("bootstrap admin: %w", err)
	}
	given := strings.TrimSpace(os.Getenv("FLYWHEEL_BOOTSTRAP_API_KEY"))
	_, key, err := st.CreateKey(ctx, "admin", "bootstrap", given)
	if err != nil {
		return fmt.Errorf("bootstrap admin key: %w", err)
	}
	if given != "" {
		log.Info("created user admin with the key from FLYWHEEL_BOOTSTRAP_API_KEY")
		return nil
	}
	path := filepath.Join(dataDir, "admin-api-key")
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		return fmt.Errorf("write admin key: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil { // the file may have existed
		return fmt.Errorf("write admin key: %w", err)
	}
	fmt.Fprintf(stderr, "flywheel: created user admin; its API key is in %s\n", path)
	return nil
}
