package filestore_test

// Tests with several processes: the test binary re-executes itself as a
// child (TestMain reads CHATRELAY_TEST_CHILD) that writes to the same data
// folder as the parent, the way the host CLI shares the server's store.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/filestore"
	"github.com/chatrelay/chatrelay/transport"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv("CHATRELAY_TEST_CHILD"); mode != "" {
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

// child is a writer process. It opens the store in $CHATRELAY_TEST_DATA,
// waits for a line on stdin (so that every child starts at once), then:
//
//	append: appends $CHATRELAY_TEST_N messages to $CHATRELAY_TEST_THREAD
//	create: appends one message, creating $CHATRELAY_TEST_THREAD, with a
//	        limit of $CHATRELAY_TEST_MAX threads
//	crash:  appends until it is killed
//
// With $CHATRELAY_TEST_APPEND_LOG set, its store appends posts to the
// thread's log (FileOptions.AppendLog).
//
// It prints "<epoch> <text>" for each acknowledged append, or "error <code>".
func child(mode string) int {
	if mode == "fdlimit" {
		return fdLimitChild()
	}
	if mode == "attach" {
		return attachChild() // attach_crash_test.go
	}
	data, thread := os.Getenv("CHATRELAY_TEST_DATA"), os.Getenv("CHATRELAY_TEST_THREAD")
	n, _ := strconv.Atoi(os.Getenv("CHATRELAY_TEST_N"))
	maxThreads, _ := strconv.Atoi(os.Getenv("CHATRELAY_TEST_MAX"))
	st, err := filestore.OpenFile(data, filestore.FileOptions{
		Retention:  chatrelay.Retention{Messages: 10000},
		MaxThreads: maxThreads,
		NoFsync:    mode != "crash",
		AppendLog:  os.Getenv("CHATRELAY_TEST_APPEND_LOG") != "",
		Log:        slog.New(slog.DiscardHandler),
		Webhooks:   strings.Fields(os.Getenv("CHATRELAY_TEST_HOOKS")),
	})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	bufio.NewReader(os.Stdin).ReadString('\n')
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	name := os.Getenv("CHATRELAY_TEST_NAME")
	for i := 0; mode == "crash" || i < n; i++ {
		text := fmt.Sprintf("%s-%d", name, i)
		e, err := st.Append(context.Background(), thread, store.NewMessage{Author: chatrelay.Agent, Text: text})
		if err != nil {
			fmt.Fprintln(out, "error", chatrelay.CodeOf(err))
			return 1
		}
		fmt.Fprintln(out, e.Epoch, text)
		if mode == "crash" {
			out.Flush() // acknowledged only once the parent can read it
		}
	}
	return 0
}

// writer is a running child process.
type writer struct {
	cmd   *exec.Cmd
	start io.WriteCloser
	out   io.ReadCloser
}

func startChild(t *testing.T, mode, data, thread, name string, env ...string) *writer {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "CHATRELAY_TEST_CHILD="+mode, "CHATRELAY_TEST_DATA="+data,
		"CHATRELAY_TEST_THREAD="+thread, "CHATRELAY_TEST_NAME="+name)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	start, err := cmd.StdinPipe()
	assert.Success(t, err)
	out, err := cmd.StdoutPipe()
	assert.Success(t, err)
	assert.Success(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return &writer{cmd: cmd, start: start, out: out}
}

// ack is one line a child printed.
type ack struct {
	epoch int64
	text  string
	code  string // an error's code instead
}

func parseAcks(t *testing.T, r io.Reader) []ack {
	t.Helper()
	var acks []ack
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		first, rest, _ := strings.Cut(sc.Text(), " ")
		if first == "error" {
			acks = append(acks, ack{code: rest})
			continue
		}
		epoch, err := strconv.ParseInt(first, 10, 64)
		assert.Success(t, err)
		acks = append(acks, ack{epoch: epoch, text: rest})
	}
	return acks
}

