// Command chatrelay serves token-scoped chat threads to browsers and legacy
// pollers, and gives the host agent a CLI over the same store.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/mcpserver"
	_ "github.com/chatrelay/chatrelay/store/filestore"  // the file: store (and a spec without a scheme)
	_ "github.com/chatrelay/chatrelay/store/redisstore" // the redis:// and rediss:// stores
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	report(os.Stderr, err)
	os.Exit(exitCode(err))
}

// report writes a command's error to stderr as "chatrelay: …". Help and
// an answer in the exit status (exitStatus) are not errors: nothing.
func report(stderr io.Writer, err error) {
	if err != nil && !errors.Is(err, flag.ErrHelp) && !errors.As(err, new(exitStatus)) {
		fmt.Fprintln(stderr, "chatrelay:", err)
	}
}

// cmdEnv is what a command runs with: main's process, or a test's, and
// fs, a flag set whose usage prints the command's synopsis from the
// table (commands with a synopsis of their own make their own).
type cmdEnv struct {
	args   []string
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	fs     *flag.FlagSet
}

// command is one subcommand: its name, its synopsis (after "chatrelay
// NAME"), what it does, and its function.
type command struct {
	name, synopsis, what string
	run                  func(ctx context.Context, e cmdEnv) error
}

// commands are the subcommands, in the order the usage lists them. Every
// command takes its flags before or after its operands.
var commands = []command{
	{"serve", "[flags]", "run the server", func(ctx context.Context, e cmdEnv) error { return serve(ctx, e.args, e.getenv, e.stdout, e.stderr) }},
	{"list", "[--data DIR] [--json]", "threads, newest activity first", func(ctx context.Context, e cmdEnv) error { return list(ctx, e.args, e.getenv, e.stdout, e.stderr) }},
	{"show", "THREAD [--json] [--v2] [--since N]", "a thread's messages", func(ctx context.Context, e cmdEnv) error { return show(ctx, e.args, e.getenv, e.stdout, e.stderr) }},
	{"reply", "THREAD TEXT [--client-id ID]", `answer as hermes (TEXT "-" reads standard input)`, reply},
	{"ask", "THREAD (--input PROMPT [--choice V[=LABEL]]... [--allow-text] | --approval SUMMARY [--detail L=V]...) [--title T] [--timeout D] [--wait [--keep-on-interrupt]]",
		"ask the person for input or approval; --wait exits 0 approved/answered, 10 denied, 11 expired, 12 canceled (an interrupt cancels it)", ask},
	{"check", "THREAD INTERACTION [--wait]", "an interaction's state and answer (--wait: until it is closed)", check},
	{"cancel", "THREAD INTERACTION", "withdraw a pending interaction", cancel},
	{"react", "THREAD MESSAGE EMOJI [--remove]", "add (or remove) hermes's reaction", react},
	{"card", "THREAD FILE", `send a card (JSON; FILE "-" reads standard input)`, card},
	{"open", "[--title T] [--text FIRST] [--client-id KEY] [--public-url URL]", "start a conversation as hermes: a new thread and its claim link (shown once; whoever opens it first holds the thread)", openThread},
	{"share", "THREAD --name NAME [--role viewer|commenter] [--kind human|agent] [--expires D] [--cap N] [--public-url URL] | share list THREAD [--json] | share revoke THREAD (ID | --all) | share audit THREAD [--json]",
		"share the conversation with a link (shown once), list, revoke and audit the links", share},
	{"device", "THREAD --name NAME [--expires-in D] [--public-url URL] | device list THREAD [--json] | device revoke THREAD ID",
		"open the conversation on another device of the owner's: its link (shown once), list and revoke devices", device},
	{"push", "rotate-key [--data DIR | --store URL] | push send [--data DIR | --store URL] [--push-contact C] [--push-allow-host H]...",
		"make a new VAPID key pair for Web Push (printed: its public key), browsers subscribed with the old one must subscribe again; send the store's pushes until stopped (for serve --push-sender=external)", push},
	{"watch", "[--data DIR] [--since EPOCH] [--all] [--v2]", "new messages of every thread, and interaction updates, one JSON line each (no server needed)",
		func(ctx context.Context, e cmdEnv) error { return watch(ctx, e.args, e.getenv, e.stdout, e.stderr) }},
	{"subscribe", "--server URL [--token T | --ticket K] [--since N]", "one thread's live stream from a remote server, one JSON line each",
		func(ctx context.Context, e cmdEnv) error { return subscribe(ctx, e.args, e.getenv, e.stdout, e.stderr) }},
	{"schema", "[--limits]", "print the JSON Schema bundle of the API and the verbs (--limits: every limit with its unit)", schema},
	{"mcp", "[--data DIR | --store URL] [--public-url URL]", "serve the host's verbs to an AI agent over MCP on standard input and output (tools chatrelay_<verb>)", mcpServe},
	{"agent", "add NAME [--threads all | THREAD,…] | agent list [--json] | agent revoke ID", "the keys of agents that use MCP over HTTP (serve --mcp): add prints a key once, revoke ends its sessions", agent},
	{"webhook", "test URL [--secret whsec_…] | webhook enable URL [--data DIR | --store URL]", "send a signed ping event to a webhook receiver, once (the secret defaults to CHATRELAY_WEBHOOK_SECRET); enable a destination a 410 Gone disabled", webhookCmd},
	{"version", "", "the module version and the VCS revision this binary was built from", version},
}

