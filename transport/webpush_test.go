package transport_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/internal/schematest"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
	"github.com/chatrelay/chatrelay/webpush"
)

// Web Push (contract Part 5): the routes, and delivery to a local push
// service (internal/pushtest: HTTPS on 127.0.0.1, allowed the way
// --push-allow-host allows it) that decrypts each push with the
// subscription's keys and verifies its VAPID JWT.

// withPush is a server config with push on, reaching svc.
func withPush(svc *pushtest.Service, more func(*transport.PushConfig)) func(*transport.Config) {
	return withPushTo(svc.Certificate(), more)
}

// withPushTo is a server config with push on, reaching a push service
// on 127.0.0.1 whose certificate is cert.
func withPushTo(cert *x509.Certificate, more func(*transport.PushConfig)) func(*transport.Config) {
	return func(c *transport.Config) {
		pool := x509.NewCertPool()
		pool.AddCert(cert)
		pc := &transport.PushConfig{
			Contact: "mailto:ops@example.com",
			Guard:   &webpush.Guard{Allow: []string{"127.0.0.1"}},
			TLS:     &tls.Config{RootCAs: pool},
			Backoff: []time.Duration{10 * time.Millisecond},
		}
		if more != nil {
			more(pc)
		}
		c.Push = pc
	}
}

type pushAnswer struct {
	Success bool `json:"success"`
	Push    struct {
		ID        string   `json:"id"`
		Events    []string `json:"events"`
		CreatedAt int64    `json:"created_at"`
		Endpoint  string   `json:"endpoint"`
	} `json:"push"`
	Subscriptions []struct {
		ID string `json:"id"`
	} `json:"subscriptions"`
	PublicKey string `json:"public_key"`
	Code      string `json:"code"`
}

// subscribe posts sub (with events, if any) as the caller hdr names.
func (e *pushEnv) subscribe(token string, hdr map[string]string, sub pushtest.Subscription, events ...string) (int, pushAnswer) {
	e.t.Helper()
	body := map[string]any{"subscription": sub.JSON()}
	if events != nil {
		body["events"] = events
	}
	b, _ := json.Marshal(body)
	status, _, out := e.do(http.MethodPost, chatrelay.PathPush, token, string(b), hdr)
	var a pushAnswer
	assert.Success(e.t, json.Unmarshal(out, &a))
	return status, a
}

func (e *pushEnv) pushCall(method, path, token string, hdr map[string]string) (int, pushAnswer) {
	e.t.Helper()
	status, _, out := e.do(method, path, token, "", hdr)
	var a pushAnswer
	assert.Success(e.t, json.Unmarshal(out, &a))
	return status, a
}

