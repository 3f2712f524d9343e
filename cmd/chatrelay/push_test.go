package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// serving is a "serve" run by a test (runServe).
type serving struct {
	base   string       // http://127.0.0.1:port, no slash at the end
	stop   func()       // SIGTERM
	done   <-chan error // what run returned, once it has
	stderr *lockedBuffer
}

// runServe runs serve on a free loopback port with args, in the test's
// process, and returns once it listens; whatever it prints later is read
// and dropped, so that it never blocks. It is stopped at the test's end
// if the test has not stopped it.
func runServe(t *testing.T, args ...string) serving {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pr, pw := io.Pipe()
	stderr := new(lockedBuffer)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"serve", "-addr", "127.0.0.1:0", "-fsync", "never"}, args...), env(nil), strings.NewReader(""), pw, stderr)
		pw.Close()
	}()
	lines := bufio.NewScanner(pr)
	assert.True(t, lines.Scan(), "serve wrote nothing (%v); log:\n%s", lines.Err(), stderr.String())
	m := regexp.MustCompile(`^listening on (http://127\.0\.0\.1:[0-9]+)/$`).FindStringSubmatch(lines.Text())
	assert.True(t, m != nil, "first line %q", lines.Text())
	go io.Copy(io.Discard, pr)
	return serving{base: m[1], stop: cancel, done: done, stderr: stderr}
}

// stopped sends srv SIGTERM and waits for run, which must return nil
// within 10 s (its own bound is 5 s).
func (srv serving) stopped(t *testing.T) {
	t.Helper()
	srv.stop()
	select {
	case err := <-srv.done:
		assert.Success(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("serve still running 10s after the signal")
	}
}

// startServe runs serve (runServe) and returns its base URL, with a
// slash at the end; at the test's end it stops it, and run must return
// nil.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	srv := runServe(t, args...)
	t.Cleanup(func() {
		srv.stop()
		assert.Success(t, <-srv.done)
	})
	return srv.base + "/"
}

func getKey(t *testing.T, base string) (int, string, string) {
	t.Helper()
	res, err := http.Get(base + "api/push/key")
	assert.Success(t, err)
	defer res.Body.Close()
	var a struct {
		PublicKey string `json:"public_key"`
		Code      string `json:"code"`
	}
	assert.Success(t, json.NewDecoder(res.Body).Decode(&a))
	return res.StatusCode, a.PublicKey, a.Code
}

// TestPushKeyAndRotate: serve makes the VAPID key at its first start
// (DATA/vapid.key, 0600) and serves its public half; "chatrelay push
// rotate-key" in the meantime makes a new one, which the running server
// serves from then on; --push=false answers 404 push_disabled.
func TestPushKeyAndRotate(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	base := startServe(t, "-data", data, "-push-contact", "mailto:ops@example.com")
	fi, err := os.Stat(filepath.Join(data, "vapid.key"))
	assert.Success(t, err)
	assert.Equal(t, "vapid.key mode", fi.Mode().Perm(), os.FileMode(0o600))
	status, first, _ := getKey(t, base)
	assert.True(t, status == 200 && len(first) == 87, "key: %d %q", status, first)

	r := runCLI(t, nil, "", "push", "rotate-key", "--data", data)
	assert.Success(t, r.err)
	printed := strings.TrimSpace(r.stdout)
	assert.True(t, len(printed) == 87 && printed != first, "rotate-key printed %q (was %q)", printed, first)
	_, now, _ := getKey(t, base)
	assert.Equal(t, "the served key after the rotate", now, printed)

	r = runCLI(t, nil, "", "push", "--data", data)
	assert.Equal(t, "push with no verb: exit", exitCode(r.err), 2)
	r = runCLI(t, nil, "", "serve", "-addr", "127.0.0.1:0", "-data", t.TempDir(), "-push-contact", "ops@example.com")
	assert.Equal(t, "a contact that is not mailto: or https: exit", exitCode(r.err), 2)

	off := startServe(t, "-data", t.TempDir(), "-push=false")
	status, _, code := getKey(t, off)
	assert.True(t, status == 404 && code == "push_disabled", "push off: %d %s", status, code)
}
