package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"flywheel/internal/api"
	"flywheel/internal/app"
	"flywheel/internal/engine/chattmpl"
	"flywheel/internal/infer"
	"flywheel/internal/jobs"
	"flywheel/internal/serve"
	"flywheel/internal/trace"
)

// serveConfig is what `flywheel serve` runs with: the service's
// configuration and the CLI's own settings.
type serveConfig struct {
	app       app.Config
	addr      string
	logFormat string
	logLevel  string
	prefixMB  int
}

// parseServe reads the flags of `flywheel serve`, each with an environment
// variable behind it, and the variables that have no flag (see README.md).
func parseServe(args []string, stderr io.Writer) (serveConfig, error) {
	var c serveConfig
	var d dataFlags
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	d.register(fs)
	fs.StringVar(&c.addr, "addr", envOr("FLYWHEEL_ADDR", "127.0.0.1:8080"), "listen address (env FLYWHEEL_ADDR)")
	fs.StringVar(&c.app.ModelsDir, "models-dir", envOr("FLYWHEEL_MODELS_DIR", ""), "base models directory (env FLYWHEEL_MODELS_DIR; default <data-dir>/models)")
	fs.IntVar(&c.app.Workers, "workers", envInt("FLYWHEEL_WORKERS", jobs.DefaultWorkers), "training jobs run in parallel across models; 0: none, an API-only node that queues jobs for other nodes (env FLYWHEEL_WORKERS)")
	fs.StringVar(&c.app.NodeID, "node-id", envOr("FLYWHEEL_NODE_ID", ""), "this node's name in job leases and logs (env FLYWHEEL_NODE_ID; default host-pid-random)")
	fs.DurationVar(&c.app.LeaseTimeout, "lease-timeout", envDuration("FLYWHEEL_LEASE_TIMEOUT", jobs.DefaultLeaseTimeout), "a job of a node that stopped renewing its lease (it died) is run by another node after this (env FLYWHEEL_LEASE_TIMEOUT)")
	fs.Int64Var(&c.app.MaxBodyBytes, "max-body-bytes", envInt64("FLYWHEEL_MAX_BODY_BYTES", api.DefaultMaxBodyBytes), "request body limit in bytes (env FLYWHEEL_MAX_BODY_BYTES)")
	fs.IntVar(&c.app.Serve.MaxBatch, "max-batch", envInt("FLYWHEEL_MAX_BATCH", 0), fmt.Sprintf("inference: sequences decoded together per step per base model (env FLYWHEEL_MAX_BATCH; 0: the default, %d)", infer.DefaultMaxBatch))
	fs.IntVar(&c.app.Serve.MaxQueue, "max-queue", envInt("FLYWHEEL_MAX_QUEUE", 0), fmt.Sprintf("inference: requests waiting for a batch slot before 429 (env FLYWHEEL_MAX_QUEUE; 0: the default, %d)", infer.DefaultMaxQueue))
	fs.IntVar(&c.app.Serve.MaxInflightPerKey, "max-inflight-per-key", envInt("FLYWHEEL_MAX_INFLIGHT_PER_KEY", 0), fmt.Sprintf("inference: requests one API key may have in flight before 429 (env FLYWHEEL_MAX_INFLIGHT_PER_KEY; 0: the default, %d; negative: no limit)", serve.DefaultMaxInflightPerKey))
	fs.IntVar(&c.app.MaxQueuedJobsPerUser, "max-queued-jobs-per-user", envInt("FLYWHEEL_MAX_QUEUED_JOBS_PER_USER", 0), fmt.Sprintf("training: QUEUED jobs one user may have before 429 (env FLYWHEEL_MAX_QUEUED_JOBS_PER_USER; 0: the default, %d; negative: no limit)", api.DefaultMaxQueuedJobsPerUser))
	fs.IntVar(&c.app.Serve.AdapterCacheSize, "adapter-cache", envInt("FLYWHEEL_ADAPTER_CACHE", 0), fmt.Sprintf("inference: LoRA adapters kept loaded (env FLYWHEEL_ADAPTER_CACHE; 0: the default, %d)", serve.DefaultAdapterCacheSize))
	fs.IntVar(&c.app.Serve.PrefillChunk, "prefill-chunk", envInt("FLYWHEEL_PREFILL_CHUNK", 0), fmt.Sprintf("inference: prompt tokens fed per step across sequences (env FLYWHEEL_PREFILL_CHUNK; 0: the default, %d)", infer.DefaultPrefillChunk))
	fs.IntVar(&c.prefixMB, "prefix-cache-mb", envInt("FLYWHEEL_PREFIX_CACHE_MB", serve.DefaultPrefixCacheMB), "inference: memory for the KV blocks of prompt prefixes reused across requests, in MiB (env FLYWHEEL_PREFIX_CACHE_MB; 0 disables the cache)")
	// Hardening limits (docs/security.md): connection timeouts, chat-template
	// renders (templates from model folders are untrusted code), prompts and
	// recorded calls.
	fs.DurationVar(&c.app.ReadHeaderTimeout, "read-header-timeout", envDuration("FLYWHEEL_READ_HEADER_TIMEOUT", app.DefaultReadHeaderTimeout), "time for a request's headers to arrive (env FLYWHEEL_READ_HEADER_TIMEOUT)")
	fs.DurationVar(&c.app.IdleTimeout, "idle-timeout", envDuration("FLYWHEEL_IDLE_TIMEOUT", app.DefaultIdleTimeout), "an idle kept-alive connection is closed after this (env FLYWHEEL_IDLE_TIMEOUT)")
	fs.DurationVar(&c.app.BodyReadTimeout, "body-read-timeout", envDuration("FLYWHEEL_BODY_READ_TIMEOUT", api.DefaultBodyReadTimeout), "a request body that brings no byte for this long fails and its connection is closed (env FLYWHEEL_BODY_READ_TIMEOUT)")
	fs.DurationVar(&c.app.Serve.TemplateLimits.Timeout, "template-timeout", envDuration("FLYWHEEL_TEMPLATE_TIMEOUT", chattmpl.DefaultLimits.Timeout), "time limit of one chat-template render (env FLYWHEEL_TEMPLATE_TIMEOUT)")
	fs.IntVar(&c.app.Serve.TemplateLimits.MaxOutputBytes, "template-max-output-bytes", envInt("FLYWHEEL_TEMPLATE_MAX_OUTPUT_BYTES", chattmpl.DefaultLimits.MaxOutputBytes), "largest rendered chat template, bytes (env FLYWHEEL_TEMPLATE_MAX_OUTPUT_BYTES)")
	fs.Int64Var(&c.app.Serve.TemplateLimits.MaxAllocBytes, "template-max-alloc-bytes", envInt64("FLYWHEEL_TEMPLATE_MAX_ALLOC_BYTES", chattmpl.DefaultLimits.MaxAllocBytes), "bytes of strings and lists one chat-template render may build (env FLYWHEEL_TEMPLATE_MAX_ALLOC_BYTES)")
	fs.IntVar(&c.app.Serve.TemplateLimits.MaxSteps, "template-max-steps", envInt("FLYWHEEL_TEMPLATE_MAX_STEPS", chattmpl.DefaultLimits.MaxSteps), "execution steps of one chat-template render (env FLYWHEEL_TEMPLATE_MAX_STEPS)")
	fs.IntVar(&c.app.Serve.MaxPromptBytesPerToken, "max-prompt-bytes-per-token", envInt("FLYWHEEL_MAX_PROMPT_BYTES_PER_TOKEN", serve.DefaultMaxPromptBytesPerToken), "a prompt over the context length times this many bytes is refused before tokenization (env FLYWHEEL_MAX_PROMPT_BYTES_PER_TOKEN)")
	fs.IntVar(&c.app.Serve.MaxRecordBytes, "max-record-bytes", envInt("FLYWHEEL_MAX_RECORD_BYTES", serve.DefaultMaxRecordBytes), "largest inputs or output recorded in the call store per completion; larger ones are recorded as a stub (env FLYWHEEL_MAX_RECORD_BYTES)")
	fs.StringVar(&c.logFormat, "log-format", envOr("FLYWHEEL_LOG_FORMAT", "text"), "log format: text or json (env FLYWHEEL_LOG_FORMAT)")
	fs.StringVar(&c.logLevel, "log-level", envOr("FLYWHEEL_LOG_LEVEL", "info"), "log level: debug, info, warn, error (env FLYWHEEL_LOG_LEVEL)")
	if err := parseFlags(fs, args); err != nil {
		return c, err
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"--workers", c.app.Workers}, {"--max-batch", c.app.Serve.MaxBatch}, {"--max-queue", c.app.Serve.MaxQueue},
		{"--adapter-cache", c.app.Serve.AdapterCacheSize}, {"--prefill-chunk", c.app.Serve.PrefillChunk}, {"--prefix-cache-mb", c.prefixMB}} {
		if f.v < 0 {
			return c, fmt.Errorf("%s must not be negative, got %d", f.name, f.v)
		}
	}
	if c.app.LeaseTimeout < time.Second {
		return c, fmt.Errorf("--lease-timeout must be at least 1s, got %s", c.app.LeaseTimeout)
	}
	c.app.Serve.PrefixCacheMB = c.prefixMB
	if c.prefixMB == 0 {
		c.app.Serve.PrefixCacheMB = -1 // serve.Options: negative is off, zero the default
	}
	c.app.DataDir, c.app.Database = d.dataDir, d.database
	c.app.Version = version
	c.app.BootstrapKey = strings.TrimSpace(os.Getenv("FLYWHEEL_BOOTSTRAP_API_KEY"))
	c.app.PricesFile = os.Getenv("FLYWHEEL_PRICES_FILE")
	pp, cp := os.Getenv("FLYWHEEL_SERVICE_PRICE_PROMPT"), os.Getenv("FLYWHEEL_SERVICE_PRICE_COMPLETION")
	if pp != "" || cp != "" {
		prompt, err1 := strconv.ParseFloat(pp, 64)
		completion, err2 := strconv.ParseFloat(cp, 64)
		if err1 != nil || err2 != nil || prompt < 0 || completion < 0 {
			return c, fmt.Errorf("FLYWHEEL_SERVICE_PRICE_PROMPT and FLYWHEEL_SERVICE_PRICE_COMPLETION must both be non-negative numbers")
		}
		c.app.ServicePrice = &trace.TokenPrice{Prompt: prompt, Completion: completion}
	}
	if v := os.Getenv("FLYWHEEL_TOKENS_PER_STEP"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return c, fmt.Errorf("FLYWHEEL_TOKENS_PER_STEP must be a positive integer, got %q", v)
		}
		c.app.TokensPerStep = n
	}
	return c, nil
}

// logger builds the service's logger from --log-format and --log-level.
func (c serveConfig) logger(stderr io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch c.logFormat {
	case "json":
		return slog.New(slog.NewJSONHandler(stderr, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format must be text or json, got %q", c.logFormat)
}

// serveCmd runs the HTTP service until SIGINT or SIGTERM.
func serveCmd(args []string, stderr io.Writer) error {
	c, err := parseServe(args, stderr)
	if err != nil {
		return err
	}
	return c.serve(stderr)
}

// serve builds the service c describes and serves it until SIGINT or
// SIGTERM.
func (c *serveConfig) serve(stderr io.Writer) error {
	log, err := c.logger(stderr)
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	c.app.Logger = log

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // a second signal during the drain ends the process at once
	}()
	a, err := app.New(ctx, c.app)
	if err != nil {
		return err
	}
	defer func() {
		a.Close()
		log.Info("stopped")
	}()
	if a.BootstrapKeyFile != "" {
		fmt.Fprintf(stderr, "flywheel: created user admin; its API key is in %s\n", a.BootstrapKeyFile)
	}
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return err
	}
	return a.Serve(ctx, ln)
}
