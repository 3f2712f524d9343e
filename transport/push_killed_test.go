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
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/internal/testproc"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
)

// pushKillEnv names the environment variable that makes
// TestPushKilledServerProcess a server: pushKillConfig's JSON.
const pushKillEnv = "CHATRELAY_TEST_PUSH_KILLED"

// pushKillConfig is where the helper server's store is and how it
// reaches the test's push service.
type pushKillConfig struct {
	procStore
	Cert  []byte        // the push service's certificate (DER)
	Lease time.Duration // of its push claims
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
	cert, err := x509.ParseCertificate(c.Cert)
	assert.Success(t, err)
	startPush(t, pushOptions{on: c.open(t), config: withPushTo(cert, retryLater(c.Lease))})
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
		be, thread, kill, ask := killableAsked(t, backend, svc, lease)
		ctx := t.Context()
		const secret = "are you there? (never in a log)"
		_, err := be.Store.Append(ctx, thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: secret})
		assert.Success(t, err)
		awaitPushes(t, svc, "/push/phone", 2) // both answered 503: their retries are 5 minutes away
		kill()

		var logged transport.SyncBuffer
		after := startPush(t, pushOptions{on: be.Another(t, storetest.Options{}), config: func(c *transport.Config) {
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

		assert.Eventually(t, 10*time.Second, "the journal emptied once the pushes had their outcome", func() bool {
			j, err := store.PushOf(after.store).JournaledPushes(ctx) // the server's own view (the file store's journal is its process's)
			return err == nil && len(j) == 0
		})

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

// subscribeInStore posts a first message to thread and subscribes sub
// to it, through the store (as the server's route would).
func subscribeInStore(t *testing.T, be *storetest.Backend, thread string, sub pushtest.Subscription) {
	t.Helper()
	_, err := be.Store.Append(t.Context(), thread, store.NewMessage{Text: "hello"})
	assert.Success(t, err)
	_, _, err = store.PushOf(be.Store).PushSubscribe(t.Context(), thread, chatrelay.PushSubscription{
		ID: chatrelay.NewPushID(), Endpoint: sub.Endpoint, P256dh: sub.P256dh(), Auth: sub.AuthKey(),
		Events: chatrelay.PushEvents, CreatedAt: time.Now().UnixMilli(), Subscriber: chatrelay.SubscriberOwner,
	})
	assert.Success(t, err)
}

// startKillable starts a server with push on be's store in a process of
// its own (TestPushKilledServerProcess), its claims of lease, its retries
// 5 minutes away, and returns once it is ready; kill kills it (SIGKILL),
// and cleanup does if the test did not.
func startKillable(t *testing.T, be *storetest.Backend, svc *pushtest.Service, lease time.Duration) (kill func()) {
	t.Helper()
	raw, _ := json.Marshal(pushKillConfig{procStore: procStoreOf(be), Cert: svc.Certificate().Raw, Lease: lease})
	proc := testproc.Start(t, "TestPushKilledServerProcess", []string{pushKillEnv + "=" + string(raw)}, 10)
	var once sync.Once
	kill = func() { once.Do(proc.Kill) }
	t.Cleanup(kill)
	lines := bufio.NewScanner(proc.Stdout)
	for lines.Scan() && lines.Text() != "ready" {
	}
	assert.True(t, lines.Text() == "ready", "the server process did not start: %v", lines.Err())
	return kill
}

// TestPushKilledServerClosedInteractionNotSent: a lone server is killed
// while an approval's push waits for its retry; the approval is then
// cancelled while no server runs. The next server, which never saw the
// close, does not send the opening push from the journal (superseded):
// it would offer Approve and Deny for a closed approval. It settles it:
// the journal is empty.
func TestPushKilledServerClosedInteractionNotSent(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		svc.Respond = func(string, int) pushtest.Answer { return pushtest.Answer{Status: http.StatusServiceUnavailable} }
		const lease = time.Second
		be, thread, kill, ask := killableAsked(t, backend, svc, lease)
		ctx := t.Context()
		awaitPushes(t, svc, "/push/phone", 1) // answered 503
		kill()
		_, err := be.Store.Change(ctx, thread, store.Change{Op: chatrelay.Cancel, InteractionID: ask.Message.Interaction.ID, By: chatrelay.Hermes})
		assert.Success(t, err)

		after := startPush(t, pushOptions{on: be.Another(t, storetest.Options{}), config: withPush(svc, func(p *transport.PushConfig) { p.Lease = lease })})
		assert.Eventually(t, 10*time.Second, "the journaled change dealt with", func() bool {
			return opsScrape(t, after.client, after.ts.URL+"/metrics")[`chatrelay_push_total{result="superseded"}`] == 1 ||
				len(pushesTo(svc, "/push/phone")) > 1
		})
		assert.Equal(t, "pushes received", len(pushesTo(svc, "/push/phone")), 1)
		assert.Eventually(t, 10*time.Second, "the journal emptied", func() bool {
			j, err := store.PushOf(after.store).JournaledPushes(ctx)
			return err == nil && len(j) == 0
		})
	})
}

// claimsCounted is a node's store whose push claims are counted, won or
// lost.
type claimsCounted struct {
	store.Store
	store.Push
	lost atomic.Int64
}

func (c *claimsCounted) ClaimPush(ctx context.Context, id, owner string, lease time.Duration, doc []byte) (won, settled bool, err error) {
	won, settled, err = c.Push.ClaimPush(ctx, id, owner, lease, doc)
	if err == nil && !won {
		c.lost.Add(1)
	}
	return won, settled, err
}

// TestPushJournalLeavesALiveNodesClaims: on Redis, node A claims a
// reply's push and waits for its retry; node B starts meanwhile and
// finds the change in the journal. A renews its claim: B loses it, at
// its start and again a lease later, and sends nothing (no push twice
// because a node started). Once A stops, B takes the change over when
// A's claim lapses, and sends it.
func TestPushJournalLeavesALiveNodesClaims(t *testing.T) {
	t.Parallel()
	svc := pushtest.NewService(t)
	failFirst(svc)
	const lease = 2 * time.Second // A renews every third of it
	be := storetest.Open(t, storetest.Redis, storetest.Options{})
	a := startPush(t, pushOptions{on: be, config: withPush(svc, retryLater(lease))})
	owner, thread := tokenN(1), threadN(1)
	a.mustPost(owner, "hello")
	status, _ := a.subscribe(owner, nil, svc.Subscribe(t, "phone"))
	assert.Equal(t, "subscribe", status, http.StatusCreated)
	_, err := a.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "are you there?"})
	assert.Success(t, err)
	awaitPushes(t, svc, "/push/phone", 1) // answered 503

	counted := &claimsCounted{}
	startPush(t, pushOptions{on: be.Another(t, storetest.Options{}), config: func(c *transport.Config) {
		withPush(svc, func(p *transport.PushConfig) { p.Lease = lease })(c)
		counted.Store, counted.Push = c.Store, store.PushOf(c.Store)
		c.Store = counted
	}})
	assert.Eventually(t, 10*time.Second, "B lost the journaled claim at its start and a lease later", func() bool { return counted.lost.Load() >= 2 })
	assert.Equal(t, "pushes while A holds the claim", len(pushesTo(svc, "/push/phone")), 1)
	a.stop()
	_, pls := awaitPushes(t, svc, "/push/phone", 2)
	assert.Equal(t, "the push B sent", pls[1].Message.Text, "are you there?")
}

