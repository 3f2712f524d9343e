package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/mcpserver"
)

// The agent's bindings of the verbs beside the CLI's: the schema bundle
// (chatrelay schema) and the MCP server (chatrelay mcp).

// schema prints the JSON Schema bundle, or with --limits the limits
// artifact (with the default rate windows and retention: a running server
// states its own at GET /api/limits.json). Both are the bytes the server
// serves and the repository commits under schema/.
func schema(_ context.Context, e cmdEnv) error {
	limits := e.fs.Bool("limits", false, "print the limits artifact instead: every limit with its unit, the id patterns, and the default rate windows, stream limits, retention and MCP bounds")
	if _, _, err := e.parseForm(form{"", 0, "no arguments"}); err != nil {
		return err
	}
	b := chatrelay.Schema()
	if *limits {
		b = chatrelay.LimitsArtifact(chatrelay.Windows{}, chatrelay.StreamLimits{}, chatrelay.Retention{}, chatrelay.MCPBounds{})
	}
	_, err := e.stdout.Write(b)
	return err
}

// mcpServe serves the host's verbs over MCP on standard input and output
// until the client closes its end, and every call read is answered (or
// the process is told to stop).
// Warnings and the causes of internal errors go to standard error;
// standard output carries the protocol only. A malformed line gets its
// JSON-RPC error and the session goes on (mcpserver.Stdio).
func mcpServe(ctx context.Context, e cmdEnv) error {
	v := newVerb("mcp", "[--data DIR | --store URL] [--progress-every D] [--public-url URL]", e.stderr, false).withPublicURL().startsStore()
	every := positiveDuration(mcpserver.DefaultProgressEvery)
	v.fs.Var(&every, "progress-every", "a wait (wait_messages, wait_interaction) sends notifications/progress every `duration` to a call that carries a progressToken")
	h, done, err := v.open(ctx, e, 0, "no arguments")
	if err != nil {
		return err
	}
	defer done()
	// A client that closed its end of our standard output: a write there
	// fails with EPIPE instead of Go's default for fd 1, death by SIGPIPE
	// (the session then ends as its output failed, below).
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	defer signal.Stop(pipe)
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv := mcpserver.New(h, &mcpserver.Options{Log: log, ProgressEvery: time.Duration(every), Stop: ctx})
	// Connect and Wait, not the SDK's Run: Run logs a stop by Ctrl-C or
	// SIGTERM at error level ("server run cancelled"), as if it failed.
	// Told to stop, an answer that a client does not read (its pipe full)
	// is given up after mcpserver.StopGrace: the session closes.
	ss, err := srv.Connect(ctx, &mcpserver.Stdio{In: e.stdin, Out: e.stdout, Stop: ctx}, nil)
	if err != nil {
		return err
	}
	defer context.AfterFunc(ctx, func() { ss.Close() })()
	err = ss.Wait()
	if o, ok := e.stdout.(interface{ failed() error }); ok && o.failed() != nil {
		// No answer can be written: the session ended at the first that
		// was not (exit 1, docs/cli.md).
		return fmt.Errorf("mcp: standard output cannot be written, the session ended (what was stored stays stored): %w", o.failed())
	}
	if errors.Is(err, io.EOF) || (err != nil && ctx.Err() != nil) {
		return nil // the client closed its end, or we were told to stop
	}
	return err
}

// positiveDuration is --progress-every's flag: it refuses a duration
// under minProgressEvery (0 and negatives among them).
type positiveDuration time.Duration

func (d *positiveDuration) String() string { return time.Duration(*d).String() }

func (d *positiveDuration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err == nil && v < minProgressEvery {
		err = fmt.Errorf("must be at least %v", minProgressEvery)
	}
	if err != nil {
		return err
	}
	*d = positiveDuration(v)
	return nil
}
