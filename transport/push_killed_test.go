package transport_test

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/internal/testproc"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/redisstore"
	"github.com/chatrelay/chatrelay/transport"
)

// pushKillEnv names the environment variable that makes
// TestPushKilledServerProcess a server: pushKillConfig's JSON.
const pushKillEnv = "CHATRELAY_TEST_PUSH_KILLED"

// pushKillConfig is where the helper server's store is and how it
// reaches the test's push service.
type pushKillConfig struct {
	Dir    string        // the file store's data folder, or
	Redis  string        // a Redis URL,
	Prefix string        // and its key prefix
	Cert   []byte        // the push service's certificate (DER)
	Lease  time.Duration // of its push claims
}

// TestPushKilledServerProcess is the server TestPushKilledServerLosesNoPush
// kills: it runs a server with push on the store it is given, its
// retries 5 minutes away, says "ready", and runs until it is killed.
func TestPushKilledServerProcess(t *testing.T) {
	raw := os.Getenv(pushKillEnv)
	if raw == "" {
		t.Skip("the helper process of TestPushKilledServerLosesNoPush")
	}
	var c pushKillConfig
	assert.Success(t, json.Unmarshal([]byte(raw), &c))
	var be *storetest.Backend
	if c.Dir != "" {
		be = storetest.OpenFileIn(t, c.Dir, storetest.Options{})
	} else {
		rs, err := redisstore.Open(context.Background(), c.Redis, redisstore.Options{Prefix: c.Prefix, Log: slog.New(slog.DiscardHandler)})
		assert.Success(t, err)
		be = &storetest.Backend{Name: storetest.Redis, Store: rs, Redis: rs, Prefix: c.Prefix}
	}
	cert, err := x509.ParseCertificate(c.Cert)
	assert.Success(t, err)
	startPush(t, pushOptions{on: be, config: withPushTo(cert, retryLater(c.Lease))})
	os.Stdout.WriteString("ready\n")
	io.Copy(io.Discard, os.Stdin) // until it is killed
}

// TestPushKilledServerLosesNoPush: a lone server (a file store, or one
// node on Redis) is killed with SIGKILL while an approval's push and a
// reply's wait for their retry (the push service answered 503): it hands
// nothing over. The server started next on the store sends both, from
// the store's journal of claims: the approval's with its Topic, both
// decrypted by the push service. A person still gets the phone
// notification of an approval when the server that owed it crashed. The
// start says at info how many changes it took, and nothing of them.
func TestPushKilledServerLosesNoPush(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		svc.Respond = func(_ string, n int) pushtest.Answer {
			if n <= 2 {
				return pushtest.Answer{Status: http.StatusServiceUnavailable}
			}
			return pushtest.Answer{Status: http.StatusCreated}
		}
		const lease = time.Second
		be := storetest.Open(t, backend, storetest.Options{})
		ctx, thread := t.Context(), threadN(1)
		_, err := be.Store.Append(ctx, thread, store.NewMessage{Text: "hello"})
		assert.Success(t, err)
		phone := svc.Subscribe(t, "phone")
		_, _, err = store.PushOf(be.Store).PushSubscribe(ctx, thread, chatrelay.PushSubscription{
			ID: chatrelay.NewPushID(), Endpoint: phone.Endpoint, P256dh: phone.P256dh(), Auth: phone.AuthKey(),
			Events: chatrelay.PushEvents, CreatedAt: time.Now().UnixMilli(), Subscriber: chatrelay.SubscriberOwner,
		})
		assert.Success(t, err)

		c := pushKillConfig{Cert: svc.Certificate().Raw, Lease: lease}
		if storetest.IsRedis(backend) {
			c.Redis, c.Prefix = be.Server.URL(), be.Prefix
		} else {
			c.Dir = be.Dir
		}
		raw, _ := json.Marshal(c)
		proc := testproc.Start(t, "TestPushKilledServerProcess", []string{pushKillEnv + "=" + string(raw)}, 10)
		killed := false
		t.Cleanup(func() {
			if !killed {
				proc.Kill()
			}
		})
		lines := bufio.NewScanner(proc.Stdout)
		for lines.Scan() && lines.Text() != "ready" {
		}
		assert.True(t, lines.Text() == "ready", "the server process did not start: %v", lines.Err())

		ask, err := be.Store.Append(ctx, thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true,
			Ask: &chatrelay.Ask{Type: chatrelay.Approval, Title: "deploy", Prompt: "Deploy?", Timeout: time.Hour}})
		assert.Success(t, err)
		const secret = "are you there? (never in a log)"
		_, err = be.Store.Append(ctx, thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: secret})
		assert.Success(t, err)
		awaitPushes(t, svc, "/push/phone", 2) // both answered 503: their retries are 5 minutes away
		proc.Kill()
		killed = true

		var logged lockedBuffer
		startPush(t, pushOptions{on: be.Another(t, storetest.Options{}), config: func(c *transport.Config) {
			withPush(svc, func(p *transport.PushConfig) { p.Lease = lease })(c)
			c.Log = slog.New(slog.NewTextHandler(&logged, nil))
		}})
		pushes, pls := awaitPushes(t, svc, "/push/phone", 4)
		got := map[string]int{}
		for i := 2; i < len(pls); i++ {
			got[pls[i].Type]++
			switch pls[i].Type {
			case chatrelay.PushTypeInteraction:
				assert.Equal(t, "the approval's push", pls[i].Message.Interaction.ID, ask.Message.Interaction.ID)
				assert.Equal(t, "the approval push's Topic", pushes[i].Topic, ask.Message.Interaction.ID)
			case chatrelay.PushTypeReply:
				assert.Equal(t, "the reply's push", pls[i].Message.Text, secret)
			}
		}
		assert.Equal(t, "the pushes sent after the kill", got, map[string]int{chatrelay.PushTypeInteraction: 1, chatrelay.PushTypeReply: 1})

		var line string
		for l := range strings.Lines(logged.String()) {
			if strings.Contains(l, "push: changes taken at start") {
				line = l
			}
		}
		assert.True(t, strings.Contains(line, "level=INFO") && strings.Contains(line, "journaled=2"), "no info line counts the 2 changes taken from the journal; the log:\n%s", logged.String())
		for _, s := range []string{secret, tokenN(1), "/push/"} {
			assert.True(t, !strings.Contains(logged.String(), s), "the log holds %q:\n%s", s, logged.String())
		}
	})
}
