package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chatrelay/chatrelay"
)

// Stores open themselves from a spec ("file:DIR", "redis://host:6379/0"),
// as database/sql opens a driver's database: each backend registers an
// Opener for its schemes in its init (store/filestore for "file",
// store/redisstore for "redis" and "rediss"), and a binary imports the
// backends it ships, for that side effect (cmd/chatrelay imports both); no
// other package imports a backend. The Backend an Opener returns carries the store and what the
// backend offers beside it, so a server is wired the same way whatever
// the backend.

// Options configures a store opened from its spec. Zero values take the
// defaults; for a command that only uses the store (the host CLI), a zero
// Retention or MaxThreads means "not given": the file store then takes
// what the data folder's server recorded (see Settings).
type Options struct {
	Retention  chatrelay.Retention
	MaxThreads int
	NoFsync    bool   // skip fsync (file store): fast, but an acknowledged message may be lost on power failure
	KeyPrefix  string // of every key of a shared backend (Redis); defaults to chatrelay.DefaultKeyPrefix

	// AppendLog (the file store only: Open refuses it with any other)
	// appends a post to its thread's log instead of rewriting the
	// thread's document (filestore.FileOptions.AppendLog).
	AppendLog bool

	// Windows and Streams are the limits a shared backend counts across
	// its nodes (Backend.Limiter and Backend.Streams).
	Windows chatrelay.Windows
	Streams chatrelay.StreamLimits

	// PublicURL is the base of share links a server records for the
	// host CLI (Settings.PublicURL).
	PublicURL string

	// Serve opens the store for a long-running server. The file store
	// then takes its data folder for this process alone, for the
	// server's life (a second server on the folder is refused; the CLI
	// is not), and records the settings it is served with.
	Serve bool

	// Webhooks are the IDs (DestinationID) of the webhook destinations a
	// server delivers to: every write then queues its events for each
	// (see Outbox). A server records them (the file store in its
	// settings, Redis in a key) and every other writer of the store (the
	// host CLI), which is opened without them, queues for what is
	// recorded.
	Webhooks []string

	Log *slog.Logger     // defaults to slog.Default()
	Now func() time.Time // defaults to time.Now
}

// Settings are what a data folder is served with: the server records them
// (DATA/settings.json) when it opens the folder, and the host CLI, which
// writes through the same folder, applies them, so that a reply with the
// CLI's defaults can never trim a thread that the server keeps longer.
type Settings struct {
	Retention  chatrelay.Retention
	MaxThreads int
	PublicURL  string   // the base of share links (serve --public-url), "" if none
	Webhooks   []string // the webhook destinations' IDs (serve --webhook)
}

// Backend is an open store and what its backend offers beside it.
type Backend struct {
	Store
	// Limiter and Streams count across every node of a shared backend;
	// nil for a backend that one server uses, which counts in memory.
	Limiter chatrelay.RateLimiter
	Streams chatrelay.StreamLimiter
	// TicketKey returns the key that signs stream tickets: the same for
	// every node of a store.
	TicketKey func(ctx context.Context) ([]byte, error)
	// TicketKeyShared says the key is kept where it may change under a
	// running server (a Redis that lost its data and got another node's
	// key): the server reads it again to sign and verify.
	TicketKeyShared bool
	// Where names the store for logs and messages, without a password.
	Where string
	// Settings are what the store is served with (retention, threads).
	Settings Settings
	// Outbox is the queue of webhook events; nil unless the store was
	// opened with Options.Webhooks.
	Outbox Outbox

	closers []func() error // run by Close, last first
	once    sync.Once
}

// OnClose adds fn to what Close runs (before closing the store; the last
// added runs first).
func (b *Backend) OnClose(fn func() error) { b.closers = append(b.closers, fn) }

// Close releases what the backend holds, then closes the store. It is
// idempotent.
func (b *Backend) Close() error {
	var err error
	b.once.Do(func() {
		for _, fn := range slices.Backward(b.closers) {
			err = errors.Join(err, fn())
		}
		if b.Store != nil {
			err = errors.Join(err, b.Store.Close())
		}
	})
	return err
}

// Opener opens the store a spec names. spec keeps its scheme.
type Opener func(ctx context.Context, spec string, opt Options) (*Backend, error)

var registry struct {
	mu      sync.Mutex
	openers map[string]Opener
}

// Register makes a backend available to Open under scheme ("redis" for
// "redis://…"). It panics if scheme is registered twice, like sql.Register.
func Register(scheme string, open Opener) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if registry.openers == nil {
		registry.openers = make(map[string]Opener)
	}
	if _, dup := registry.openers[scheme]; dup {
		panic("store: Register called twice for scheme " + scheme)
	}
	registry.openers[scheme] = open
}

// Schemes lists the registered schemes, sorted.
func Schemes() []string {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	var out []string
	for s := range registry.openers {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Open opens the store that spec names: "file:DIR" (a folder) or any
// scheme a backend registered. A spec without a scheme is a folder.
// It returns a *ConfigError for a spec or options that cannot be used.
func Open(ctx context.Context, spec string, opt Options) (*Backend, error) {
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	scheme, _, ok := strings.Cut(spec, ":")
	if !ok || strings.ContainsAny(scheme, `/\.`) {
		scheme, spec = "file", "file:"+spec
	}
	registry.mu.Lock()
	open := registry.openers[scheme]
	registry.mu.Unlock()
	if open == nil {
		return nil, ConfigErrorf("store %q: unknown scheme %q; this chatrelay opens %s", redact(spec), scheme, strings.Join(Schemes(), ", "))
	}
	if opt.AppendLog && scheme != "file" {
		return nil, ConfigErrorf("store %q: --append-log is an option of the file store (file:DIR) only; drop it", redact(spec))
	}
	b, err := open(ctx, spec, opt)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// ConfigError is a store spec or option that cannot be used, such as an
// unknown scheme or a CLI flag that contradicts what the data folder is
// served with: the caller's to fix (a command line exits 2).
type ConfigError struct{ msg string }

func (e *ConfigError) Error() string { return e.msg }

// ConfigErrorf is a *ConfigError, for a backend's opener.
func ConfigErrorf(format string, args ...any) error {
	return &ConfigError{fmt.Sprintf(format, args...)}
}

// redact drops a password from a spec, for messages.
func redact(spec string) string {
	scheme, rest, ok := strings.Cut(spec, "://")
	if !ok {
		return spec
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if i := strings.IndexAny(rest[:at], ":/"); i >= 0 && rest[i] == ':' {
			rest = rest[:i] + ":xxxxx" + rest[at:]
		}
	}
	return scheme + "://" + rest
}