// TestPushRoutes: the key; subscribe (201, then 200 and the same id for
// the same endpoint); the caller's own list; delete by the subscriber or
// the owner; the refusals, which store nothing; the limit of 20; and
// every route 404 push_disabled when push is off.
func TestPushRoutes(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		e := startPush(t, pushOptions{backend: backend, config: withPush(svc, nil)})
		owner := tokenN(1)
		status, key := e.pushCall(http.MethodGet, chatrelay.PathPushKey, "", nil)
		assert.True(t, status == 200 && len(key.PublicKey) == 87, "key: %d %+v", status, key)
		_, again := e.pushCall(http.MethodGet, chatrelay.PathPushKey, "", nil)
		assert.Equal(t, "the key again", again.PublicKey, key.PublicKey)

		a := svc.Subscribe(t, "a")
		status, out := e.subscribe(owner, nil, a)
		assert.True(t, status == 404 && out.Code == "not_found", "a thread with no message: %d %+v", status, out)
		e.mustPost(owner, "hello")
		status, first := e.subscribe(owner, nil, a)
		assert.True(t, status == 201 && chatrelay.ValidPushID(first.Push.ID), "subscribe: %d %+v", status, first)
		assert.Equal(t, "default events", first.Push.Events, []string{"interaction", "reply"})
		status, second := e.subscribe(owner, nil, a, "reply")
		assert.True(t, status == 200 && second.Push.ID == first.Push.ID, "again: %d %+v", status, second)
		assert.Equal(t, "events replaced", second.Push.Events, []string{"reply"})

		guest := e.invite(owner, `{"name":"Guest","role":"viewer"}`)
		g := svc.Subscribe(t, "g")
		status, out = e.subscribe("", bearer(guest.Token), g, "interaction", "reply")
		assert.True(t, status == 403 && out.Code == "not_permitted", "a participant asks for interaction pushes: %d %+v", status, out)
		status, gsub := e.subscribe("", bearer(guest.Token), g)
		assert.Equal(t, "participant subscribes", status, 201)
		assert.Equal(t, "a participant's default events", gsub.Push.Events, []string{"reply"})
		// The owner's endpoint (its browser) subscribed by a participant
		// (its page in the same browser) stays the owner's: 403, and the
		// owner's list and events are as they were.
		status, out = e.subscribe("", bearer(guest.Token), a)
		assert.True(t, status == 403 && out.Code == "not_permitted", "a participant takes over the owner's endpoint: %d %+v", status, out)
		_, mine := e.pushCall(http.MethodGet, chatrelay.PathPush, owner, nil)
		assert.True(t, len(mine.Subscriptions) == 1 && mine.Subscriptions[0].ID == first.Push.ID, "owner's list: %+v", mine)
		status, still := e.subscribe(owner, nil, a, "reply")
		assert.True(t, status == 200 && still.Push.ID == first.Push.ID, "the owner's subscription, again: %d %+v", status, still)
		_, theirs := e.pushCall(http.MethodGet, chatrelay.PathPush, "", bearer(guest.Token))
		assert.True(t, len(theirs.Subscriptions) == 1 && theirs.Subscriptions[0].ID == gsub.Push.ID, "guest's list: %+v", theirs)
		status, out = e.pushCall(http.MethodDelete, chatrelay.PathPush+"/"+first.Push.ID, "", bearer(guest.Token))
		assert.True(t, status == 404 && out.Code == "not_found", "a participant deletes the owner's: %d %+v", status, out)
		status, out = e.pushCall(http.MethodDelete, chatrelay.PathPush+"/"+gsub.Push.ID, owner, nil)
		assert.True(t, status == 200 && out.Push.ID == gsub.Push.ID, "the owner deletes the guest's: %d %+v", status, out)
		status, out = e.pushCall(http.MethodDelete, chatrelay.PathPush+"/"+gsub.Push.ID, owner, nil)
		assert.True(t, status == 404 && out.Code == "not_found", "again: %d %+v", status, out)
		status, out = e.pushCall(http.MethodDelete, chatrelay.PathPush+"/nope", owner, nil)
		assert.True(t, status == 404 && out.Code == "not_found", "a malformed id: %d %+v", status, out)

		// Refusals: 400 invalid_push_endpoint, nothing stored.
		for _, ep := range []string{"http://127.0.0.1/x", "https://10.0.0.1/x", "https://[::1]/x", "https://169.254.169.254/", "not a url"} {
			bad := a
			bad.Endpoint = ep
			status, out := e.subscribe(owner, nil, bad)
			assert.True(t, status == 400 && out.Code == "invalid_push_endpoint", "%s: %d %+v", ep, status, out)
		}
		for _, body := range []string{`{}`, `{"subscription":{"endpoint":"` + a.Endpoint + `"}}`,
			`{"subscription":{"endpoint":"` + a.Endpoint + `","keys":{"p256dh":"AAAA","auth":"` + a.AuthKey() + `"}}}`,
			`{"subscription":{"endpoint":"` + a.Endpoint + `","keys":{"p256dh":"` + a.P256dh() + `","auth":"AAAA"}}}`} {
			status, _, b := e.do(http.MethodPost, chatrelay.PathPush, owner, body, nil)
			assert.True(t, status == 400 && strings.Contains(string(b), `"invalid_push_endpoint"`), "%s: %d %s", body, status, b)
		}
		status, _, b := e.do(http.MethodPost, chatrelay.PathPush, owner, `{"subscription":{"endpoint":"`+a.Endpoint+`","keys":{"p256dh":"`+a.P256dh()+`","auth":"`+a.AuthKey()+`"}},"events":["everything"]}`, nil)
		assert.True(t, status == 400 && strings.Contains(string(b), `"invalid_json"`), "unknown event: %d %s", status, b)
		_, mine = e.pushCall(http.MethodGet, chatrelay.PathPush, owner, nil)
		assert.Equal(t, "after the refusals", len(mine.Subscriptions), 1)

		// At most 20 a thread: the 21st endpoint is refused.
		for i := 2; i <= chatrelay.LimitPushSubscriptions.Max; i++ {
			status, _ := e.subscribe(owner, nil, svc.Subscribe(t, fmt.Sprint("n", i)))
			assert.Equal(t, fmt.Sprint("subscription ", i), status, 201)
		}
		status, out = e.subscribe(owner, nil, svc.Subscribe(t, "one-more"))
		assert.True(t, status == 409 && out.Code == "push_limit", "the 21st: %d %+v", status, out)

		off := startPush(t, pushOptions{backend: backend})
		off.mustPost(owner, "hello")
		for _, c := range []struct{ method, path string }{{"GET", chatrelay.PathPushKey}, {"POST", chatrelay.PathPush}, {"GET", chatrelay.PathPush}, {"DELETE", chatrelay.PathPush + "/w_00000000"}} {
			body := ""
			if c.method == "POST" {
				body = `{}`
			}
			status, _, b := off.do(c.method, c.path, owner, body, nil)
			assert.True(t, status == 404 && strings.Contains(string(b), `"push_disabled"`), "%s %s with push off: %d %s", c.method, c.path, status, b)
		}
	})
}

