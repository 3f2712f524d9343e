package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/internal/webhooktest"
)

// Webhooks end to end: chatrelay serve as a real process with --webhook,
// the host CLI in other processes, a receiver that verifies with the
// Standard Webhooks library.

// hookStore is a store for a process test: its flags.
func hookStore(t *testing.T, backend string) []string {
	t.Helper()
	if backend == storetest.Redis {
		srv := storetest.StartServer(t, storetest.ServerOptions{})
		return []string{"--store", srv.URL(), "--redis-prefix", storetest.NewPrefix()}
	}
	return []string{"--data", t.TempDir(), "--fsync", "never"}
}

// serveProc runs chatrelay serve in its own process and returns its base
// URL and the process (killed when the test ends).
func serveProc(t *testing.T, secret string, storeArgs []string, extra ...string) (string, *exec.Cmd) {
	t.Helper()
	args := append([]string{"serve", "--addr", "127.0.0.1:0"}, storeArgs...)
	cmd := exec.Command(chatrelayBinary(t), append(args, extra...)...)
	cmd.Env = append(os.Environ(), "CHATRELAY_DATA=", "CHATRELAY_STORE=", "CHATRELAY_WEBHOOK_SECRET="+secret)
	var log lockedBuffer
	cmd.Stderr = &log
	out, err := cmd.StdoutPipe()
	assert.Success(t, err)
	assert.Success(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	assert.True(t, lines.Scan(), "serve wrote nothing; log:\n%s", log.String())
	m := regexp.MustCompile(`^listening on (http://127\.0\.0\.1:[0-9]+/)$`).FindStringSubmatch(lines.Text())
	assert.True(t, m != nil, "first line %q", lines.Text())
	go io.Copy(io.Discard, out)
	return m[1], cmd
}

// post posts text as the operator of cliToken's thread.
func post(t *testing.T, base, text string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"text": text})
	req, _ := http.NewRequest("POST", base+"api/chat/post", strings.NewReader(string(body)))
	req.Header.Set("X-Chat-Token", cliToken)
	res, err := http.DefaultClient.Do(req)
	assert.Success(t, err)
	res.Body.Close()
	assert.Equal(t, "post status", res.StatusCode, http.StatusCreated)
}

// cliProc runs the chatrelay binary (another process) and returns its output.
func cliProc(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(chatrelayBinary(t), args...)
	cmd.Env = append(os.Environ(), "CHATRELAY_DATA=", "CHATRELAY_STORE=", "CHATRELAY_WEBHOOK_SECRET=")
	out, err := cmd.CombinedOutput()
	assert.True(t, err == nil, "chatrelay %s: %v\n%s", strings.Join(args, " "), err, out)
	return string(out)
}

func messageOf(t *testing.T, d webhooktest.Delivery) chatrelay.Message {
	t.Helper()
	var m chatrelay.Message
	assert.Success(t, json.Unmarshal(d.Event.Data.Message, &m))
	return m
}

// TestWebhooksFromServerAndCLI: a person's post through the server is
// message.created; the host CLI's reply in another process is no event
// (hermes's own), its ask is interaction.opened and its cancel
// interaction.closed: the CLI, which knows nothing of --webhook, queues
// for the destinations the server recorded in the store.
func TestWebhooksFromServerAndCLI(t *testing.T) {
	for _, backend := range storetest.Backends() {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			rcv := webhooktest.Start(t, webhooktest.NewSecret())
			st := hookStore(t, backend)
			base, _ := serveProc(t, rcv.Secret, st, "--webhook", rcv.URL)
			thread := chatrelay.ThreadOf(cliToken)

			post(t, base, "is it green?")
			cliProc(t, append([]string{"reply", thread, "green, deploying"}, st...)...)
			out := cliProc(t, append([]string{"ask", thread, "--approval", "Deploy build 412?"}, st...)...)
			ix := regexp.MustCompile(`ix_[0-9a-f]{12}`).FindString(out)
			assert.True(t, ix != "", "ask printed no interaction id: %q", out)
			cliProc(t, append([]string{"cancel", thread, ix}, st...)...)
			post(t, base, "last")

			assert.Eventually(t, 20*time.Second, "four events", func() bool { return len(rcv.Accepted()) >= 4 })
			byType := map[string][]chatrelay.Message{}
			for _, d := range rcv.All() {
				assert.True(t, d.Valid, "%s does not verify: %s", d.Event.Type, d.Err)
				assert.Equal(t, "thread", d.Event.Data.Thread, thread)
				byType[d.Event.Type] = append(byType[d.Event.Type], messageOf(t, d))
			}
			assert.Equal(t, "message.created", len(byType["message.created"]), 2)
			for _, m := range byType["message.created"] {
				assert.Equal(t, "author", m.Author, chatrelay.Operator)
			}
			assert.Equal(t, "interaction.opened", len(byType["interaction.opened"]), 1)
			assert.Equal(t, "opened id", byType["interaction.opened"][0].Interaction.ID, ix)
			assert.Equal(t, "interaction.closed", len(byType["interaction.closed"]), 1)
			assert.Equal(t, "closed state", byType["interaction.closed"][0].Interaction.State, chatrelay.Canceled)
		})
	}
}

