package pushtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/testproc"
)

// A Service in a process of its own, as FCM or Mozilla's autopush run on
// machines of their own: its CPU is not the server's. The test binary
// runs itself again as the service (ServeProcess, in a test function
// that runs only when ServeEnv is set), and the test drives it through
// the same HTTPS server's /_control/ routes:
//
//	POST /_control/subscribe  {"name", "key" (the private scalar), "auth"}
//	GET  /_control/pushes     the pushes received, each decrypted and verified
//	                          (at the first time it is asked for: off the clock)
//	GET  /_control/wait?count=N&timeout=D  {"count"} once it has N (or at D)
//	GET  /_control/cpu        {"cpu_ns", "conns"}: the service process's CPU time so far,
//	                          and the connections it accepted (the control client's among them)

// ServeEnv set (to anything) in a test binary's environment makes its
// helper test run ServeProcess.
const ServeEnv = "CHATRELAY_PUSHTEST_SERVE"

// NiceEnv, in the test's environment, is the niceness StartRemote gives
// the push service process ("idle", SCHED_IDLE at nice 19, if unset:
// testproc.Idle; a number for that niceness in the normal class).
const NiceEnv = "CHATRELAY_PUSHTEST_NICE"

// remoteHello is the service process's first line on its standard output.
type remoteHello struct {
	URL  string `json:"url"`
	Cert []byte `json:"cert"` // DER
}

type remoteSub struct {
	Name string `json:"name"`
	Key  []byte `json:"key"`
	Auth []byte `json:"auth"`
}

// remotePush is a Push on the wire.
type remotePush struct {
	Path    string         `json:"path"`
	Plain   []byte         `json:"plain"`
	TTL     string         `json:"ttl"`
	Urgency string         `json:"urgency"`
	Topic   string         `json:"topic"`
	Claims  map[string]any `json:"claims"`
	Key     string         `json:"key"`
	Err     string         `json:"err,omitempty"`
	At      time.Time      `json:"at"`
}

// ServeProcess serves a Service on 127.0.0.1, HTTP/2 offered, until its
// standard input closes (the test that started it ended or died), then
// exits the process. Its first line on standard output says where it is.
//
// It decrypts and verifies the pushes it received when /_control/pushes
// asks for them, not as each arrives: on the one machine of a benchmark,
// a push service's checking (two P-256 scalar multiplications for the
// decryption, an ECDSA verification for the JWT) is not the server's CPU,
// and the benchmark asks after its timed phase. Every push is still
// decrypted and verified once, with the clock of its receipt.
func ServeProcess() {
	s := newService(true, func(s *Service) http.Handler {
		s.deferred = true // before the server starts
		return control(s)
	})
	b, _ := json.Marshal(remoteHello{URL: s.URL, Cert: s.Certificate().Raw})
	os.Stdout.Write(append(b, '\n'))
	io.Copy(io.Discard, os.Stdin) // until the test closes it, or ends
	s.Close()
	os.Exit(0)
}

// control is the handler of a Service's /_control/ routes.
func control(s *Service) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /_control/subscribe", func(w http.ResponseWriter, r *http.Request) {
		var rs remoteSub
		if err := json.NewDecoder(r.Body).Decode(&rs); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		k, err := ecdh.P256().NewPrivateKey(rs.Key)
		if err != nil || len(rs.Auth) != 16 {
			http.Error(w, fmt.Sprintf("key: %v, auth of %d bytes", err, len(rs.Auth)), http.StatusBadRequest)
			return
		}
		s.add(rs.Name, Subscription{Endpoint: s.URL + "/push/" + rs.Name, Key: k, Auth: rs.Auth})
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /_control/pushes", func(w http.ResponseWriter, r *http.Request) {
		var out []remotePush
		for _, p := range s.Pushes() {
			rp := remotePush{Path: p.Path, Plain: p.Plain, TTL: p.TTL, Urgency: p.Urgency, Topic: p.Topic, Claims: p.Claims, Key: p.Key, At: p.At}
			if p.Err != nil {
				rp.Err = p.Err.Error()
			}
			out = append(out, rp)
		}
		json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("GET /_control/wait", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.FormValue("count"))
		d, err := time.ParseDuration(r.FormValue("timeout"))
		if err != nil {
			d = 10 * time.Second
		}
		timer := time.NewTimer(d)
		defer timer.Stop()
		for {
			wake := s.Wait()
			if c := s.Count(); c >= n {
				json.NewEncoder(w).Encode(map[string]int{"count": c})
				return
			}
			select {
			case <-wake:
			case <-timer.C:
				json.NewEncoder(w).Encode(map[string]int{"count": s.Count()})
				return
			case <-r.Context().Done():
				return
			}
		}
	})
	mux.HandleFunc("GET /_control/cpu", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]int64{"cpu_ns": int64(processCPU()), "conns": s.Conns()})
	})
	return mux
}

