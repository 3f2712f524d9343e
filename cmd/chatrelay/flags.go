package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// newFlags returns a flag set for a subcommand. Its usage goes to stderr
// after a command line it cannot parse; asked for (--help), parse hands
// it to run in a helpRequest, which prints it on stdout, so that
// `chatrelay serve --help | less` shows it.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "Usage: chatrelay %s\n", synopsis)
		// The example is one of the command's own flags: the first, in
		// the order PrintDefaults lists them.
		var first string
		fs.VisitAll(func(f *flag.Flag) {
			if first == "" {
				first = f.Name
			}
		})
		if first == "" {
			return // no flags: no Flags header
		}
		fmt.Fprintf(out, "\nFlags (each also read from CHATRELAY_<NAME>, e.g. --%s from %s):\n", first, envName(first))
		fs.PrintDefaults()
	}
	return fs
}

// helpRequest is a command's --help: its usage, for stdout. It is
// flag.ErrHelp (errors.Is), which exits 0.
type helpRequest struct{ usage string }

func (h helpRequest) Error() string { return flag.ErrHelp.Error() }
func (h helpRequest) Unwrap() error { return flag.ErrHelp }

// parse parses args, flags before or after the operands ("--" ends the
// flags), then fills every flag not given on the command line from its
// environment variable: --max-threads from CHATRELAY_MAX_THREADS. A
// repeatable flag takes a comma-separated list from its variable.
func parse(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	stderr := fs.Output()
	var printed strings.Builder // the usage and the parse error, if any
	fs.SetOutput(&printed)
	err := fs.Parse(flagsFirst(fs, args))
	fs.SetOutput(stderr)
	if err == flag.ErrHelp {
		return helpRequest{usage: printed.String()}
	}
	io.WriteString(stderr, printed.String())
	if err != nil {
		return usageError(err.Error())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		env := envName(f.Name)
		v := getenv(env)
		if v == "" {
			return
		}
		values := []string{v}
		if _, ok := f.Value.(interface{ repeatable() }); ok {
			values = strings.Split(v, ",")
		}
		for _, v := range values {
			// fs.Set, not f.Value.Set: a flag set from the environment
			// counts as given (given, fs.Visit), like one on the command line.
			if e := fs.Set(f.Name, strings.TrimSpace(v)); e != nil {
				err = usageError(fmt.Sprintf("%s=%q: %v", env, v, e))
				return
			}
		}
	})
	return err
}