// payload is a push's decrypted JSON.
type payload struct {
	Type    string            `json:"type"`
	Thread  string            `json:"thread"`
	Message chatrelay.Message `json:"message"`
	URL     string            `json:"url"`
}

// awaitPushes waits for n pushes to path and returns them, each
// decrypted and verified.
func awaitPushes(t *testing.T, svc *pushtest.Service, path string, n int) ([]pushtest.Push, []payload) {
	t.Helper()
	var got []pushtest.Push
	assert.Eventually(t, 10*time.Second, fmt.Sprintf("%d pushes to %s", n, path), func() bool {
		got = got[:0]
		for _, p := range svc.Pushes() {
			if p.Path == path {
				got = append(got, p)
			}
		}
		return len(got) >= n
	})
	var out []payload
	for _, p := range got {
		out = append(out, decodePush(t, p))
	}
	return got, out
}

// decodePush is a push's payload, decrypted and verified by the push
// service, checked against the bundle and the payload's size limit.
func decodePush(t testing.TB, p pushtest.Push) payload {
	t.Helper()
	assert.Success(t, p.Err)
	schematest.Valid(t, "push.payload", p.Plain)
	var pl payload
	assert.Success(t, json.Unmarshal(p.Plain, &pl))
	assert.True(t, len(p.Plain) <= chatrelay.LimitPushPayload.Max, "a payload of %d bytes", len(p.Plain))
	return pl
}

