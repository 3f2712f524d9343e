package main

import (
	"github.com/chatrelay/chatrelay"

	"context"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/redisstore"
)

// newFlags returns a flag set for a subcommand that prints its usage to stderr.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: chatrelay %s\n\nFlags (each also read from CHATRELAY_<NAME>, e.g. --data from CHATRELAY_DATA):\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args, then fills every flag not given on the command line
// from its environment variable: --max-threads from CHATRELAY_MAX_THREADS.
// A repeatable flag takes a comma-separated list from its variable.
func parse(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return usageError(err.Error())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
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
		if _, ok := f.Value.(*listFlag); ok {
			values = strings.Split(v, ",")
		}
		for _, v := range values {
			if e := f.Value.Set(strings.TrimSpace(v)); e != nil {
				err = usageError(fmt.Sprintf("%s=%q: %v", env, v, e))
				return
			}
		}
	})
	return err
}

func envName(flagName string) string {
	return "CHATRELAY_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

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

// storeFlags are the flags of every command that uses the store.
type storeFlags struct {
	data        string
	store       string
	redisPrefix string
	fsync       string
	maxThreads  int
	retainN     int
	retainAge   time.Duration
}

func (sf *storeFlags) register(fs *flag.FlagSet, writes bool) {
	fs.StringVar(&sf.data, "data", "./data", "data `folder`; thread documents live in DIR/chat (local filesystems only)")
	fs.StringVar(&sf.store, "store", "", "the store `backend`: file:DIR (the same as --data DIR; the default) or redis://[user:pass@]host:port/db (rediss:// for TLS), shared by several nodes")
	fs.StringVar(&sf.redisPrefix, "redis-prefix", "chatrelay:", "prefix of every Redis key and of the feed channel")
	if !writes {
		return
	}
	fs.StringVar(&sf.fsync, "fsync", "always", "`mode`: always: an acknowledged message survives a power cut; never: skip fsync (benchmarks only, may lose acknowledged messages)")
	fs.IntVar(&sf.maxThreads, "max-threads", chatrelay.DefaultMaxThreads, "most threads the store holds; a post that would create one more gets 507 thread_limit")
	fs.IntVar(&sf.retainN, "retention-messages", chatrelay.DefaultRetainMessages, "newest messages kept per thread")
	fs.DurationVar(&sf.retainAge, "retention-age", chatrelay.DefaultRetainAge, "messages older than this are dropped")
}

// backend is an open store, and the Redis store behind it if it is one.
type backend struct {
	store.Store
	redis *redisstore.Store // nil for the file store
}

// open opens the store the flags name, with opt's retention and limits.
func (sf *storeFlags) open(ctx context.Context, opt store.FileOptions) (backend, error) {
	spec := sf.store
	switch {
	case spec == "":
	case strings.HasPrefix(spec, "file:"):
		sf.data = strings.TrimPrefix(spec, "file:")
		if sf.data == "" {
			return backend{}, usageError("--store file:DIR needs a folder")
		}
	case strings.HasPrefix(spec, "redis://"), strings.HasPrefix(spec, "rediss://"):
		rs, err := redisstore.Open(ctx, spec, redisstore.Options{
			Prefix: sf.redisPrefix, Retention: opt.Retention, MaxThreads: opt.MaxThreads, Log: opt.Log,
		})
		if err != nil {
			return backend{}, err
		}
		return backend{Store: rs, redis: rs}, nil
	default:
		return backend{}, usageError(fmt.Sprintf("--store %q: want file:DIR, redis:// or rediss://", spec))
	}
	fst, err := store.OpenFile(sf.data, opt)
	if err != nil {
		return backend{}, err
	}
	return backend{Store: fst}, nil
}

// where names the store for logs, without a password.
func (sf *storeFlags) where() string {
	if u, err := url.Parse(sf.store); err == nil && strings.HasPrefix(u.Scheme, "redis") {
		u.User = nil
		return u.String()
	}
	return "file:" + sf.data
}

func (sf *storeFlags) options() (store.FileOptions, error) {
	opt := store.FileOptions{
		MaxThreads: sf.maxThreads,
		Retention:  chatrelay.Retention{Messages: sf.retainN, Age: sf.retainAge},
	}
	switch sf.fsync {
	case "", "always":
	case "never":
		opt.NoFsync = true
	default:
		return opt, usageError(fmt.Sprintf("--fsync %q: want always or never", sf.fsync))
	}
	if sf.maxThreads < 1 || sf.retainN < 1 || sf.retainAge <= 0 {
		return opt, usageError("--max-threads, --retention-messages and --retention-age must be positive")
	}
	return opt, nil
}
