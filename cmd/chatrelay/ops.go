package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/transport"
)

// opsFlags are serve's operational flags: logs, metrics, TLS, draining.
type opsFlags struct {
	logFormat   string
	metricsAddr string
	tlsCert     string
	tlsKey      string
	drainDelay  time.Duration
	pprof       bool
	tls         *tls.Config // loaded by check
}

func (o *opsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&o.logFormat, "log-format", "text", "log line format: text or json")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "serve "+chatrelay.PathMetrics+" (and "+chatrelay.PathHealthz+", "+chatrelay.PathReadyz+") on this private `address` instead of the main listener")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate chain `file`; with --tls-key, serve HTTPS with HTTP/2")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key `file` of --tls-cert")
	fs.BoolVar(&o.pprof, "pprof", false, "also serve Go's profiles (/debug/pprof/) on --metrics-addr, for profiling a live server")
	fs.DurationVar(&o.drainDelay, "drain-delay", 0, "on SIGTERM, keep serving this long with "+chatrelay.PathReadyz+" answering 503 before closing the listener, so a load balancer stops sending new clients")
}

// check validates the flags and loads the certificate, so that a bad
// file fails at start, not at the first handshake.
func (o *opsFlags) check() error {
	if o.logFormat != "text" && o.logFormat != "json" {
		return usageError(fmt.Sprintf("--log-format %q: want text or json", o.logFormat))
	}
	if o.drainDelay < 0 {
		return usageError("--drain-delay must not be negative")
	}
	if o.metricsAddr != "" {
		if err := checkListenAddr("--metrics-addr", o.metricsAddr); err != nil {
			return err
		}
	}
	if o.pprof && o.metricsAddr == "" {
		return usageError("--pprof needs --metrics-addr: the profiles are served only on the private listener")
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return usageError("--tls-cert and --tls-key go together")
	}
	if o.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			return fmt.Errorf("tls: %w", err)
		}
		o.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	return nil
}

// parseLevel is --log-level's value (serve's and push send's): debug,
// info, warn or error.
func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, usageError(fmt.Sprintf("--log-level %q: %v", s, err))
	}
	return l, nil
}

// logger returns the server's logger in the chosen format.
func (o *opsFlags) logger(w io.Writer, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if o.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func (o *opsFlags) scheme() string {
	if o.tls != nil {
		return "https"
	}
	return "http"
}

// serve serves hs on ln: HTTPS with HTTP/2 (ALPN "h2", then "http/1.1",
// which WebSockets use) if a certificate was given, else plain HTTP/1.1.
func (o *opsFlags) serve(hs *http.Server, ln net.Listener) error {
	if o.tls == nil {
		return hs.Serve(ln)
	}
	hs.TLSConfig = o.tls
	return hs.ServeTLS(ln, "", "")
}

// listen opens the private metrics listener if --metrics-addr was given
// (nil if not), before the store is opened: a serve that cannot listen
// leaves the data folder as it was.
func (o *opsFlags) listen() (net.Listener, error) {
	if o.metricsAddr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", o.metricsAddr)
	if err != nil {
		return nil, listenFault("--metrics-addr", o.metricsAddr, err)
	}
	return ln, nil
}

// startOps serves the private metrics listener ln (nil without
// --metrics-addr). stop closes it; call it after the main server has shut
// down, so /readyz answers 503 there while the main listener drains.
func (o *opsFlags) startOps(ln net.Listener, srv *transport.Server, stdout io.Writer, log *slog.Logger) (stop func()) {
	if ln == nil {
		return func() {}
	}
	handler := srv.OpsHandler()
	if o.pprof {
		mux := http.NewServeMux()
		mux.Handle("/", handler)
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		handler = mux
	}
	hs := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: chatrelay.DefaultReadHeaderTimeout,
		ReadTimeout:       chatrelay.DefaultReadTimeout,
		WriteTimeout:      chatrelay.DefaultOpsWriteTimeout, // a CPU profile takes 30 s by default
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	fmt.Fprintf(stdout, "metrics on http://%s%s\n", ln.Addr(), chatrelay.PathMetrics)
	log.Info("metrics listening", "addr", ln.Addr().String())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener", "err", err)
		}
	}()
	return func() {
		hs.Close()
		<-done
	}
}

// drain marks the server not ready and, with --drain-delay, keeps serving
// that long before shutdown.
func (o *opsFlags) drain(srv *transport.Server, log *slog.Logger) {
	srv.Drain()
	if o.drainDelay <= 0 {
		return
	}
	log.Info("draining", "for", o.drainDelay)
	t := time.NewTimer(o.drainDelay)
	defer t.Stop()
	<-t.C
}

// checkListenAddr refuses a listen address that is no address (no port,
// a port that is not one of 0 … 65535): a bad flag value (exit 2), told
// apart from an address that is taken (exit 1, when serve listens).
func checkListenAddr(flagName, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil {
		return usageError(fmt.Sprintf("%s %q: want host:port, such as 127.0.0.1:8080 (%v)", flagName, addr, err))
	}
	return nil
}