// TestPushDelivery: an approval opens (the owner's subscription only:
// high urgency, TTL the seconds to its deadline, Topic its id), closes
// (interaction_closed, the same Topic), and hermes replies (everyone: the
// participant's payload redacted; normal urgency, TTL a day, no Topic).
// Every push decrypts with its subscription's keys and carries a VAPID
// JWT that the server's public key verifies. A reaction on the closed
// interaction pushes nothing (one worker: the changes are taken in
// order, so the reply after it shows it was taken).
func TestPushDelivery(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		e := startPush(t, pushOptions{backend: backend, config: withPush(svc, func(c *transport.PushConfig) { c.Workers = 1 })})
		owner, thread := tokenN(1), threadN(1)
		e.mustPost(owner, "hello")
		_, key := e.pushCall(http.MethodGet, chatrelay.PathPushKey, "", nil)
		status, _ := e.subscribe(owner, nil, svc.Subscribe(t, "owner"))
		assert.Equal(t, "owner subscribes", status, 201)
		guest := e.invite(owner, `{"name":"Guest","role":"commenter"}`)
		status, _ = e.subscribe("", bearer(guest.Token), svc.Subscribe(t, "guest"))
		assert.Equal(t, "guest subscribes", status, 201)

		ctx := t.Context()
		asked, err := e.store.Append(ctx, thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true,
			Ask: &chatrelay.Ask{Type: chatrelay.Approval, Title: "deploy", Prompt: "Deploy build 412?", Timeout: time.Hour}})
		assert.Success(t, err)
		ix := asked.Interaction
		ps, pls := awaitPushes(t, svc, "/push/owner", 1)
		assert.Equal(t, "opened: type", pls[0].Type, "interaction")
		assert.True(t, pls[0].Thread == thread && pls[0].Message.Interaction.ID == ix.ID && pls[0].Message.Interaction.State == chatrelay.Pending, "opened: %+v", pls[0])
		assert.True(t, strings.HasSuffix(pls[0].URL, "/") && strings.HasPrefix(pls[0].URL, "http://127.0.0.1:"), "opened: url %q", pls[0].URL)
		ttl, _ := strconv.Atoi(ps[0].TTL)
		assert.True(t, ttl > 3600-60 && ttl <= 3600, "opened: TTL %q, want the seconds to the deadline", ps[0].TTL)
		assert.Equal(t, "opened: urgency, topic, key", []string{ps[0].Urgency, ps[0].Topic, ps[0].Key}, []string{"high", ix.ID, key.PublicKey})
		assert.Equal(t, "opened: sub", ps[0].Claims["sub"], any("mailto:ops@example.com"))

		status, _, b := e.do(http.MethodPost, chatrelay.PathRespond, owner, `{"interaction_id":"`+ix.ID+`","decision":"approve"}`, nil)
		assert.Equal(t, "respond "+string(b), status, 200)
		ps, pls = awaitPushes(t, svc, "/push/owner", 2)
		assert.True(t, pls[1].Type == "interaction_closed" && pls[1].Message.Interaction.State == chatrelay.Approved, "closed: %+v", pls[1])
		assert.Equal(t, "closed: urgency, topic", []string{ps[1].Urgency, ps[1].Topic}, []string{"high", ix.ID})

		status, _, b = e.do(http.MethodPost, chatrelay.PathReact, owner, `{"message_id":"`+asked.ID+`","emoji":"👍"}`, nil)
		assert.Equal(t, "react "+string(b), status, 200)

		secret := "the deploy password=hunter2 is set"
		_, err = e.store.Append(ctx, thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: secret})
		assert.Success(t, err)
		ps, pls = awaitPushes(t, svc, "/push/owner", 3)
		assert.True(t, len(pls) == 3 && pls[2].Type == "reply" && pls[2].Message.Text == secret, "reply to the owner (after a reaction): %+v", pls[2:])
		assert.Equal(t, "reply: ttl, urgency, topic", []string{ps[2].TTL, ps[2].Urgency, ps[2].Topic}, []string{"86400", "normal", ""})
		gps, gpl := awaitPushes(t, svc, "/push/guest", 1)
		assert.True(t, gpl[0].Type == "reply" && gpl[0].Message.Text == chatrelay.Redact(secret) && !strings.Contains(string(gps[0].Plain), "hunter2"),
			"reply to the participant: %s", gps[0].Plain)
		assert.True(t, strings.HasSuffix(gpl[0].URL, "/p"), "participant's url %q", gpl[0].URL)
		assert.Equal(t, "the participant got only the reply", len(pushesTo(svc, "/push/guest")), 1)

		// A participant's subscription dies with its grant.
		status, _, b = e.do(http.MethodDelete, chatrelay.PathParticipants+"/"+guest.Participant.ID, owner, "", nil)
		assert.Equal(t, "revoke "+string(b), status, 200)
		_, err = e.store.Append(ctx, thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "after the revoke"})
		assert.Success(t, err)
		awaitPushes(t, svc, "/push/owner", 4)
		assert.Eventually(t, 10*time.Second, "the revoked grant's subscription deleted", func() bool {
			subs, err := store.PushOf(e.store).PushSubscriptions(ctx, thread)
			return err == nil && len(subs) == 1
		})
		assert.Equal(t, "nothing to the revoked participant", len(pushesTo(svc, "/push/guest")), 1)
	})
}

func pushesTo(svc *pushtest.Service, path string) []pushtest.Push {
	var out []pushtest.Push
	for _, p := range svc.Pushes() {
		if p.Path == path {
			out = append(out, p)
		}
	}
	return out
}