// storedMessages parses the thread's file with a fresh store (no cache) and
// checks its epochs strictly increase.
func storedMessages(t *testing.T, data, thread string) map[string]int64 {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(data, "chat", thread+".json"))
	assert.Success(t, err)
	assert.True(t, json.Valid(raw), "the thread file is not JSON: %q", raw)
	st, err := filestore.OpenFile(data, filestore.FileOptions{Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	defer st.Close()
	p, err := st.Since(context.Background(), thread, 0, 0)
	assert.Success(t, err)
	got := map[string]int64{}
	for i, e := range p.Messages {
		if i > 0 && e.Epoch <= p.Messages[i-1].Epoch {
			t.Fatalf("epoch %d after %d", e.Epoch, p.Messages[i-1].Epoch)
		}
		_, dup := got[e.Text]
		assert.True(t, !dup, "message %q stored twice", e.Text)
		got[e.Text] = e.Epoch
	}
	return got
}

// Four child processes append to one thread while the parent posts to it
// through the HTTP handler: every message is there once, with the epoch it
// was acknowledged with, in strictly increasing order.
func TestProcessesAppendToOneThread(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	const token = "00000000000000000000000000000000000000000000000000000000000000aa"
	thread := chatrelay.ThreadOf(token)
	const children, each = 4, 40

	st, err := filestore.OpenFile(data, filestore.FileOptions{Retention: chatrelay.Retention{Messages: 10000}, NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	srv := httptest.NewServer(transport.NewServer(transport.Config{
		Store:   st,
		Limiter: transport.NewMemoryLimiter(chatrelay.Windows{PerThread: 1 << 20, PerIP: 1 << 20}, nil),
		Log:     slog.New(slog.DiscardHandler),
	}))
	t.Cleanup(srv.Close)

	var ws []*writer
	for i := range children {
		ws = append(ws, startChild(t, "append", data, thread, fmt.Sprint("child", i), "CHATRELAY_TEST_N="+strconv.Itoa(each)))
	}
	want := map[string]int64{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() {
			acks := parseAcks(t, w.out)
			mu.Lock()
			defer mu.Unlock()
			for _, a := range acks {
				if a.code != "" {
					t.Errorf("a child's append failed: %s", a.code)
					continue
				}
				want[a.text] = a.epoch
			}
		})
	}
	for _, w := range ws {
		w.start.Close() // go
	}
	for i := range each {
		text := fmt.Sprint("parent-", i)
		body, _ := json.Marshal(map[string]string{"text": text})
		req, _ := http.NewRequest("POST", srv.URL+"/api/chat/post", bytes.NewReader(body))
		req.Header.Set("X-Chat-Token", token)
		res, err := http.DefaultClient.Do(req)
		assert.Success(t, err)
		var ans struct{ Epoch int64 }
		err = json.NewDecoder(res.Body).Decode(&ans)
		res.Body.Close()
		assert.Success(t, err)
		assert.Equal(t, "post status", res.StatusCode, http.StatusCreated)
		mu.Lock()
		want[text] = ans.Epoch
		mu.Unlock()
	}
	wg.Wait()
	for _, w := range ws {
		assert.Success(t, w.cmd.Wait())
	}

	assert.Equal(t, "acknowledged", len(want), (children+1)*each)
	assert.Equal(t, "stored", storedMessages(t, data, thread), want)
}

// Two processes race to create the last thread the limit allows: exactly
// one gets it, the other gets thread_limit.
func TestProcessesRaceForTheLastThread(t *testing.T) {
	t.Parallel()
	for round := range 4 {
		data := t.TempDir()
		st, err := filestore.OpenFile(data, filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
		assert.Success(t, err)
		_, err = st.Append(t.Context(), "0000000000000001", store.NewMessage{Text: "first"})
		assert.Success(t, err)

		var ws []*writer
		for i := range 2 {
			thread := fmt.Sprintf("%016x", 0xf00+i)
			ws = append(ws, startChild(t, "create", data, thread, "racer", "CHATRELAY_TEST_N=1", "CHATRELAY_TEST_MAX=2"))
		}
		for _, w := range ws {
			w.start.Close()
		}
		var won, refused int
		for _, w := range ws {
			for _, a := range parseAcks(t, w.out) {
				switch a.code {
				case "":
					won++
				case string(chatrelay.ThreadLimit):
					refused++
				default:
					t.Fatalf("round %d: unexpected error %s", round, a.code)
				}
			}
			w.cmd.Wait()
		}
		assert.True(t, won == 1 && refused == 1, "round %d: %d won, %d refused", round, won, refused)
		threads, err := st.Threads(t.Context())
		assert.Success(t, err)
		assert.Equal(t, "threads", len(threads), 2)
	}
}

// A writer killed with SIGKILL in the middle of its loop leaves a file that
// parses and holds every message it acknowledged; its lock dies with it, so
// the next writer carries on. Writers are killed in turn: with the default
// layout three (and no log is ever made); with the thread's log
// (AppendLog) four, the third without it, so that the log is compacted
// both by a writer that does not append to it and at its bound (140 posts
// in all).
func TestKilledWriterLosesNoAcknowledgedMessage(t *testing.T) {
	t.Parallel()
	for name, appendLog := range map[string][]bool{
		"default":    {false, false, false},
		"append log": {true, true, false, true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			data := t.TempDir()
			const thread = "c0ffee00c0ffee00"
			var acks []ack
			for round, killAfter := range []int{7, 23, 40, 70}[:len(appendLog)] {
				var env []string
				if appendLog[round] {
					env = append(env, "CHATRELAY_TEST_APPEND_LOG=1")
				}
				w := startChild(t, "crash", data, thread, fmt.Sprint("crash", round), env...)
				w.start.Close()
				n, killed := 0, false
				sc := bufio.NewScanner(w.out)
				for sc.Scan() { // after the kill: what it acknowledged before it died
					a := parseAcks(t, strings.NewReader(sc.Text()))
					assert.True(t, len(a) == 1 && a[0].code == "", "child: %q", sc.Text())
					acks = append(acks, a[0])
					if n++; n == killAfter {
						assert.Success(t, w.cmd.Process.Kill()) // SIGKILL, mid-loop
						killed = true
					}
				}
				assert.True(t, killed, "the child stopped by itself after %d messages", n)
				err := w.cmd.Wait()
				assert.True(t, err != nil && strings.Contains(err.Error(), "killed"), "child did not die by SIGKILL: %v", err)
			}

			stored := storedMessages(t, data, thread)
			for _, a := range acks {
				epoch, ok := stored[a.text]
				assert.True(t, ok, "acknowledged message %q is missing", a.text)
				assert.Equal(t, "epoch of "+a.text, epoch, a.epoch)
			}
			if name == "default" {
				_, err := os.Stat(filepath.Join(data, "chat", thread+".log"))
				assert.True(t, os.IsNotExist(err), "the default layout made a log: %v", err)
			}

			// A sweep removes any temp file a killed writer left.
			st, err := filestore.OpenFile(data, filestore.FileOptions{Log: slog.New(slog.DiscardHandler)})
			assert.Success(t, err)
			_, err = st.Sweep(t.Context())
			assert.Success(t, err)
			tmps, _ := filepath.Glob(filepath.Join(data, "chat", ".*.tmp-*"))
			assert.Equal(t, "temp files", tmps, []string(nil))
		})
	}
}

// fdLimitChild runs with room for 48 more descriptors and a store told to
// keep up to 1 000 threads open: it appends to 100 threads, invites a
// participant to each and audits it, then reads each back, printing
// "<thread> <messages> <grants> <audit events>" or "error <code>". The limit
// counts descriptor numbers, not open files, and whatever started the
// test may have passed on descriptors of its own, so the limit is set
// where 48 numbers below it are free.
func fdLimitChild() int {
	fail := func(err error) int {
		fmt.Println("error", chatrelay.CodeOf(err), err)
		return 1
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fail(err)
	}
	open := make(map[int]bool, len(entries))
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil {
			open[fd] = true
		}
	}
	limit, free := 0, 0
	for ; free < 48; limit++ {
		if !open[limit] {
			free++
		}
	}
	lim := syscall.Rlimit{Cur: uint64(limit), Max: uint64(limit)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fail(err)
	}
	st, err := filestore.OpenFile(os.Getenv("CHATRELAY_TEST_DATA"), filestore.FileOptions{MaxThreads: 1000, MaxOpenDocs: 1000, NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fail(err)
	}
	ctx := context.Background()
	for i := range 100 {
		thread := fmt.Sprintf("%016x", i+1)
		if _, err := st.Append(ctx, thread, store.NewMessage{Text: "hello"}); err != nil {
			return fail(err)
		}
		id := fmt.Sprintf("p_%08x", i+1)
		g := chatrelay.Grant{ID: id, Name: "Jo", Kind: chatrelay.Human, Role: chatrelay.Viewer, CreatedAt: 1,
			ExpiresAt: time.Now().Add(time.Hour).UnixMilli(), Digest: fmt.Sprintf("%064x", i+1)}
		if err := st.Invite(ctx, thread, g); err != nil {
			return fail(err)
		}
		if err := st.Audit(ctx, thread, chatrelay.AuditEvent{At: 1, Event: chatrelay.AuditIssued, Participant: id}); err != nil {
			return fail(err)
		}
	}
	for i := range 100 {
		thread := fmt.Sprintf("%016x", i+1)
		p, err := st.Since(ctx, thread, 0, 0)
		if err != nil {
			return fail(err)
		}
		grants, err := st.Grants(ctx, thread)
		if err != nil {
			return fail(err)
		}
		audit, err := st.AuditLog(ctx, thread)
		if err != nil {
			return fail(err)
		}
		fmt.Println(thread, len(p.Messages), len(grants), len(audit))
	}
	return 0
}

// TestOutOfDescriptorsLetsGoOfKeptFiles: a store that keeps more thread
// documents and lock files open than the process may have (its streams
// hold the rest) lets go of kept ones when an open fails for want of a
// descriptor, and the write or read goes on: no 503, whichever file it
// opens (a document, a lock, the thread count, a participants record, an
// audit log).
func TestOutOfDescriptorsLetsGoOfKeptFiles(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "CHATRELAY_TEST_CHILD=fdlimit", "CHATRELAY_TEST_DATA="+data)
	out, err := cmd.Output()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	assert.True(t, err == nil && len(lines) == 100, "child: %v\n%s", err, out)
	for _, l := range lines {
		assert.True(t, strings.HasSuffix(l, " 1 1 1"), "child read %q", l)
	}
}
