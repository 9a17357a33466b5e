package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"flywheel/internal/demo"
)

// demoCmd runs the "see it learn" demo against a running server.
func demoCmd(args []string, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return demo.Run(ctx, args, stdout)
}