// TestPushRetriesAndGone: a 429 with Retry-After, then a 503, then 201:
// three attempts, the second no sooner than the Retry-After; a 410
// deletes the subscription; the outcomes are counted.
func TestPushRetriesAndGone(t *testing.T) {
	t.Parallel()
	svc := pushtest.NewService(t)
	svc.Respond = func(path string, n int) pushtest.Answer {
		switch {
		case path == "/push/gone":
			return pushtest.Answer{Status: http.StatusGone}
		case n == 1:
			return pushtest.Answer{Status: 429, Headers: http.Header{"Retry-After": {"1"}}}
		case n == 2:
			return pushtest.Answer{Status: 503}
		}
		return pushtest.Answer{Status: 201}
	}
	e := startPush(t, pushOptions{config: withPush(svc, nil)})
	owner, thread := tokenN(1), threadN(1)
	e.mustPost(owner, "hello")
	e.subscribe(owner, nil, svc.Subscribe(t, "flaky"))
	e.subscribe(owner, nil, svc.Subscribe(t, "gone"))
	_, err := e.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "are you there?"})
	assert.Success(t, err)
	ps, pls := awaitPushes(t, svc, "/push/flaky", 3)
	assert.True(t, ps[1].At.Sub(ps[0].At) >= time.Second, "the retry came %v after a Retry-After of 1s", ps[1].At.Sub(ps[0].At))
	for _, p := range pls {
		assert.Equal(t, "each attempt's text", p.Message.Text, "are you there?")
	}
	assert.Eventually(t, 10*time.Second, "the gone subscription deleted", func() bool {
		_, mine := e.pushCall(http.MethodGet, chatrelay.PathPush, owner, nil)
		return len(mine.Subscriptions) == 1
	})
	var m map[string]float64
	assert.Eventually(t, 10*time.Second, "the outcomes counted", func() bool {
		m = opsScrape(t, e.client, e.ts.URL+"/metrics")
		return m[`chatrelay_push_total{result="sent"}`] == 1
	})
	assert.Equal(t, "counts", []float64{m[`chatrelay_push_total{result="retried"}`], m[`chatrelay_push_total{result="gone"}`]}, []float64{2, 1})
	assert.Equal(t, "no more attempts", len(pushesTo(svc, "/push/flaky")), 3)
}

// TestPushTwoNodesSendOnce: two servers on one Redis each see every
// change; each push is sent by one of them.
func TestPushTwoNodesSendOnce(t *testing.T) {
	t.Parallel()
	svc := pushtest.NewService(t)
	be := storetest.Open(t, storetest.Redis, storetest.Options{})
	a := startPush(t, pushOptions{on: be, config: withPush(svc, nil)})
	b := startPush(t, pushOptions{on: be.Another(t, storetest.Options{}), config: withPush(svc, nil)})
	owner, thread := tokenN(1), threadN(1)
	a.mustPost(owner, "hello")
	a.subscribe(owner, nil, svc.Subscribe(t, "owner"))
	const n = 10
	for i := range n {
		_, err := b.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: fmt.Sprint("reply ", i)})
		assert.Success(t, err)
	}
	claims := func(e *pushEnv) (won, lost float64) {
		m := opsScrape(t, e.client, e.ts.URL+"/metrics")
		return m[`chatrelay_push_claims_total{won="true"}`], m[`chatrelay_push_claims_total{won="false"}`]
	}
	assert.Eventually(t, 10*time.Second, "both nodes decided every change", func() bool {
		w1, l1 := claims(a)
		w2, l2 := claims(b)
		return w1+l1 >= n && w2+l2 >= n // more if a feed's Reset had one read some again
	})
	w1, _ := claims(a)
	w2, _ := claims(b)
	assert.Equal(t, "claims won", w1+w2, float64(n))
	_, pls := awaitPushes(t, svc, "/push/owner", n)
	seen := map[string]int{}
	for _, p := range pls {
		seen[p.Message.Text]++
	}
	assert.Equal(t, "pushes", len(pushesTo(svc, "/push/owner")), n)
	for i := range n {
		assert.Equal(t, fmt.Sprint("reply ", i), seen[fmt.Sprint("reply ", i)], 1)
	}
}

// TestPushCLIReply: "chatrelay reply" in another process is pushed.
func TestPushCLIReply(t *testing.T) {
	t.Parallel()
	bin := mustBinary(t)
	var once sync.Once
	storetest.Run(t, func(t *testing.T, backend string) {
		once.Do(func() {})
		svc := pushtest.NewService(t)
		e := startPush(t, pushOptions{backend: backend, config: withPush(svc, nil)})
		owner, thread := tokenN(1), threadN(1)
		e.mustPost(owner, "hello")
		e.subscribe(owner, nil, svc.Subscribe(t, "owner"))
		_, err := e.cliReply(t.Context(), bin, "never", thread, "from the CLI")
		assert.Success(t, err)
		_, pls := awaitPushes(t, svc, "/push/owner", 1)
		assert.True(t, pls[0].Type == "reply" && pls[0].Message.Text == "from the CLI", "pushed: %+v", pls[0])
	})
}