// TestPushJournalTakenDespiteBadHandover: a lone server on the file store
// is killed while a reply's push waits for its retry, and the folder
// holds a handover file that does not parse (left as it is for the
// operator, and refused at every start). The next server still sends
// the push from the journal: the handover's refusal does not make it
// lose what the killed server owed.
func TestPushJournalTakenDespiteBadHandover(t *testing.T) {
	t.Parallel()
	svc := pushtest.NewService(t)
	svc.Respond = func(_ string, n int) pushtest.Answer {
		if n <= 1 {
			return pushtest.Answer{Status: http.StatusServiceUnavailable}
		}
		return pushtest.Answer{Status: http.StatusCreated}
	}
	const lease = time.Second
	be := storetest.Open(t, storetest.File, storetest.Options{})
	ctx, thread := t.Context(), threadN(1)
	subscribeInStore(t, be, thread, svc.Subscribe(t, "phone"))
	kill := startKillable(t, be, svc, lease)
	const text = "are you there?"
	_, err := be.Store.Append(ctx, thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: text})
	assert.Success(t, err)
	awaitPushes(t, svc, "/push/phone", 1) // answered 503: its retry is 5 minutes away
	kill()
	assert.Success(t, os.WriteFile(filepath.Join(be.Dir, "push-handover.json"), []byte("[{not json"), 0o600))

	startPush(t, pushOptions{on: be.Another(t, storetest.Options{}), config: withPush(svc, func(p *transport.PushConfig) { p.Lease = lease })})
	_, pls := awaitPushes(t, svc, "/push/phone", 2)
	assert.Equal(t, "the push sent after the kill", pls[1].Message.Text, text)
}

// killableAsked opens a store of backend whose thread has a subscription
// of svc's ("phone"), starts a server on it in a process of its own
// (startKillable: kill sends it SIGKILL), and asks an approval there as
// hermes.
func killableAsked(t *testing.T, backend string, svc *pushtest.Service, lease time.Duration) (be *storetest.Backend, thread string, kill func(), ask store.Entry) {
	t.Helper()
	be = storetest.Open(t, backend, storetest.Options{})
	thread = threadN(1)
	subscribeInStore(t, be, thread, svc.Subscribe(t, "phone"))
	kill = startKillable(t, be, svc, lease)
	ask, err := be.Store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true,
		Ask: &chatrelay.Ask{Type: chatrelay.Approval, Title: "deploy", Prompt: "Deploy?", Timeout: time.Hour}})
	assert.Success(t, err)
	return be, thread, kill, ask
}
