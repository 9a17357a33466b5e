package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"strconv"
	"time"

	"flywheel/internal/store"
)

// errUsage is returned after a flag set printed its own usage or error.
var errUsage = errors.New("usage")

// envOr returns the environment variable name, or def when unset.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func envInt64(name string, def int64) int64 {
	if v, err := strconv.ParseInt(os.Getenv(name), 10, 64); err == nil {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// dataFlags are the storage flags every subcommand shares.
type dataFlags struct {
	dataDir  string
	database string
}

func (d *dataFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.dataDir, "data-dir", envOr("FLYWHEEL_DATA_DIR", "./flywheel-data"), "data directory (env FLYWHEEL_DATA_DIR)")
	fs.StringVar(&d.database, "database", envOr("FLYWHEEL_DATABASE", envOr("FLYWHEEL_DATABASE_URL", "")),
		"database: postgres://user@host:port/db (several nodes share it and the data dir, see docs/deployment.md) or an SQLite path (env FLYWHEEL_DATABASE; default <data-dir>/flywheel.db)")
}

// open opens the store of the data dir (made absolute).
func (d *dataFlags) open(ctx context.Context) (store.Database, error) {
	st, layout, err := store.OpenDataDir(ctx, d.dataDir, d.database)
	if err != nil {
		return nil, err
	}
	d.dataDir = layout.DataDir
	return st, nil
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	return nil
}
