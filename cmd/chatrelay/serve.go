package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/filestore"
	"github.com/chatrelay/chatrelay/transport"
)

// serveGCPercent is serve's GOGC where the GOGC variable sets none: the
// collector runs about half as often as at Go's 100, for a heap that
// grows to up to three times the live one instead of two. In S2 on tmpfs
// it halved the collections and cut the collector's CPU by about 0.006 ms
// a post (about 3 %), and raised S3's memory of an idle stream by about
// 6 % (docs/performance-log.md).
const serveGCPercent = 200

// gcPercent is the GOGC serve sets, ok false when the GOGC variable names
// one (the runtime has read it: it is left as it is, "off" too).
func gcPercent(getenv func(string) string) (pct int, ok bool) {
	if getenv("GOGC") != "" {
		return 0, false
	}
	return serveGCPercent, true
}

// serve runs the server: wiring of the store the flags name, the HTTP
// handler and the background work, until ctx is done.
func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	f, err := parseServe(args, getenv, stderr)
	if err != nil {
		return err
	}
	if pct, ok := gcPercent(getenv); ok {
		debug.SetGCPercent(pct)
	}
	log := f.ops.logger(stderr, f.level)
	// The listeners first: a serve that cannot listen has not opened the
	// store, which makes the data folder and records the flags in it
	// (settings.json, which the host CLI's writes follow).
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return listenFault("--addr", f.addr, err)
	}
	defer ln.Close() // the server closes it too; a start that fails after this point returns
	opsLn, err := f.ops.listen()
	if err != nil {
		return err
	}
	if opsLn != nil {
		defer opsLn.Close()
	}
	f.storeOpt.Log = log
	st, err := f.store.open(ctx, f.storeOpt)
	if err != nil {
		return err
	}
	defer st.Close()
	// Who sends the pushes (pushsend.go): this process, which takes the
	// sending of a file store's folder for itself (before it says it
	// listens), or a child.
	var child *pushChild
	if f.server.Push != nil {
		switch f.push.sender {
		case pushSenderInProcess:
			if dir, ok := f.store.folder(); ok {
				release, err := filestore.LockPushSender(dir, "chatrelay serve")
				if err != nil {
					return err
				}
				defer release()
			}
		case pushSenderProcess:
			if child, err = newPushChild(f, stderr, log); err != nil {
				return err
			}
		}
	}

	if f.keyFile != "" { // --ticket-key-file: a file, whatever the store
		st.TicketKey, st.TicketKeyShared = filestore.KeyFile(f.keyFile, log), false
	}
	srv, err := f.newServer(ctx, st, log)
	if err != nil {
		return err
	}
	hooks, err := f.hooks.deliverer(st, srv.Registry(), log) // nil without --webhook (webhook.go)
	if err != nil {
		return err
	}
	var fresh newConns // closed at shutdown (newconns.go)
	hs := httpServer(srv, &fresh, log)
	fmt.Fprintf(stdout, "listening on %s://%s%s/\n", f.ops.scheme(), ln.Addr(), f.server.Prefix)
	log.Info("listening", "addr", ln.Addr().String(), "store", st.Where, "fsync", !f.storeOpt.NoFsync, "append_log", f.storeOpt.AppendLog, "tls", f.ops.tls != nil)
	stopOps := f.ops.startOps(opsLn, srv, stdout, log)
	defer stopOps()

	// Background work, each owned here and waited for before serve returns.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	var wg sync.WaitGroup
	wg.Go(func() { sweep(bg, srv, f.sweepEvery, log) })
	if hooks != nil {
		wg.Go(func() { hooks.Run(bg) })
	}
	if child != nil {
		wg.Go(func() { child.run(bg) })
	}
	feedErr := make(chan error, 2)
	wg.Go(func() { feedErr <- srv.Run(bg) })
	wg.Go(func() {
		if err := f.mcp.run(bg); err != nil && bg.Err() == nil {
			feedErr <- err
		}
	})
	defer wg.Wait()
	if child != nil {
		// Its feed live before the first request: a post stored before
		// then would not be pushed. The requests meanwhile wait in the
		// listener's queue; not for a child that exited (another sender
		// has the folder's pushes, or the child cannot start): its
		// restarts come at growing intervals, logged each.
		select {
		case <-child.settled:
			select {
			case <-child.ready:
			default:
				log.Warn("push sender: exited before its feed was live; serving all the same (a post stored while no sender runs is not pushed)")
			}
		case <-time.After(pushSenderReadyWait):
			log.Warn("push sender: not ready yet; serving all the same (a post stored before it is ready is not pushed)", "waited", pushSenderReadyWait.String())
		case <-ctx.Done():
		}
	}
	errc := make(chan error, 1)
	go func() { errc <- f.ops.serve(hs, ln) }()

	select {
	case err = <-errc:
		stopBG()
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		return err
	case err = <-feedErr:
		hs.Close()
		return fmt.Errorf("change feed: %w", err)
	case <-ctx.Done():
	}
	f.ops.drain(srv, log) // /readyz answers 503 from here on
	err = shutdown(ctx, hs, ln, srv, &fresh, log)
	stopBG()
	return err
}