// TestWebhooksSurviveSIGKILL: events of acknowledged posts whose server is
// killed (SIGKILL) before it could deliver them (the receiver was down)
// are delivered by the next server, with the webhook-ids of the first
// attempts.
func TestWebhooksSurviveSIGKILL(t *testing.T) {
	for _, backend := range storetest.Backends() {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			rcv := webhooktest.Start(t, webhooktest.NewSecret())
			rcv.SetDown(true)
			st := hookStore(t, backend)
			base, cmd := serveProc(t, rcv.Secret, st, "--webhook", rcv.URL)
			const n = 5
			for i := range n {
				post(t, base, "message "+string(rune('a'+i)))
			}
			assert.Success(t, cmd.Process.Signal(syscall.SIGKILL))
			cmd.Wait()
			rcv.SetDown(false)
			serveProc(t, rcv.Secret, st, "--webhook", rcv.URL)
			assert.Eventually(t, 60*time.Second, "every event delivered", func() bool {
				texts := map[string]bool{}
				for _, d := range rcv.Accepted() {
					texts[messageOf(t, d).Text] = true
				}
				return len(texts) == n
			})
			for _, d := range rcv.Accepted() {
				assert.True(t, d.Valid, "does not verify: %s", d.Err)
			}
			ids := map[string]string{}
			for _, d := range rcv.All() {
				text := messageOf(t, d).Text
				if prev, ok := ids[text]; ok {
					assert.Equal(t, "the webhook-id of "+text+" on every attempt", d.ID, prev)
				}
				ids[text] = d.ID
			}
		})
	}
}

// TestWebhookTest: chatrelay webhook test sends a signed ping; a receiver
// that refuses it makes it fail.
func TestWebhookTest(t *testing.T) {
	t.Parallel()
	rcv := webhooktest.Start(t, webhooktest.NewSecret())
	r := runCLI(t, env(map[string]string{"CHATRELAY_WEBHOOK_SECRET": rcv.Secret}), "", "webhook", "test", rcv.URL)
	assert.Success(t, r.err)
	got := rcv.All()
	assert.Equal(t, "requests", len(got), 1)
	assert.True(t, got[0].Valid, "the ping does not verify: %s", got[0].Err)
	assert.Equal(t, "type", got[0].Event.Type, "ping")
	assert.True(t, strings.Contains(r.stdout, got[0].ID), "stdout %q does not name the ping's id", r.stdout)

	other := webhooktest.NewSecret()
	r = runCLI(t, nil, "", "webhook", "test", rcv.URL, "--secret", other)
	assert.True(t, r.err != nil, "a ping signed with another secret succeeded")
	assert.Equal(t, "exit status", exitCode(r.err), 1)

	// Rotating: the receiver's secret beside another, either order; each
	// ping verifies with the receiver's secret alone.
	for _, secrets := range []string{other + " " + rcv.Secret, rcv.Secret + " " + other} {
		r = runCLI(t, env(map[string]string{"CHATRELAY_WEBHOOK_SECRET": secrets}), "", "webhook", "test", rcv.URL)
		assert.Success(t, r.err)
	}
	got = rcv.All()
	assert.Equal(t, "requests", len(got), 4)
	for _, d := range got[2:] {
		assert.True(t, d.Valid, "a ping signed with two secrets does not verify with one: %s", d.Err)
	}

	r = runCLI(t, nil, "", "webhook", "test", rcv.URL)
	assert.Equal(t, "no secret: exit status", exitCode(r.err), 2)
	r = runCLI(t, nil, "", "serve", "--webhook", rcv.URL)
	assert.Equal(t, "serve --webhook without a secret: exit status", exitCode(r.err), 2)
	r = runCLI(t, nil, "", "serve", "--webhook", "ftp://example.com/", "--webhook-secret", other)
	assert.Equal(t, "serve --webhook ftp://: exit status", exitCode(r.err), 2)
}

