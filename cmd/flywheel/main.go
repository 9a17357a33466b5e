// Command flywheel is the flywheel service and its administration tool.
//
//	flywheel serve                     run the HTTP service
//	flywheel keys create --user NAME   create a user (if missing) and an API key
//	flywheel keys list                 list API keys (prefixes only)
//	flywheel keys revoke ID|PREFIX     revoke an API key
//	flywheel prices set|load|list      default-level prices of the call store
//	flywheel demo                      see a model learn against a running server
//	flywheel version                   print the version
//
// Every flag has an environment variable (see README.md).
package main

import (
	"fmt"
	"io"
	"os"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a subcommand and returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	cmd, rest := args[0], args[1:]
	var err error
	switch cmd {
	case "serve":
		err = serveCmd(rest, stderr)
	case "keys":
		err = keysCmd(rest, stdout, stderr)
	case "prices":
		err = pricesCmd(rest, stdout, stderr)
	case "demo":
		err = demoCmd(rest, stdout)
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "flywheel %s\n", version)
	case "help", "-h", "--help":
		usage(stdout)
	default:
		fmt.Fprintf(stderr, "flywheel: unknown command %q\n\n", cmd)
		usage(stderr)
		return 2
	}
	if err != nil {
		if err == errUsage {
			return 2
		}
		fmt.Fprintf(stderr, "flywheel %s: %v\n", cmd, err)
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: flywheel <command> [flags]

commands:
  serve     run the HTTP service (flags: --addr, --data-dir, --models-dir, --database, --workers,
            --max-batch, --max-queue, --adapter-cache, --prefill-chunk, ...)
  keys      manage API keys: keys create --user NAME [--entity NAME] | keys list [--user NAME] | keys revoke ID|PREFIX
  prices    call-store default prices: prices set --model M --prompt COST --completion COST | prices load FILE | prices list
  demo      train flywheel/tiny against a running server and print the mean reward per step (flags: --url, --api-key, --steps, ...)
  version   print the version

Run "flywheel <command> -h" for a command's flags.
`)
}
