// Command flywheel-soak runs the chaos soak of internal/chaos: a cluster of
// `flywheel serve` processes (the built binary) on one PostgreSQL database
// under mixed load and seeded faults, then checks invariants and prints a
// report. It exits 1 when an invariant failed, 2 when the soak could not run.
//
//	flywheel-soak --bin ./flywheel --database postgres://... --duration 3m --seed 1 \
//	    --pg-restart 'pg_ctl -D DIR -m {mode} -w restart'
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"flywheel/internal/chaos"
)

func main() {
	var cfg chaos.Config
	var report string
	flag.StringVar(&cfg.Bin, "bin", "", "the built flywheel binary (required)")
	flag.StringVar(&cfg.Database, "database", "", "PostgreSQL URL of an empty database for the cluster (required)")
	flag.StringVar(&cfg.Dir, "dir", "", "work folder: shared data dir, models, node logs (default a new temp folder)")
	flag.IntVar(&cfg.Nodes, "nodes", 3, "flywheel serve processes")
	flag.DurationVar(&cfg.Duration, "duration", 2*time.Minute, "time of load and faults")
	flag.Uint64Var(&cfg.Seed, "seed", uint64(time.Now().UnixNano()), "seed of the fault schedule and the load's choices")
	flag.StringVar(&cfg.PGRestart, "pg-restart", "", "shell command restarting PostgreSQL, {mode} replaced by fast or immediate (empty: no database faults)")
	flag.DurationVar(&cfg.LeaseTimeout, "lease-timeout", 3*time.Second, "the nodes' job lease timeout")
	flag.Int64Var(&cfg.MemBoundMB, "mem-bound-mb", 3072, "each node's resident memory must stay under this many MiB")
	flag.StringVar(&report, "report", "", "also write the report to this file")
	flag.Parse()
	if cfg.Bin == "" || cfg.Database == "" {
		fmt.Fprintln(os.Stderr, "flywheel-soak: --bin and --database are required")
		os.Exit(2)
	}
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "flywheel-soak-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "flywheel-soak:", err)
			os.Exit(2)
		}
		cfg.Dir = d
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fmt.Fprintf(os.Stderr, "flywheel-soak: seed %d, work folder %s\n", cfg.Seed, cfg.Dir)
	rep, err := chaos.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "flywheel-soak:", err)
		os.Exit(2)
	}
	fmt.Print(rep.String())
	if report != "" {
		if err := os.WriteFile(report, []byte(rep.String()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "flywheel-soak:", err)
		}
	}
	if !rep.OK() {
		os.Exit(1)
	}
}
