package transport_test

import (
	"bufio"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/testproc"
)

// BenchmarkWebPush's pushes sent by another process
// (CHATRELAY_BENCH_PUSHER=process): the "on" server serves the push
// routes and sends nothing (PushConfig.NoSend), and a second process,
// this test binary run again with only TestPushSenderProcess, in
// SCHED_IDLE (testproc.Idle: the kernel runs it only when no thread of
// another class wants the core, and preempts it the moment one wakes),
// opens the same store and runs a server whose pusher sends them all,
// claiming each change in the store as another node would. Its CPU is
// not the server's: the benchmark reports it as pusher-us/push.

const (
	pusherModeEnv = "CHATRELAY_BENCH_PUSHER" // "process": the pushes sent by another process
	pushSenderEnv = "CHATRELAY_PUSH_SENDER"  // in the sender process: its pushSenderSpec, as JSON
)

// pushSenderSpec is what the sender process opens: the store of the
// server under test (its data folder, or its Redis and prefix) and the
// push service's certificate, to trust.
type pushSenderSpec struct {
	procStore
	Cert []byte `json:"cert"`
}

// pushSenderHello is the sender process's first line: the address of
// its server (for /metrics: the pushes it counted).
type pushSenderHello struct {
	URL string `json:"url"`
}

// TestPushSenderProcess is the push-sending process of BenchmarkWebPush
// (pushSenderEnv set); without it, it does nothing. It runs a server on
// the spec's store with push on and its feed running; each line on its
// input ("cpu") is answered with its CPU time so far; it exits when its
// input closes.
func TestPushSenderProcess(t *testing.T) {
	raw := os.Getenv(pushSenderEnv)
	if raw == "" {
		t.Skip("the push sender process of BenchmarkWebPush")
	}
	var spec pushSenderSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(spec.Cert)
	if err != nil {
		t.Fatal(err)
	}
	e := startPush(t, pushOptions{on: spec.open(t), config: withPushTo(cert, nil)})
	out := bufio.NewWriter(os.Stdout)
	hello, _ := json.Marshal(pushSenderHello{URL: e.url("")})
	out.Write(append(hello, '\n'))
	out.Flush()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		fmt.Fprintf(out, "%d\n", processCPU())
		out.Flush()
	}
}

// pushSender is the sender process, as the benchmark drives it.
type pushSender struct {
	proc *testproc.Proc
	out  *bufio.Scanner
	url  string
	c    *http.Client
}

// startPushSender starts the sender process on on's store, trusting
// cert, in SCHED_IDLE; it is stopped at tb's end.
func startPushSender(tb testing.TB, on *pushEnv, cert *x509.Certificate) *pushSender {
	tb.Helper()
	b, _ := json.Marshal(pushSenderSpec{procStore: procStoreOf(on.backend), Cert: cert.Raw})
	proc := testproc.Start(tb, "TestPushSenderProcess", []string{pushSenderEnv + "=" + string(b)}, testproc.Idle)
	tb.Cleanup(func() { proc.Stop(30 * time.Second) })
	out := bufio.NewScanner(proc.Stdout)
	hello := make(chan pushSenderHello, 1)
	go func() { // the test framework's own lines may come first
		for out.Scan() {
			var h pushSenderHello
			if json.Unmarshal(out.Bytes(), &h) == nil && h.URL != "" {
				hello <- h
				return
			}
		}
		close(hello)
	}()
	var h pushSenderHello
	select {
	case h = <-hello:
	case <-time.After(30 * time.Second):
		tb.Fatal("the push sender process did not start within 30s")
	}
	if h.URL == "" {
		tb.Fatalf("the push sender process ended: %v", out.Err())
	}
	return &pushSender{proc: proc, out: out, url: h.URL, c: &http.Client{}}
}

// cpu is the sender process's CPU time so far.
func (p *pushSender) cpu(tb testing.TB) time.Duration {
	tb.Helper()
	if _, err := p.proc.Write([]byte("cpu\n")); err != nil {
		tb.Fatalf("the push sender process: %v", err)
	}
	for p.out.Scan() {
		var ns int64
		if _, err := fmt.Sscanf(p.out.Text(), "%d", &ns); err == nil {
			return time.Duration(ns)
		}
	}
	tb.Fatalf("the push sender process ended: %v", p.out.Err())
	return 0
}