// httpServer is the listener's server of the API: its timeouts are the
// defaults', and fresh learns of every connection.
func httpServer(srv *transport.Server, fresh *newConns, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           srv,
		ConnState:         fresh.track,
		ReadHeaderTimeout: chatrelay.DefaultReadHeaderTimeout,
		ReadTimeout:       chatrelay.DefaultReadTimeout,
		WriteTimeout:      chatrelay.DefaultHTTPWriteTimeout, // streams clear it and set a deadline per write
		IdleTimeout:       chatrelay.DefaultIdleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// shutdown is SIGINT/SIGTERM's: stop accepting, end every stream (SSE
// handlers return when the hub closes; WebSockets close with 1001), all
// within chatrelay.DefaultShutdownTimeout.
func shutdown(ctx context.Context, hs *http.Server, ln net.Listener, srv *transport.Server, fresh *newConns, log *slog.Logger) error {
	log.Info("shutting down")
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), chatrelay.DefaultShutdownTimeout)
	defer scancel()
	// The listener first, then the connections it accepted last get to
	// send their request (at most freshGrace), before hs.Shutdown: from
	// then on net/http drops, unanswered, a request it reads. A proxy
	// opens a connection a request while the server drains (each answer
	// then closes its own), and one opened as the listener closed held a
	// post on its way, which the proxy answered 502.
	ln.Close()
	fresh.settle(sctx, freshGrace)
	hs.RegisterOnShutdown(func() { srv.Shutdown(sctx) })
	hs.RegisterOnShutdown(fresh.close) // a connection with no request yet would hold Shutdown 5 s
	err := hs.Shutdown(sctx)
	if errors.Is(err, net.ErrClosed) { // the listener, closed above
		err = nil
	}
	if werr := srv.Shutdown(sctx); err == nil {
		err = werr
	}
	return err
}

// newServer makes the API server over the opened store, with the
// store's limiters and ticket key.
func (f *serveFlags) newServer(ctx context.Context, st *store.Backend, log *slog.Logger) (*transport.Server, error) {
	key, err := st.TicketKey(ctx)
	if err != nil {
		return nil, err
	}
	f.server.Store, f.server.Limiter, f.server.Streams = st.Store, st.Limiter, st.Streams // the backend's own store: its optional interfaces (Checker, Participants) show
	f.server.Windows, f.server.StreamLimits = f.storeOpt.Windows, f.storeOpt.Streams
	f.server.Retention = st.Settings.Retention // stated in GET /api/limits.json
	f.server.MCPBounds = f.mcp.opt.MCPBounds   // stated there too
	f.server.TicketKey, f.server.Log = key, log
	if st.TicketKeyShared { // kept in Redis: it may change under the node (#15)
		f.server.TicketKeys = transport.TicketKeyFunc(st.TicketKey)
	}
	if f.server.Limiter == nil { // one node: counted in memory, the API's and MCP's posts alike
		f.server.Limiter = transport.NewMemoryLimiter(f.server.Windows, nil)
	}
	if err := f.mcp.start(st, &f.server, f.server.Limiter, log); err != nil {
		return nil, err
	}
	if err := startPush(ctx, f.server.Push, st.Store, log); err != nil {
		return nil, err
	}
	return transport.NewServer(f.server), nil
}

