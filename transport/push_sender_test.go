package transport_test

import (
	"bufio"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
)

// "chatrelay serve --push-sender=process": the server serves the push
// routes and sends nothing; its child, "chatrelay push send" in
// SCHED_IDLE, sends every push. These run the real binary on a store of
// each backend, with a push service on loopback (internal/pushtest)
// that the server and its child trust through SSL_CERT_FILE.

// senderWait bounds a wait for the child's work: it runs in SCHED_IDLE,
// which on a machine whose cores are all busy with other work (a CI
// runner beside other jobs) gets a sliver of a core, and a process's
// start, store open and first pushes take it seconds. Only a push never
// sent waits it out.
const senderWait = 2 * time.Minute

// senderServe is a "chatrelay serve --push-sender=process" process.
type senderServe struct {
	cmd    *exec.Cmd
	base   string // http://127.0.0.1:port
	stderr *transport.SyncBuffer
	exited chan struct{} // closed once serve exited: err is its Wait's
	err    error
}

// startSenderServe runs serve with --push-sender=process on be's store,
// trusting svc, and returns once it listens and its child runs. It is
// killed at the test's end if the test did not stop it.
func startSenderServe(t *testing.T, bin string, be *storetest.Backend, svc *pushtest.Service, extra ...string) *senderServe {
	t.Helper()
	s := spawnSenderServe(t, bin, be, svc, extra...)
	s.awaitChild(t, 1)
	return s
}

// spawnSenderServe is startSenderServe, returning once serve listens
// (its first line), whether or not its child runs yet.
func spawnSenderServe(t *testing.T, bin string, be *storetest.Backend, svc *pushtest.Service, extra ...string) *senderServe {
	t.Helper()
	ca := filepath.Join(t.TempDir(), "push-service.pem")
	assert.Success(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: svc.Certificate().Raw}), 0o644))
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--fsync", "never", "--push-sender", "process", "--push-allow-host", "127.0.0.1",
		"--push-contact", "mailto:ops@example.com"}, be.CLIArgs()...)
	cmd := exec.Command(bin, append(args, extra...)...)
	cmd.Env = append(os.Environ(), "CHATRELAY_DATA=", "CHATRELAY_STORE=", "CHATRELAY_REDIS_PREFIX=", "SSL_CERT_FILE="+ca) // the store is be's, whatever the environment says
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}                                                                 // a group of its own, as a shell's job is
	s := &senderServe{cmd: cmd, stderr: new(transport.SyncBuffer), exited: make(chan struct{})}
	cmd.Stderr = s.stderr
	out, err := cmd.StdoutPipe()
	assert.Success(t, err)
	assert.Success(t, cmd.Start())
	go func() {
		s.err = cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-s.exited
		if pid := s.childPID(); pid != 0 { // a child left behind by a failed test
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	lines := bufio.NewScanner(out)
	assert.True(t, lines.Scan(), "serve printed nothing; its log:\n%s", s.stderr.String())
	m := regexp.MustCompile(`^listening on (http://127\.0\.0\.1:[0-9]+)/$`).FindStringSubmatch(lines.Text())
	assert.True(t, m != nil, "serve's first line %q", lines.Text())
	s.base = m[1]
	return s
}

// childPID is the pid of serve's child last started, 0 if none was.
func (s *senderServe) childPID() int {
	var pid int
	for l := range strings.Lines(s.stderr.String()) {
		if m := regexp.MustCompile(`msg="push sender running" .*pid=([0-9]+)`).FindStringSubmatch(l); m != nil {
			pid, _ = strconv.Atoi(m[1])
		}
	}
	return pid
}

// awaitChild waits until the n-th child serve started says it runs.
func (s *senderServe) awaitChild(t *testing.T, n int) int {
	t.Helper()
	assert.Eventually(t, senderWait, fmt.Sprintf("child %d of serve running; its log:\n%s", n, s.stderr.String()), func() bool {
		return strings.Count(s.stderr.String(), `msg="push sender running"`) >= n
	})
	return s.childPID()
}

// stop sends serve SIGTERM and waits for it to exit 0.
func (s *senderServe) stop(t *testing.T) {
	t.Helper()
	assert.Success(t, s.cmd.Process.Signal(syscall.SIGTERM))
	s.awaitExit(t, 30*time.Second)
}

// awaitExit waits up to d for serve, told to stop, to exit 0.
func (s *senderServe) awaitExit(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-s.exited:
		assert.True(t, s.err == nil, "serve exited with %v; its log:\n%s", s.err, s.stderr.String())
	case <-time.After(d):
		t.Fatalf("serve still running %v after it was told to stop; its log:\n%s", d, s.stderr.String())
	}
}