// TestServeWithWebhooks: serve counts its deliveries in /metrics, and
// shuts down at once though an attempt is in flight to a receiver that
// never answers (the attempt is cancelled; its event stays queued).
func TestServeWithWebhooks(t *testing.T) {
	t.Parallel()
	rcv := webhooktest.Start(t, webhooktest.NewSecret())
	hung := make(chan struct{})
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // then the server notices the client's leaving
		select {
		case hung <- struct{}{}:
		default:
		}
		<-r.Context().Done()
	}))
	t.Cleanup(stuck.Close)
	data := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pr, pw := io.Pipe()
	var stderr lockedBuffer
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"serve", "-addr", "127.0.0.1:0", "-data", data, "-fsync", "never",
			"--webhook", rcv.URL, "--webhook", stuck.URL + "/hook"},
			env(map[string]string{"CHATRELAY_WEBHOOK_SECRET": rcv.Secret}), strings.NewReader(""), pw, &stderr)
		pw.Close()
	}()
	lines := bufio.NewScanner(pr)
	assert.True(t, lines.Scan(), "serve wrote nothing; log:\n%s", stderr.String())
	m := regexp.MustCompile(`^listening on (http://127\.0\.0\.1:[0-9]+/)$`).FindStringSubmatch(lines.Text())
	assert.True(t, m != nil, "first line %q", lines.Text())
	go io.Copy(io.Discard, pr)
	base := m[1]

	post(t, base, "wake up")
	var hungAt time.Time
	select {
	case <-hung:
		hungAt = time.Now()
	case <-time.After(10 * time.Second):
		t.Fatal("no attempt reached the receiver that never answers")
	}
	assert.Eventually(t, 10*time.Second, "chatrelay_webhook_total{result=\"delivered\"} 1", func() bool {
		res, err := http.Get(base + "metrics")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return strings.Contains(string(b), `chatrelay_webhook_total{result="delivered"} 1`)
	})
	cancel()
	select {
	case err := <-errc:
		assert.Success(t, err)
	case <-time.After(chatrelay.DefaultShutdownTimeout + 5*time.Second):
		t.Fatal("serve did not return with an attempt in flight")
	}
	// Not the attempt's own end (WebhookTimeout after it started): its cancel.
	assert.True(t, time.Since(hungAt) < chatrelay.WebhookTimeout/2, "serve returned %v after the attempt started: it waited for it", time.Since(hungAt))
}

// A missing secret is named as missing, with where to give it (it said
// "a webhook secret starts with whsec_", as for a malformed one), and
// webhook test's bad URL names no --webhook flag, which it has not.
func TestWebhookMissingSecretSaysSo(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"webhook", "test", "http://127.0.0.1:1/hook"},
		{"serve", "--webhook", "http://127.0.0.1:1/hook"},
	} {
		r := runCLI(t, nil, "", args...)
		assert.Equal(t, "exit status", exitCode(r.err), 2)
		assert.True(t, r.err != nil && strings.Contains(r.err.Error(), "no webhook secret") &&
			strings.Contains(r.err.Error(), "CHATRELAY_WEBHOOK_SECRET"), "%v: %v", args, r.err)
	}
	r := runCLI(t, nil, "", "webhook", "test", "ftp://127.0.0.1:1/", "--secret", webhooktest.NewSecret())
	assert.Equal(t, "exit status", exitCode(r.err), 2)
	assert.True(t, r.err != nil && !strings.Contains(r.err.Error(), "--webhook"), "webhook test names a flag it has not: %v", r.err)
}

// TestWebhookURLSecretNotEchoed: a webhook URL may carry a secret of its
// own (a password, a token in its query), which the store and the
// deliverer's log never hold; an error about it, at start (serve's
// standard error is its log) or from webhook test, does not echo it
// either, and still says which URL it is about.
func TestWebhookURLSecretNotEchoed(t *testing.T) {
	t.Parallel()
	secret := webhooktest.NewSecret()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close() // its port refuses
	refused := strings.Replace(closed.URL, "http://", "http://hookuser:s3cretpw@", 1) + "/x?token=s3crettoken"
	for _, args := range [][]string{
		{"serve", "--webhook", "https://hookuser:s3cretpw@hooks.example.com:0/x?token=s3crettoken", "--webhook-secret", secret},
		{"serve", "--webhook", "ftp://hookuser:s3cretpw@hooks.example.com/x?token=s3crettoken", "--webhook-secret", secret},
		{"webhook", "test", "https://hookuser:s3cretpw@hooks.example.com:99999/?token=s3crettoken", "--secret", secret},
		{"webhook", "test", refused, "--secret", secret},
	} {
		r := runCLI(t, nil, "", args...)
		assert.True(t, r.err != nil, "%q succeeded", args)
		said := r.err.Error() + r.stderr
		assert.True(t, !strings.Contains(said, "s3cret"), "%q: the error echoes the URL's secret: %s", args[:3], said)
		assert.True(t, strings.Contains(said, "hookuser"), "%q: the error does not say which URL: %s", args[:3], said)
	}
}
