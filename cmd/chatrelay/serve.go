package main

import (
	"github.com/chatrelay/chatrelay"

	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/redisstore"
	"github.com/chatrelay/chatrelay/transport"
)

func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("serve", "serve [flags]", stderr)
	var sf storeFlags
	sf.register(fs, true)
	addr := fs.String("addr", "127.0.0.1:8080", "listen `address`")
	prefix := fs.String("prefix", "", "mount the whole API under this `path`, e.g. /spaces/newos4")
	rateThread := fs.Int("rate-thread", chatrelay.DefaultRatePerThread, "accepted posts per thread per rate window")
	rateIP := fs.Int("rate-ip", chatrelay.DefaultRatePerIP, "accepted posts per client IP per rate window")
	rateWindow := fs.Duration("rate-window", chatrelay.DefaultRateWindow, "the sliding rate window")
	sweepEvery := fs.Duration("sweep-every", chatrelay.DefaultSweepEvery, "how often retention sweeps every thread")
	var trusted listFlag
	fs.Var(&trusted, "trusted-proxy", "`CIDR` of a reverse proxy whose X-Forwarded-For is believed (repeatable)")
	var origins listFlag
	fs.Var(&origins, "allowed-origin", "another `origin` (https://app.example.com) whose pages may use the API: CORS and the WebSocket origin check (repeatable; the server's own origin is always allowed)")
	heartbeat := fs.Duration("heartbeat", chatrelay.DefaultHeartbeat, "SSE ping comment and WebSocket ping interval")
	ticketTTL := fs.Duration("ticket-ttl", chatrelay.DefaultTicketTTL, "how long a stream ticket is valid")
	ticketKeyFile := fs.String("ticket-key-file", "", "`file` holding the ticket signing key (created 0600 if missing); default DATA/ticket.key, or kept in Redis with --store redis://. Every node needs the same key")
	streamsThread := fs.Int("max-streams-per-thread", chatrelay.DefaultStreamsPerThread, "open SSE and WebSocket streams allowed per thread")
	streamsIP := fs.Int("max-streams-per-ip", chatrelay.DefaultStreamsPerIP, "open SSE and WebSocket streams allowed per client IP")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	var of opsFlags // --log-format, --metrics-addr, --tls-cert, --tls-key, --drain-delay (ops.go)
	of.register(fs)
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Sprintf("serve takes no arguments, got %q", fs.Args()))
	}
	opt, err := sf.options()
	if err != nil {
		return err
	}
	proxies, err := prefixes(trusted)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usageError(fmt.Sprintf("--log-level %q: %v", *logLevel, err))
	}
	if *rateThread < 1 || *rateIP < 1 || *rateWindow <= 0 || *sweepEvery <= 0 || *heartbeat <= 0 ||
		*ticketTTL <= 0 || *streamsThread < 1 || *streamsIP < 1 {
		return usageError("--rate-*, --sweep-every, --heartbeat, --ticket-ttl and --max-streams-* must be positive")
	}
	if err := of.check(); err != nil {
		return err
	}
	log := of.logger(stderr, level)
	opt.Log = log

	st, err := sf.open(ctx, opt)
	if err != nil {
		return err
	}
	defer st.Close()
	// One node keeps its limits in memory; nodes sharing a Redis count
	// them there, and share the ticket key there unless given a file.
	var limiter chatrelay.RateLimiter = transport.NewMemoryLimiter(chatrelay.Windows{PerThread: *rateThread, PerIP: *rateIP, Window: *rateWindow}, nil)
	var streams chatrelay.StreamLimiter = transport.NewMemoryStreams(*streamsThread, *streamsIP)
	var key []byte
	var keys transport.TicketKeys // the key kept in Redis, which may change under the node (#15)
	if rs := st.redis; rs != nil {
		limiter = redisstore.NewRateLimiter(rs, chatrelay.Windows{PerThread: *rateThread, PerIP: *rateIP, Window: *rateWindow})
		sl := redisstore.NewStreamLimiter(rs, chatrelay.StreamLimits{PerThread: *streamsThread, PerIP: *streamsIP}, 0)
		defer sl.Close()
		streams = sl
		if *ticketKeyFile == "" {
			if key, err = rs.TicketKey(ctx); err != nil {
				return err
			}
			keys = rs
		}
	} else if *ticketKeyFile == "" {
		*ticketKeyFile = filepath.Join(sf.data, "ticket.key")
	}
	if key == nil {
		if key, err = loadKey(*ticketKeyFile); err != nil {
			return err
		}
	}
	srv := transport.NewServer(transport.Config{
		Store:          st.Store,
		Limiter:        limiter,
		Streams:        streams,
		Prefix:         *prefix,
		Trusted:        proxies,
		AllowedOrigins: origins,
		TicketKey:      key,
		TicketKeys:     keys,
		TicketTTL:      *ticketTTL,
		Heartbeat:      *heartbeat,
		Log:            log,
		PrivateMetrics: of.metricsAddr != "",
	})
	hs := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second, // streams clear it and set a deadline per write
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "listening on %s://%s%s/\n", of.scheme(), ln.Addr(), *prefix)
	log.Info("listening", "addr", ln.Addr().String(), "store", sf.where(), "fsync", sf.fsync, "tls", of.tls != nil)
	stopOps, err := of.startOps(srv, stdout, log)
	if err != nil {
		ln.Close()
		return err
	}
	defer stopOps()

	// Background work, each owned here and waited for before run returns.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	var wg sync.WaitGroup
	wg.Go(func() { sweep(bg, st, *sweepEvery, log) })
	relayErr := make(chan error, 1)
	wg.Go(func() { relayErr <- srv.Run(bg) })
	defer wg.Wait()
	errc := make(chan error, 1)
	go func() { errc <- of.serve(hs, ln) }()

	select {
	case err = <-errc:
		stopBG()
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		return err
	case err = <-relayErr:
		hs.Close()
		return fmt.Errorf("change feed: %w", err)
	case <-ctx.Done():
	}
	of.drain(srv, log) // /readyz answers 503 from here on
	// SIGINT/SIGTERM: stop accepting, end every stream (SSE handlers return
	// when the hub closes; WebSockets close with 1001), all within 5s.
	log.Info("shutting down")
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer scancel()
	hs.RegisterOnShutdown(func() { srv.Shutdown(sctx) })
	err = hs.Shutdown(sctx)
	if werr := srv.Shutdown(sctx); err == nil {
		err = werr
	}
	stopBG()
	return err
}