// processCPU is this process's CPU time so far, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Remote is a Service in another process (ServeProcess).
type Remote struct {
	URL    string
	cert   *x509.Certificate
	client *http.Client
}

// StartRemote starts the push service process, in SCHED_IDLE (NiceEnv): the test
// binary itself, running only the test named helper (which calls
// ServeProcess when ServeEnv is set). It is stopped at the test's end.
func StartRemote(tb testing.TB, helper string) *Remote {
	tb.Helper()
	// It runs at the lowest CPU priority (testproc.Idle): on this machine
	// it stands in for a push service on machines of its own, so it
	// should take the CPU the server's process leaves, not the server's.
	// NiceEnv sets a niceness instead (0: as the test's; 19: the class of
	// the figures before 2026-12-05).
	proc := testproc.Start(tb, helper, []string{ServeEnv + "=1"}, testproc.Nice(NiceEnv, testproc.Idle))
	tb.Cleanup(func() { proc.Stop(10 * time.Second) }) // the service exits when its input closes
	stdout := proc.Stdout
	hello := make(chan remoteHello, 1)
	go func() {
		var h remoteHello
		line, err := bufio.NewReader(stdout).ReadBytes('\n')
		if err == nil {
			json.Unmarshal(line, &h)
		}
		hello <- h
		io.Copy(io.Discard, stdout)
	}()
	var h remoteHello
	select {
	case h = <-hello:
	case <-time.After(30 * time.Second):
		tb.Fatal("the push service process did not start within 30s")
	}
	cert, err := x509.ParseCertificate(h.Cert)
	if err != nil || h.URL == "" {
		tb.Fatalf("the push service process said %+v: %v", h, err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &Remote{URL: h.URL, cert: cert, client: &http.Client{
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true},
		Timeout:   2 * time.Minute,
	}}
}

// Certificate is the service's certificate, for the server's client to trust.
func (r *Remote) Certificate() *x509.Certificate { return r.cert }

func (r *Remote) call(method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, r.URL+path, rd)
	if err != nil {
		return err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// Subscribe makes a subscription whose endpoint is at the service, and
// gives the service its private keys.
func (r *Remote) Subscribe(tb testing.TB, name string) Subscription {
	tb.Helper()
	sub, err := newSubscription(r.URL, name)
	if err == nil {
		err = r.call(http.MethodPost, "/_control/subscribe", remoteSub{Name: name, Key: sub.Key.Bytes(), Auth: sub.Auth}, nil)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return sub
}

// Pushes returns every push the service received so far, in order, each
// decrypted and verified there.
func (r *Remote) Pushes(tb testing.TB) []Push {
	tb.Helper()
	var in []remotePush
	if err := r.call(http.MethodGet, "/_control/pushes", nil, &in); err != nil {
		tb.Fatal(err)
	}
	out := make([]Push, 0, len(in))
	for _, rp := range in {
		p := Push{Path: rp.Path, Plain: rp.Plain, TTL: rp.TTL, Urgency: rp.Urgency, Topic: rp.Topic, Claims: rp.Claims, Key: rp.Key, At: rp.At}
		if rp.Err != "" {
			p.Err = errors.New(rp.Err)
		}
		out = append(out, p)
	}
	return out
}

// Wait waits until the service received at least n pushes, or for d,
// and returns how many it has.
func (r *Remote) Wait(tb testing.TB, n int, d time.Duration) int {
	tb.Helper()
	var a struct{ Count int }
	if err := r.call(http.MethodGet, "/_control/wait?count="+strconv.Itoa(n)+"&timeout="+d.String(), nil, &a); err != nil {
		tb.Fatal(err)
	}
	return a.Count
}

// CPU is the service process's CPU time so far, user and system, and
// the connections it accepted but the test's own (the pushes' alone).
func (r *Remote) CPU(tb testing.TB) (time.Duration, int64) {
	tb.Helper()
	var a struct {
		CPU   int64 `json:"cpu_ns"`
		Conns int64 `json:"conns"`
	}
	if err := r.call(http.MethodGet, "/_control/cpu", nil, &a); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(a.CPU), a.Conns - 1
}