// runsUntilStopped are the commands that run until an interrupt or
// SIGTERM, which ends them with exit status 0 (docs/cli.md): a line that
// nobody read, given up at the stop, does not make that a failure.
var runsUntilStopped = map[string]bool{"watch": true, "subscribe": true, "mcp": true}

// usage is the command list.
func usage() string {
	var b strings.Builder
	b.WriteString("chatrelay: a live chat relay between browser tabs and a host agent.\n\nUsage:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %s\n      %s\n", strings.TrimSpace("chatrelay "+c.name+" "+c.synopsis), c.what)
	}
	b.WriteString(`
Every command but serve, subscribe, schema, webhook test and version works on the store
directly (no server needed): --data DIR, or --store redis://... for a Redis store. Run
"chatrelay COMMAND --help" for a command's flags. Every flag can also be set
by an environment variable: --max-threads is CHATRELAY_MAX_THREADS; a flag on
the command line wins. Exit status: 0 done, 1 failed, 2 a malformed command
line (ask and check --wait: 10 denied, 11 expired, 12 canceled).
`)
	return b.String()
}

// run is main without the process: tests call it with their own arguments,
// environment and streams.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return usageError("no command")
	}
	name, rest := args[0], args[1:]
	out := newOutWriter(ctx, stdout)
	defer out.close()
	switch name {
	case "help", "-h", "-help", "--help":
		if name == "help" && len(rest) > 0 && rest[0] != "help" { // help COMMAND [SUB]: COMMAND [SUB] --help
			return run(ctx, append(slices.Clip(rest), "--help"), getenv, stdin, stdout, stderr)
		}
		fmt.Fprint(out, usage())
		return out.failed()
	}
	for _, c := range commands {
		if c.name == name {
			fs := newFlags(c.name, strings.TrimSpace(c.name+" "+c.synopsis), stderr)
			var cout io.Writer = out
			if c.name == "serve" { // a server serves on with no one reading its "listening on"
				cout = stdout
			}
			err := c.run(ctx, cmdEnv{args: rest, getenv: getenv, stdin: stdin, stdout: cout, stderr: stderr, fs: fs})
			if h, ok := errors.AsType[helpRequest](err); ok {
				io.WriteString(out, h.usage)
			}
			werr := out.failed()
			if runsUntilStopped[c.name] && ctx.Err() != nil &&
				(errors.Is(err, errOutAbandoned) || err == nil && errors.Is(werr, errOutAbandoned)) {
				// Stopped with a line nobody read: the stop ends it with
				// exit status 0, as without that line.
				err, werr = nil, nil
			}
			if werr != nil && (err == nil || errors.Is(err, flag.ErrHelp)) {
				err = werr // an answer nobody could read is no success
			}
			if u, ok := err.(usageError); ok {
				return namedFromEnv(u, rest, getenv)
			}
			return err
		}
	}
	fmt.Fprint(stderr, usage())
	return usageError(fmt.Sprintf("unknown command %q", name))
}

// outWriter is a command's standard output that remembers its first write
// error: a command whose answer did not get out (a full disk, a closed
// pipe with SIGPIPE ignored) fails instead of exiting 0. One goroutine,
// its writer, writes w, one write at a time, so that a write that blocks
// (a pipe nobody reads) holds no lock: failed answers at once, and once
// stop is done a write not out within stopGrace is given up
// (errOutAbandoned), so that a command told to stop ends.
type outWriter struct {
	w    io.Writer
	stop context.Context // the command's; a write is given up stopGrace after it is done

	start  sync.Once
	lines  chan outLine  // to the writer goroutine
	closed chan struct{} // closed by close: the writer goroutine ends

	mu  sync.Mutex // guards err
	err error
}

// stopGrace is how long, once the command is told to stop (an interrupt,
// SIGTERM), a write on standard output may take before it is given up:
// mcpserver.StopGrace, half of the 2 s that MCP clients leave between
// SIGTERM and SIGKILL, which a service manager's stop timeout (90 s for
// systemd) leaves too.
const stopGrace = mcpserver.StopGrace

// errOutAbandoned is a write on standard output given up once the command
// was told to stop: nobody read it.
var errOutAbandoned = fmt.Errorf("standard output not read: a write was given up %v after the stop", stopGrace)

// outLine is a write for the writer goroutine, and where it says how it
// went.
type outLine struct {
	p    []byte      // a copy: a write given up must not hold its caller's slice
	done chan outErr // buffered: the writer never waits on it
}