// flagsFirst reorders args so that every flag comes before the operands,
// which the flag package stops at: "ask THREAD --approval X" is read as
// "ask --approval X -- THREAD". A flag takes the next argument as its
// value unless it is a boolean flag or written --name=value.
func flagsFirst(fs *flag.FlagSet, args []string) []string {
	var flags, operands []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			operands = append(operands, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			operands = append(operands, a) // "-" too: standard input
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue // the flag package says it is unknown
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		if i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return append(append(flags, "--"), operands...)
}

func envName(flagName string) string {
	return "CHATRELAY_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// listFlag is a repeatable string flag. A repeatable flag (it has a
// repeatable method) set by an environment variable takes a list: a,b.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }
func (*listFlag) repeatable()          {}

// prefixes parses CIDRs (or bare addresses) of trusted proxies.
func prefixes(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		if s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, usageError(fmt.Sprintf("--trusted-proxy %q: not a CIDR or an address", s))
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// oneOfFlag is a string flag that takes one of its choices: any other
// value is the flag's parse error, so that one from the environment names
// its variable (parse), as the command line names the flag.
type oneOfFlag struct {
	v       *string
	choices []string
}

func (c oneOfFlag) String() string {
	if c.v == nil { // the flag package's zero value, for the usage
		return ""
	}
	return *c.v
}

func (c oneOfFlag) Set(s string) error {
	if !slices.Contains(c.choices, s) {
		return fmt.Errorf("want %s", strings.Join(c.choices, " or "))
	}
	*c.v = s
	return nil
}

// given reports whether the flag name was set on the command line or by
// its environment variable.
func given(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// storeFlags are the flags of every command that uses the store.
type storeFlags struct {
	fs          *flag.FlagSet
	data        string
	store       string
	redisPrefix string
	fsync       string
	appendLog   bool
	maxThreads  int
	retainN     int
	retainAge   time.Duration
	// existing: the command reads or answers threads that must be there
	// already, so a file store's folder must exist (openHost).
	existing bool
	// serve: the flags are serve's, which applies every value, defaults
	// included (options); set before register.
	serve bool
}

// register adds the store flags to fs; writes adds those of commands that
// write (durability, retention and the thread limit).
func (sf *storeFlags) register(fs *flag.FlagSet, writes bool) {
	sf.fs = fs
	fs.StringVar(&sf.data, "data", chatrelay.DefaultData, "data `folder`; thread documents live in DIR/chat (local filesystems only)")
	fs.StringVar(&sf.store, "store", "", "the store `backend`: file:DIR (the same as --data DIR; the default) or redis://[user:pass@]host:port/db (rediss:// for TLS), shared by several nodes; redis://a,redis://b,… shards threads over several Redis, redis+cluster://host:port,… uses a Redis Cluster; ?wait-replicas=N acknowledges a write only once N replicas hold it (WAIT; off by default)")
	fs.StringVar(&sf.redisPrefix, "redis-prefix", chatrelay.DefaultKeyPrefix, "prefix of every Redis key and of the feed channel")
	if !writes {
		return
	}
	sf.fsync = "always"
	fs.Var(oneOfFlag{&sf.fsync, []string{"always", "never"}}, "fsync", "`mode`: always: an acknowledged message survives a power cut; never: skip fsync (benchmarks only, may lose acknowledged messages)")
	fs.BoolVar(&sf.appendLog, "append-log", false, "file store only: a post appends a line to <thread>.log, compacted into <thread>.json every 64 posts (on a journaled ext4, 1.7× the posts a second and 0.56× the CPU per post, docs/performance.md); <thread>.json is then a snapshot, not the whole thread, which older chatrelay refuses (the contract's layout is the default: off; refused with Redis)")
	fs.IntVar(&sf.maxThreads, "max-threads", chatrelay.DefaultMaxThreads, "most threads the store holds; a post that would create one more gets 507 "+string(chatrelay.ThreadLimit))
	fs.IntVar(&sf.retainN, "retention-messages", chatrelay.DefaultRetainMessages, "newest messages kept per thread")
	fs.DurationVar(&sf.retainAge, "retention-age", chatrelay.DefaultRetainAge, "messages older than this are dropped")
	if sf.serve {
		return
	}
	// A host command applies these only when given (options), else what
	// the folder's server recorded: its help says so, and not serve's
	// default, which PrintDefaults would show as the command's. A zero
	// DefValue prints no "(default …)"; the value parsed is unchanged.
	for _, f := range []struct{ name, zero, def string }{
		{"max-threads", "0", fmt.Sprint(chatrelay.DefaultMaxThreads)},
		{"retention-messages", "0", fmt.Sprint(chatrelay.DefaultRetainMessages)},
		{"retention-age", "0s", chatrelay.DefaultRetainAge.String()},
	} {
		fl := fs.Lookup(f.name)
		fl.Usage += " (default: what the folder's server recorded in DATA/settings.json; on Redis, or a folder no server opened, " + f.def + ")"
		fl.DefValue = f.zero
	}
}

// spec is the store the flags name.
func (sf *storeFlags) spec() string {
	if sf.store != "" {
		return sf.store
	}
	return "file:" + sf.data
}

// The least values of the duration flags: under them the server is
// useless (a ticket that expires as it is made, a rate window that counts
// nothing, messages dropped as they arrive, an MCP session that ends at
// once) or busy for nothing (a ping, a sweep or a progress notification
// in a loop). 1 ns passed "must be positive".
const (
	minTicketTTL     = time.Second            // --ticket-ttl: a ticket outlives its trip to the stream it opens
	minHeartbeat     = time.Second            // --heartbeat
	minRateWindow    = time.Second            // --rate-window
	minRetainAge     = time.Second            // --retention-age
	minSweepEvery    = 100 * time.Millisecond // --sweep-every
	minMCPIdle       = 100 * time.Millisecond // --mcp-idle
	minProgressEvery = 100 * time.Millisecond // --progress-every (serve --mcp and mcp)
)

// durationFloor is a duration flag's value and its least value.
type durationFloor struct {
	flag   string
	v, min time.Duration
}

// tooShort refuses the durations under their least value, a usage error
// naming each flag (namedFromEnv adds the variable that set it).
func tooShort(fl ...durationFloor) error {
	var bad []string
	for _, f := range fl {
		if f.v < f.min {
			bad = append(bad, fmt.Sprintf("%s %v must be at least %v", f.flag, f.v, f.min))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return usageError(strings.Join(bad, "; "))
}

// options are the store options of the flags. A server takes every value
// (defaults included) and records them in its data folder; any other
// command passes only the values given, so that the folder's recorded
// settings apply, and a given one that contradicts them is refused.
func (sf *storeFlags) options() (store.Options, error) {
	opt := store.Options{KeyPrefix: sf.redisPrefix, Serve: sf.serve}
	if sf.fs.Lookup("fsync") == nil {
		return opt, nil
	}
	opt.NoFsync = sf.fsync == "never" // oneOfFlag took always or never
	opt.AppendLog = sf.appendLog
	if sf.maxThreads < 1 || sf.retainN < 1 {
		return opt, usageError("--max-threads and --retention-messages must be positive")
	}
	if err := tooShort(durationFloor{"--retention-age", sf.retainAge, minRetainAge}); err != nil {
		return opt, err
	}
	if sf.serve || given(sf.fs, "max-threads") {
		opt.MaxThreads = sf.maxThreads
	}
	if sf.serve || given(sf.fs, "retention-messages") {
		opt.Retention.Messages = sf.retainN
	}
	if sf.serve || given(sf.fs, "retention-age") {
		opt.Retention.Age = sf.retainAge
	}
	return opt, nil
}

// openHost opens the store for a command other than serve: with only the
// values given on its command line (options).
func (sf *storeFlags) openHost(ctx context.Context) (*store.Backend, error) {
	opt, err := sf.options()
	if err != nil {
		return nil, err
	}
	// The store's records go to the command's standard error, warnings
	// and errors only: the command says what it did itself (a store's
	// info, such as "made the VAPID key" under push rotate-key, would
	// repeat it), and the process's default logger is not the command's.
	opt.Log = slog.New(slog.NewTextHandler(sf.fs.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	if dir, ok := sf.folder(); ok && sf.existing && dir != "" { // "": store.Open refuses it as a bad flag value
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return nil, chatrelay.Errorf(chatrelay.NotFound, "no data folder %s: give --data (or CHATRELAY_DATA) the server's folder", dir)
		}
	}
	return sf.open(ctx, opt)
}

// folder is the file store's folder the flags name, if they name one.
func (sf *storeFlags) folder() (string, bool) {
	if sf.store == "" {
		return sf.data, true
	}
	dir, ok := strings.CutPrefix(sf.store, "file:")
	return dir, ok
}

// open opens the store the flags name with opt.
func (sf *storeFlags) open(ctx context.Context, opt store.Options) (*store.Backend, error) {
	b, err := store.Open(ctx, sf.spec(), opt)
	var ce *store.ConfigError
	if errors.As(err, &ce) {
		return nil, usageError(ce.Error())
	}
	return b, err
}
