package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
)

func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlags("serve", "serve [flags]", stderr)
	var sf storeFlags
	sf.register(fs, true)
	addr := fs.String("addr", "127.0.0.1:8080", "listen `address`")
	prefix := fs.String("prefix", "", "mount the whole API under this `path`, e.g. /spaces/newos4")
	rateThread := fs.Int("rate-thread", 20, "accepted posts per thread per rate window")
	rateIP := fs.Int("rate-ip", 40, "accepted posts per client IP per rate window")
	rateWindow := fs.Duration("rate-window", 10*time.Minute, "the sliding rate window")
	sweepEvery := fs.Duration("sweep-every", time.Hour, "how often retention sweeps every thread")
	var trusted listFlag
	fs.Var(&trusted, "trusted-proxy", "`CIDR` of a reverse proxy whose X-Forwarded-For is believed (repeatable)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
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
	if *rateThread < 1 || *rateIP < 1 || *rateWindow <= 0 || *sweepEvery <= 0 {
		return usageError("--rate-thread, --rate-ip, --rate-window and --sweep-every must be positive")
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	opt.Log = log

	st, err := store.OpenFile(sf.data, opt)
	if err != nil {
		return err
	}
	defer st.Close()
	srv := transport.NewServer(transport.Config{
		Store:   st,
		Limiter: transport.NewMemoryLimiter(transport.Windows{PerThread: *rateThread, PerIP: *rateIP, Window: *rateWindow}, nil),
		Prefix:  *prefix,
		Trusted: proxies,
		Log:     log,
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
	fmt.Fprintf(stdout, "listening on http://%s%s/\n", ln.Addr(), *prefix)
	log.Info("listening", "addr", ln.Addr().String(), "data", sf.data, "fsync", sf.fsync)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sweepDone := make(chan struct{})
	go func() {
		defer close(sweepDone)
		sweep(ctx, st, *sweepEvery, log)
	}()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()

	select {
	case err = <-errc:
	case <-ctx.Done():
		log.Info("shutting down")
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer scancel()
		err = hs.Shutdown(sctx)
	}
	cancel()
	<-sweepDone
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
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
