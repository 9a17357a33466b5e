package main

import (
	"context"
	"flag"
	"io"
	"os"
	"os/signal"
	"syscall"

	"flywheel/internal/demo"
	"flywheel/internal/trace"
)

// pricesCmd runs `flywheel prices ...` against the data dir's database:
// --data-dir / --database come first, then the trace subcommand.
func pricesCmd(args []string, stdout, stderr io.Writer) error {
	var d dataFlags
	fs := flag.NewFlagSet("prices", flag.ContinueOnError)
	fs.SetOutput(stderr)
	d.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ctx := context.Background()
	st, err := d.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	return trace.PricesCommand(fs.Args(), st.DB(), stdout)
}

// demoCmd runs the "see it learn" demo against a running server.
func demoCmd(args []string, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return demo.Run(ctx, args, stdout)
}