// TestPushExpiredAndEvents: an approval that expires pushes
// interaction_closed (state expired, TTL 0, the same Topic); a
// subscription that asked for replies only gets neither push, and gets
// the reply.
func TestPushExpiredAndEvents(t *testing.T) {
	t.Parallel()
	svc := pushtest.NewService(t)
	e := startPush(t, pushOptions{config: withPush(svc, func(c *transport.PushConfig) { c.Workers = 1 })})
	owner, thread := tokenN(1), threadN(1)
	e.mustPost(owner, "hello")
	e.subscribe(owner, nil, svc.Subscribe(t, "all"))
	status, _ := e.subscribe(owner, nil, svc.Subscribe(t, "replies"), "reply")
	assert.Equal(t, "replies only", status, 201)
	asked, err := e.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true,
		Ask: &chatrelay.Ask{Type: chatrelay.Approval, Prompt: "Deploy?", Timeout: time.Second}})
	assert.Success(t, err)
	ps, pls := awaitPushes(t, svc, "/push/all", 2)
	assert.True(t, pls[1].Type == "interaction_closed" && pls[1].Message.Interaction.State == chatrelay.Expired, "expired: %+v", pls[1])
	assert.Equal(t, "expired: ttl, urgency, topic", []string{ps[1].TTL, ps[1].Urgency, ps[1].Topic}, []string{"0", "high", asked.Interaction.ID})
	_, err = e.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "deployed anyway? no."})
	assert.Success(t, err)
	_, pls = awaitPushes(t, svc, "/push/replies", 1)
	assert.Equal(t, "the replies-only subscription's pushes", []string{pls[0].Type}, []string{"reply"})
	awaitPushes(t, svc, "/push/all", 3)
	assert.Equal(t, "replies only: one push", len(pushesTo(svc, "/push/replies")), 1)
}

// TestPushDevice: one of the owner's devices subscribes (its own list),
// gets an approval as the owner does (unredacted, its page /d), and its
// subscription dies with its revoke.
func TestPushDevice(t *testing.T) {
	t.Parallel()
	svc := pushtest.NewService(t)
	e := startPush(t, pushOptions{config: withPush(svc, func(c *transport.PushConfig) { c.Workers = 1 })})
	owner, thread := tokenN(1), threadN(1)
	e.mustPost(owner, "hello")
	status, _, b := e.do(http.MethodPost, chatrelay.PathDevices, owner, `{"name":"Phone"}`, nil)
	assert.Equal(t, "device "+string(b), status, 201)
	var dev struct {
		Token  string `json:"token"`
		Device struct {
			ID string `json:"id"`
		} `json:"device"`
	}
	assert.Success(t, json.Unmarshal(b, &dev))
	status, sub := e.subscribe("", bearer(dev.Token), svc.Subscribe(t, "phone"))
	assert.Equal(t, "the device subscribes", status, 201)
	_, mine := e.pushCall(http.MethodGet, chatrelay.PathPush, "", bearer(dev.Token))
	assert.True(t, len(mine.Subscriptions) == 1 && mine.Subscriptions[0].ID == sub.Push.ID, "the device's list: %+v", mine)
	_, owners := e.pushCall(http.MethodGet, chatrelay.PathPush, owner, nil)
	assert.Equal(t, "the owner token's own list", len(owners.Subscriptions), 0)

	secret := "Deploy with password=hunter2?"
	_, err := e.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true,
		Ask: &chatrelay.Ask{Type: chatrelay.Approval, Prompt: secret}})
	assert.Success(t, err)
	_, pls := awaitPushes(t, svc, "/push/phone", 1)
	assert.True(t, pls[0].Type == "interaction" && pls[0].Message.Interaction.Prompt == secret && strings.HasSuffix(pls[0].URL, "/d"), "to the device: %+v", pls[0])

	status, _, b = e.do(http.MethodDelete, chatrelay.PathDevices+"/"+dev.Device.ID, owner, "", nil)
	assert.Equal(t, "revoke "+string(b), status, 200)
	_, err = e.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "after the revoke"})
	assert.Success(t, err)
	assert.Eventually(t, 10*time.Second, "the revoked device's subscription deleted", func() bool {
		subs, err := store.PushOf(e.store).PushSubscriptions(t.Context(), thread)
		return err == nil && len(subs) == 0
	})
	assert.Equal(t, "nothing more to the revoked device", len(pushesTo(svc, "/push/phone")), 1)
}