// loadKey reads the ticket signing key, creating it (32 random bytes, mode
// 0600) if the file does not exist. Two processes starting at once agree:
// the key is linked into place, never overwritten.
func loadKey(path string) ([]byte, error) {
	key, err := os.ReadFile(path)
	if err == nil {
		if len(key) < 32 {
			return nil, fmt.Errorf("ticket key %s: want at least 32 bytes, has %d", path, len(key))
		}
		return key, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("ticket key: %w", err)
	}
	key = make([]byte, 32)
	rand.Read(key)
	tmp, err := os.CreateTemp(filepath.Dir(path), ".ticket.key.tmp-*")
	if err != nil {
		return nil, fmt.Errorf("ticket key: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(key)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), path)
	}
	if errors.Is(err, fs.ErrExist) {
		return loadKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("ticket key: %w", err)
	}
	return key, nil
}

// sweep runs the retention sweep at start and then every interval until ctx is done.
func sweep(ctx context.Context, st store.Store, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		stats, err := st.Sweep(ctx)
		if err != nil && ctx.Err() == nil {
			log.Warn("sweep", "err", err)
		} else if stats.Dropped > 0 {
			log.Info("sweep", "threads", stats.Threads, "dropped", stats.Dropped, "threads_removed", stats.ThreadsRemoved)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