// gone reports whether no process has pid (it exited and was reaped).
func gone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// subscribeThrough makes thread i's first post and subscribes sub to it
// through the server's routes, as the page does.
func subscribeThrough(t *testing.T, base string, i int, sub pushtest.Subscription) {
	t.Helper()
	do := func(path string, body any) int {
		b, _ := json.Marshal(body)
		req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(string(b)))
		assert.Success(t, err)
		req.Header.Set("X-Chat-Token", tokenN(i))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		assert.Success(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, "the first post", do(chatrelay.PathPost, map[string]string{"text": "hello"}), http.StatusCreated)
	assert.Equal(t, "the subscription", do(chatrelay.PathPush, map[string]any{"subscription": sub.JSON()}), http.StatusCreated)
}

// askIn opens an approval in thread i, as "chatrelay ask" does.
func askIn(t *testing.T, be *storetest.Backend, i int) string {
	t.Helper()
	m, err := be.Store.Append(t.Context(), threadN(i), store.NewMessage{Author: chatrelay.Hermes, MustExist: true,
		Ask: &chatrelay.Ask{Type: chatrelay.Approval, Title: "deploy", Prompt: fmt.Sprintf("Deploy build %d?", i), Timeout: time.Hour}})
	assert.Success(t, err)
	return m.Interaction.ID
}

// pushesOf counts the pushes svc received per (path, interaction id)
// among the approvals opened, each decrypted and verified.
func pushesOf(t *testing.T, svc *pushtest.Service, opened map[string]bool) map[string]int {
	t.Helper()
	got := map[string]int{}
	for _, p := range svc.Pushes() {
		pl := decodePush(t, p)
		if pl.Type == chatrelay.PushTypeInteraction && pl.Message.Interaction != nil && opened[pl.Message.Interaction.ID] {
			got[p.Path+" "+pl.Message.Interaction.ID]++
		}
	}
	return got
}

// TestServePushSenderProcess: with --push-sender=process, the approvals
// of 4 threads (2 subscriptions each, made through the server's routes)
// each reach every subscription once, decrypted and verified, sent by
// the child (every thread of it in SCHED_IDLE, and none of the server's
// but the one that waits for it), none by the server (its
// chatrelay_push_total{result="sent"} stays 0); SIGTERM stops the server
// and leaves no child.
func TestServePushSenderProcess(t *testing.T) {
	t.Parallel()
	bin := mustBinary(t)
	storetest.Run(t, func(t *testing.T, backend string) {
		be := storetest.Open(t, backend, storetest.Options{})
		svc := pushtest.NewService(t)
		srv := startSenderServe(t, bin, be, svc)
		child := srv.childPID()
		assert.True(t, child != 0, "no child pid in serve's log:\n%s", srv.stderr.String())
		policies := threadPolicies(t, child)
		assert.True(t, len(policies) == 1 && policies["5"] > 0, "the child's threads by scheduling policy (5: SCHED_IDLE): %v", policies)
		// The server's threads but one, the thread that started the child
		// and waits for it, are in the normal class.
		assert.Equal(t, "the server's threads in SCHED_IDLE", threadPolicies(t, srv.cmd.Process.Pid)["5"], 1)
		const threads, subs = 4, 2
		for i := range threads {
			for s := range subs {
				subscribeThrough(t, srv.base, i, svc.Subscribe(t, fmt.Sprintf("t%d-s%d", i, s)))
			}
		}
		opened := map[string]bool{}
		for i := range threads {
			opened[askIn(t, be, i)] = true
		}
		var got map[string]int
		assert.Eventually(t, senderWait, "every approval's push to every subscription", func() bool {
			got = pushesOf(t, svc, opened)
			return len(got) == threads*subs
		})
		for k, n := range got {
			assert.Equal(t, "pushes of "+k, n, 1)
		}
		m := opsScrape(t, http.DefaultClient, srv.base+"/metrics")
		assert.Equal(t, "pushes the server sent", m[`chatrelay_push_total{result="sent"}`], 0.0)
		srv.stop(t)
		assert.True(t, gone(child), "the child %d outlived serve", child)
		assert.Equal(t, "pushes of every approval after the stop", pushesOf(t, svc, opened), got)
	})
}

// threadPolicies counts the threads of process pid by scheduling policy
// (/proc's field 41: "0" SCHED_OTHER, "5" SCHED_IDLE).
func threadPolicies(t *testing.T, pid int) map[string]int {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	assert.Success(t, err)
	out := map[string]int{}
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // a thread that ended
		}
		_, rest, _ := strings.Cut(string(b), ") ") // after the command's name
		if fields := strings.Fields(rest); len(fields) > 38 {
			out[fields[38]]++ // from the state (field 3): the policy is field 41
		}
	}
	return out
}

