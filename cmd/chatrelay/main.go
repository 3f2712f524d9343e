// Command chatrelay serves token-scoped chat threads to browsers and legacy
// pollers, and gives the host agent a CLI over the same store.
package main

import (
	"github.com/chatrelay/chatrelay"
	_ "github.com/chatrelay/chatrelay/store/redisstore" // the redis:// and rediss:// stores

	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "chatrelay:", err)
	}
	os.Exit(exitCode(err))
}

const usage = `chatrelay: a live chat relay between browser tabs and a host agent.

Usage:
  chatrelay serve     [flags]                 run the server
  chatrelay list      [--data DIR] [--json]   threads, newest activity first
  chatrelay show      [--data DIR] [--json] [--since N] THREAD
  chatrelay reply     [--data DIR] THREAD TEXT   answer as hermes (TEXT "-" reads standard input)
  chatrelay watch     [--data DIR] [--since EPOCH] [--all]
                      new messages of every thread, one JSON line each (no server needed)
  chatrelay subscribe --server URL [--token T | --ticket K] [--since N]
                      one thread's live stream from a remote server, one JSON line each

list, show, reply and watch take --store redis://… instead of --data for a
Redis store. Run "chatrelay COMMAND --help" for a command's flags. Every flag can also be
set by an environment variable: --max-threads is CHATRELAY_MAX_THREADS; a
flag on the command line wins.
`

// run is main without the process: tests call it with their own arguments,
// environment and streams.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageError("no command")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return serve(ctx, rest, getenv, stdout, stderr)
	case "list":
		return list(ctx, rest, getenv, stdout, stderr)
	case "show":
		return show(ctx, rest, getenv, stdout, stderr)
	case "reply":
		return reply(ctx, rest, getenv, stdin, stdout, stderr)
	case "watch":
		return watch(ctx, rest, getenv, stdout, stderr)
	case "subscribe":
		return subscribe(ctx, rest, getenv, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return usageError(fmt.Sprintf("unknown command %q", cmd))
	}
}

// usageError is a command line that could not be understood (exit 2).
type usageError string

func (e usageError) Error() string { return string(e) }

// exitCode maps an error to the process's exit status: 0 success, 2 a bad
// command line, 1 anything else.
func exitCode(err error) int {
	var u usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &u):
		return 2
	case chatrelay.CodeOf(err) == chatrelay.InvalidThread:
		return 2
	default:
		return 1
	}
}