// serveFlags are serve's flags, parsed and checked.
type serveFlags struct {
	store      storeFlags
	storeOpt   store.Options
	keyFile    string   // --ticket-key-file
	ops        opsFlags // --log-format, --metrics-addr, --tls-cert, --tls-key, --drain-delay (ops.go)
	mcp        mcpFlags // --mcp and its bounds (servemcp.go)
	hooks      hookFlags
	push       *pushFlags // --push, --push-contact, --push-allow-host, --push-sender (push.go)
	server     transport.Config
	addr       string
	sweepEvery time.Duration
	level      slog.Level
}

func parseServe(args []string, getenv func(string) string, stderr io.Writer) (*serveFlags, error) {
	var f serveFlags
	fs := newFlags("serve", "serve [flags]", stderr)
	f.store.serve = true
	f.store.register(fs, true)
	fs.StringVar(&f.addr, "addr", chatrelay.DefaultAddr, "listen `address`")
	prefix := fs.String("prefix", "", "mount the whole API under this `path`, e.g. /spaces/newos4 (letters, digits and -._~ in each segment)")
	var windows chatrelay.Windows
	var streams chatrelay.StreamLimits
	w, l := &windows, &streams
	fs.IntVar(&w.PerThread, "rate-thread", chatrelay.DefaultRatePerThread, "accepted posts per thread per rate window")
	fs.IntVar(&w.PerIP, "rate-ip", chatrelay.DefaultRatePerIP, "accepted posts per client address (an IPv6 address by its /64) per rate window")
	fs.DurationVar(&w.Window, "rate-window", chatrelay.DefaultRateWindow, "the sliding rate window")
	fs.DurationVar(&f.sweepEvery, "sweep-every", chatrelay.DefaultSweepEvery, "how often retention sweeps every thread (and the share links and devices that expired unused are noticed: their audit and webhook event)")
	var trusted, origins listFlag
	fs.Var(&trusted, "trusted-proxy", "`CIDR` of a reverse proxy whose X-Forwarded-For is believed (repeatable)")
	fs.Var(&origins, "allowed-origin", "another `origin` (https://app.example.com, exactly: no patterns; :443 on https and :80 on http match an Origin without a port; IPv6 as http://[::1]:8080) whose pages may use the API (CORS and the WebSocket origin check) and frame the chat's pages (repeatable; the server's own origin is always allowed)")
	fs.DurationVar(&f.server.Heartbeat, "heartbeat", chatrelay.DefaultHeartbeat, "SSE ping comment and WebSocket ping interval")
	fs.DurationVar(&f.server.TicketTTL, "ticket-ttl", chatrelay.DefaultTicketTTL, "how long a stream ticket is valid")
	fs.StringVar(&f.keyFile, "ticket-key-file", "", "`file` holding the ticket signing key (created 0600 if missing); default DATA/ticket.key, or kept in Redis with --store redis://. Every node needs the same key")
	fs.IntVar(&l.PerThread, "max-streams-per-thread", chatrelay.DefaultStreamsPerThread, "open SSE and WebSocket streams allowed per thread; its participants together may hold three quarters of them, the rest is kept for the owner")
	fs.IntVar(&l.PerIP, "max-streams-per-ip", chatrelay.DefaultStreamsPerIP, "open SSE and WebSocket streams allowed per client address (an IPv6 address by its /64)")
	publicURL := fs.String("public-url", "", "the public `URL` of the server (https://chat.example.com, with the prefix if any) that share links start with; default: each request's scheme and Host. The host CLI's share takes it from the data folder")
	fs.Int64Var(&f.server.MaxAttachmentBytes, "max-attachment-bytes", int64(chatrelay.LimitAttachmentBytes.Max), fmt.Sprintf("most `bytes` of one attachment; one more is 413 %s (at most a thread's %d)", chatrelay.AttachmentTooLarge, chatrelay.LimitThreadAttachments.Max))
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	f.push = registerPush(fs)
	f.ops.register(fs)
	f.mcp.register(fs)
	f.hooks.register(fs)
	if err := parse(fs, args, getenv); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usageError(fmt.Sprintf("serve takes no arguments, got %q", fs.Args()))
	}
	var err error
	if f.storeOpt, err = f.store.options(); err != nil {
		return nil, err
	}
	f.storeOpt.Windows, f.storeOpt.Streams = windows, streams
	if err := f.hooks.check(&f.storeOpt); err != nil {
		return nil, err
	}
	if f.server.Trusted, err = prefixes(trusted); err != nil {
		return nil, err
	}
	if f.server.Prefix, err = transport.CheckPrefix(*prefix); err != nil {
		return nil, usageError(err.Error())
	}
	for _, o := range origins {
		if _, err := transport.CheckOrigin(o); err != nil {
			return nil, usageError("--allowed-origin " + err.Error())
		}
	}
	f.server.AllowedOrigins = origins
	if f.server.Push, err = f.push.config(); err != nil {
		return nil, err
	}
	if *publicURL != "" {
		if f.server.PublicURL, err = transport.CheckPublicURL(*publicURL); err != nil {
			return nil, usageError("--public-url " + err.Error())
		}
		f.storeOpt.PublicURL = f.server.PublicURL
	}
	if f.level, err = parseLevel(*logLevel); err != nil {
		return nil, err
	}
	// Each refused flag by its whole name, so that the refusal can name
	// the variable that set it (namedFromEnv).
	var notPositive []string
	for _, c := range []struct {
		flag string
		bad  bool
	}{
		{"--rate-thread", w.PerThread < 1}, {"--rate-ip", w.PerIP < 1},
		{"--max-streams-per-thread", l.PerThread < 1}, {"--max-streams-per-ip", l.PerIP < 1},
	} {
		if c.bad {
			notPositive = append(notPositive, c.flag)
		}
	}
	if len(notPositive) > 0 {
		return nil, usageError(strings.Join(notPositive, ", ") + " must be positive")
	}
	if err := tooShort(
		durationFloor{"--rate-window", w.Window, minRateWindow},
		durationFloor{"--sweep-every", f.sweepEvery, minSweepEvery},
		durationFloor{"--heartbeat", f.server.Heartbeat, minHeartbeat},
		durationFloor{"--ticket-ttl", f.server.TicketTTL, minTicketTTL},
	); err != nil {
		return nil, err
	}
	if f.server.MaxAttachmentBytes < 1 || f.server.MaxAttachmentBytes > int64(chatrelay.LimitThreadAttachments.Max) {
		return nil, usageError(fmt.Sprintf("--max-attachment-bytes must be 1 … %d", chatrelay.LimitThreadAttachments.Max))
	}
	f.server.PrivateMetrics = f.ops.metricsAddr != ""
	if err := f.mcp.check(); err != nil {
		return nil, err
	}
	if err := checkListenAddr("--addr", f.addr); err != nil {
		return nil, err
	}
	return &f, f.ops.check()
}

// sweep runs the retention sweep at start and then every interval until
// ctx is done, and with it notices the share links and devices that
// expired unnoticed (their audit and webhook event).
func sweep(ctx context.Context, srv *transport.Server, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		stats, err := srv.Sweep(ctx) // the expiries first: a thread it removes takes its grants
		if err != nil && ctx.Err() == nil {
			log.Warn("sweep", "err", err)
		}
		if stats.Dropped > 0 {
			log.Info("sweep", "threads", stats.Threads, "dropped", stats.Dropped, "threads_removed", stats.ThreadsRemoved)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