// TestServePushSenderKilledLosesNothing: the child is killed (SIGKILL)
// while it holds the claims of 3 approvals' pushes, each answered 503
// once and waiting for its retry; serve starts it again, and the new
// child sends each push once the killed one's claims lapsed (their
// lease, 30 s): every push reaches its subscription, decrypted, once
// answered 201 and never again.
func TestServePushSenderKilledLosesNothing(t *testing.T) {
	t.Parallel()
	bin := mustBinary(t)
	storetest.Run(t, func(t *testing.T, backend string) {
		be := storetest.Open(t, backend, storetest.Options{})
		svc := pushtest.NewService(t)
		svc.Respond = func(_ string, n int) pushtest.Answer {
			if n == 1 {
				return pushtest.Answer{Status: http.StatusServiceUnavailable}
			}
			return pushtest.Answer{Status: http.StatusCreated}
		}
		srv := startSenderServe(t, bin, be, svc)
		const threads = 3
		for i := range threads {
			subscribeThrough(t, srv.base, i, svc.Subscribe(t, fmt.Sprintf("t%d", i)))
		}
		opened := map[string]bool{}
		for i := range threads {
			opened[askIn(t, be, i)] = true
		}
		assert.Eventually(t, senderWait, "each push's first attempt (answered 503)", func() bool {
			return len(pushesOf(t, svc, opened)) == threads
		})
		first := srv.childPID()
		assert.Success(t, syscall.Kill(first, syscall.SIGKILL)) // its retries were 5 s away
		second := srv.awaitChild(t, 2)
		assert.True(t, second != first, "the child was not started again")
		var got map[string]int
		assert.Eventually(t, senderWait+30*time.Second, "every push sent again by the new child (after the lease)", func() bool {
			got = pushesOf(t, svc, opened)
			for _, n := range got {
				if n < 2 {
					return false
				}
			}
			return true
		})
		srv.stop(t)
		assert.True(t, gone(second), "the child %d outlived serve", second)
		for k, n := range pushesOf(t, svc, opened) {
			assert.Equal(t, "attempts of "+k+" (503, then 201)", n, 2)
		}
		assert.True(t, strings.Contains(srv.stderr.String(), `msg="push sender exited; starting it again"`), "serve's log says nothing of the child's exit:\n%s", srv.stderr.String())
	})
}

// TestServePushSenderReadyBeforeServing: serve answers its first request
// only once its child's feed is live: an approval opened as soon as serve
// has answered (a subscription, here) is pushed; one opened before the
// child follows the feed would be pushed by no one (the child reads the
// store's feed from its start on). Before, serve served at once, and
// its child was live tens of milliseconds later, seconds on a loaded
// machine.
func TestServePushSenderReadyBeforeServing(t *testing.T) {
	t.Parallel()
	bin := mustBinary(t)
	be := storetest.Open(t, storetest.File, storetest.Options{})
	svc := pushtest.NewService(t)
	srv := spawnSenderServe(t, bin, be, svc)
	subscribeThrough(t, srv.base, 0, svc.Subscribe(t, "s0")) // serve's first answer
	opened := map[string]bool{askIn(t, be, 0): true}
	assert.Eventually(t, senderWait, "the push of the approval opened at serve's first answer", func() bool {
		return len(pushesOf(t, svc, opened)) == 1
	})
	// The child's own line comes through two copies of its log (serve's,
	// then this test's): it shows, at the latest, after the push.
	assert.True(t, strings.Contains(srv.stderr.String(), `msg="push sender running"`),
		"serve's log says nothing of its push sender running:\n%s", srv.stderr.String())
	srv.stop(t)
}

// TestServePushSenderOutlivesTheDrain: SIGTERM to serve's process group
// and to its child at once, as a service manager stopping the unit's
// processes (systemd's default KillMode) or a terminal's Ctrl-C sends
// it: the child goes on following the feed while serve drains, so an
// approval opened during the drain is pushed, and serve then stops it
// and leaves none. Before, the child stopped at the signal, serve took
// its exit for a crash and started another a second later, and the
// approval opened between them was never pushed.
func TestServePushSenderOutlivesTheDrain(t *testing.T) {
	t.Parallel()
	bin := mustBinary(t)
	be := storetest.Open(t, storetest.File, storetest.Options{})
	svc := pushtest.NewService(t)
	// The drain is the child's time to push the approval opened in it: a
	// child in SCHED_IDLE on a loaded machine takes seconds.
	srv := startSenderServe(t, bin, be, svc, "--drain-delay", "15s")
	child := srv.childPID()
	subscribeThrough(t, srv.base, 0, svc.Subscribe(t, "s0"))
	assert.Success(t, syscall.Kill(-srv.cmd.Process.Pid, syscall.SIGTERM)) // serve's group
	assert.Success(t, syscall.Kill(child, syscall.SIGTERM))                // and the child, as a cgroup's stop sends it
	assert.Eventually(t, 10*time.Second, "serve draining", func() bool {
		return strings.Contains(srv.stderr.String(), "draining")
	})
	opened := map[string]bool{askIn(t, be, 0): true} // while serve drains
	assert.Eventually(t, senderWait, "the push of the approval opened during the drain", func() bool {
		return len(pushesOf(t, svc, opened)) == 1
	})
	srv.awaitExit(t, 45*time.Second) // the drain's 15 s, then the child's stop (10 s at most)
	assert.True(t, gone(child), "the child %d outlived serve", child)
	assert.True(t, !strings.Contains(srv.stderr.String(), "push sender exited; starting it again"),
		"serve took its child's stop for a crash; its log:\n%s", srv.stderr.String())
}