type outErr struct {
	n   int
	err error
}

func newOutWriter(stop context.Context, w io.Writer) *outWriter {
	return &outWriter{w: w, stop: stop, lines: make(chan outLine), closed: make(chan struct{})}
}

// writer is the writer goroutine: it writes the lines on w one at a time
// until close; a write that blocks ends it when it returns (or with the
// process).
func (o *outWriter) writer() {
	for {
		select {
		case l := <-o.lines:
			n, err := o.w.Write(l.p)
			l.done <- outErr{n, err}
		case <-o.closed:
			return
		}
	}
}

// close ends the writer goroutine once its write (if any) returns. No
// Write may be called after.
func (o *outWriter) close() { close(o.closed) }

// Write has the writer goroutine write p. Once stop is done, a write not
// out within stopGrace (since the stop, or since it began if later) is
// given up: it returns errOutAbandoned, as every write after it does. A
// write that did go out is preferred over the grace's end.
func (o *outWriter) Write(p []byte) (int, error) {
	if err := o.failed(); err != nil {
		return 0, err
	}
	o.start.Do(func() { go o.writer() })
	l := outLine{p: bytes.Clone(p), done: make(chan outErr, 1)}
	lines := o.lines // nil once l is handed over
	stop := o.stop.Done()
	var grace <-chan time.Time
	for {
		select {
		case lines <- l:
			lines = nil
		case r := <-l.done:
			return r.n, o.note(r.err)
		case <-stop:
			stop = nil
			t := time.NewTimer(stopGrace)
			defer t.Stop()
			grace = t.C
		case <-grace:
			select {
			case r := <-l.done: // out just now
				return r.n, o.note(r.err)
			default:
			}
			return 0, o.note(errOutAbandoned)
		}
	}
}

// note records err, the first write error, and returns it.
func (o *outWriter) note(err error) error {
	if err != nil {
		o.mu.Lock()
		if o.err == nil {
			o.err = err
		}
		o.mu.Unlock()
	}
	return err
}

// failed is the first write error, nil if none.
func (o *outWriter) failed() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// Unwrap is the standard output itself (isTerminal looks at it).
func (o *outWriter) Unwrap() io.Writer { return o.w }

// usageError is a command line that could not be understood (exit 2).
type usageError string

func (e usageError) Error() string { return string(e) }

// flagRef is a flag as an error message names it: --max-threads.
var flagRef = regexp.MustCompile(`--[a-z][a-z0-9-]*[a-z0-9]`)

// namedFromEnv adds to err, a refusal of a command's settings that names
// flags (--max-threads), the environment variable that set each one the
// command line did not give (CHATRELAY_MAX_THREADS): a user who never
// typed the flag is told where its value came from.
func namedFromEnv(err usageError, args []string, getenv func(string) string) usageError {
	var notes []string
	seen := map[string]bool{}
	for _, ref := range flagRef.FindAllString(string(err), -1) {
		name := ref[2:]
		if seen[name] || onCommandLine(args, name) {
			continue
		}
		seen[name] = true
		if env := envName(name); getenv(env) != "" {
			notes = append(notes, fmt.Sprintf("--%s was set by %s", name, env))
		}
	}
	if len(notes) == 0 {
		return err
	}
	return usageError(string(err) + " (" + strings.Join(notes, "; ") + ")")
}

// onCommandLine reports whether args give the flag name (-name, --name,
// or either with =value), before any "--".
func onCommandLine(args []string, name string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// The CLI's own codes, for failures no API request meets: they are
// printed (chatrelay: CODE: …) and never sent, so they are not in the
// contract's code table (chatrelay.CodeTable).
const (
	// serve cannot listen on --addr or --metrics-addr (taken by another
	// listener, not an address of this host, a port it may not bind).
	codeAddressUnavailable chatrelay.Code = "address_unavailable"
	// webhook test: the ping reached no receiver, or it did not answer a
	// 2xx within the timeout.
	codeWebhookUndelivered chatrelay.Code = "webhook_undelivered"
)

// listenFault is net.Listen's err for the address the flag gave, with the
// CLI's code: exit 1, the operator's to fix (another server holds it).
func listenFault(flag, addr string, err error) error {
	return &chatrelay.Error{Code: codeAddressUnavailable, Message: flag + " " + addr + " cannot be listened on", Err: err}
}

// exitCode maps an error to the process's exit status: 0 success, 2 a bad
// command line, 1 anything else.
func exitCode(err error) int {
	var u usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &u):
		return 2
	case errors.As(err, new(exitStatus)):
		var x exitStatus
		errors.As(err, &x)
		return int(x)
	case chatrelay.CodeOf(err) == chatrelay.InvalidThread:
		return 2
	default:
		return 1
	}
}

// exitStatus is a command's answer in its exit status (ask --wait: 10
// denied, 11 expired, 12 canceled); it is not an error to report.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
