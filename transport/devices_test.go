package transport_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
)

// The owner's devices (contract Part 5): a device link's chd_ token acts
// as the owner on every route but making devices.

// deviceObject is a device as the answers show it.
type deviceObject struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	CreatedAt int64  `json:"created_at"`
	ExpiresAt int64  `json:"expires_at"`
	LastSeen  int64  `json:"last_seen"`
	State     string `json:"state"`
}

// deviceIssued is the 201 of POST /api/chat/devices.
type deviceIssued struct {
	Success bool         `json:"success"`
	Device  deviceObject `json:"device"`
	Token   string       `json:"token"`
	Link    string       `json:"link"`
	QR      string       `json:"qr"`
}

// issueDevice makes a device of the owner's thread.
func (e *pushEnv) issueDevice(owner, body string) deviceIssued {
	e.t.Helper()
	status, _, b := e.do(http.MethodPost, "/api/chat/devices", owner, body, nil)
	assert.Equal(e.t, "device status "+string(b), status, http.StatusCreated)
	var d deviceIssued
	assert.Success(e.t, json.Unmarshal(b, &d))
	return d
}

// asDevice sends a request with a device's token.
func (e *pushEnv) asDevice(method, path, tok, body string) (int, []byte) {
	e.t.Helper()
	status, _, b := e.do(method, path, "", body, bearer(tok))
	return status, b
}

// lockedLog is a log sink safe for the server's concurrent writes.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestDeviceActsAsTheOwner: a device answers an approval, posts as
// operator, sees the stored text unredacted, manages participants, lists
// and revokes devices (another and itself), and may not make devices;
// whoami says owner with the device; the audit has the device's events;
// the token is in no answer but the first, and in no log line.
func TestDeviceActsAsTheOwner(t *testing.T) {
	t.Parallel()
	storetest.Run(t, testDeviceActsAsTheOwner)
}

func testDeviceActsAsTheOwner(t *testing.T, backend string) {
	var logs lockedLog
	e := startPush(t, pushOptions{backend: backend, config: func(c *transport.Config) {
		c.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}})
	owner := tokenN(1)
	e.mustPost(owner, "hello, the password=hunter2 is here")

	phone := e.issueDevice(owner, `{"name":"Phone"}`)
	assert.True(t, strings.HasPrefix(phone.Token, "chd_") && len(phone.Token) == 4+43, "token %q", phone.Token)
	assert.Equal(t, "link", phone.Link, e.ts.URL+"/d#"+phone.Token)
	assert.True(t, strings.HasPrefix(phone.QR, "data:image/png;base64,"), "qr %.40s", phone.QR)
	d := phone.Device
	assert.True(t, strings.HasPrefix(d.ID, "d_") && len(d.ID) == 10 && d.Name == "Phone" && d.State == "active" && d.LastSeen == 0 &&
		d.ExpiresAt-d.CreatedAt == 7776000_000, "device %+v", d)
	laptop := e.issueDevice(owner, `{"name":"Laptop","expires_in":3600}`)
	assert.Equal(t, "expires_in", laptop.Device.ExpiresAt-laptop.Device.CreatedAt, int64(3600_000))

	// It reads as the owner: the stored text, unredacted.
	status, b := e.asDevice(http.MethodGet, "/api/chat/poll", phone.Token, "")
	assert.True(t, status == 200 && strings.Contains(string(b), "password=hunter2"), "the device's poll: %d %s", status, b)
	// It posts as operator.
	status, b = e.asDevice(http.MethodPost, "/api/chat/post", phone.Token, `{"text":"from the phone"}`)
	assert.Equal(t, "the device's post "+string(b), status, http.StatusCreated)
	last := e.pollV2(owner, 0).Messages
	assert.True(t, last[len(last)-1].Author == string(chatrelay.Operator) && last[len(last)-1].Text == "from the phone", "stored as %+v", last[len(last)-1])
	// Its refusals show what the owner sees: a 409 carries the stored text.
	status, b = e.asDevice(http.MethodPost, "/api/chat/post", phone.Token, `{"text":"token: abc123 for the phone","client_id":"dev-1"}`)
	assert.Equal(t, "the device's post with a client_id "+string(b), status, http.StatusCreated)
	status, b = e.asDevice(http.MethodPost, "/api/chat/post", phone.Token, `{"text":"another text","client_id":"dev-1"}`)
	assert.True(t, status == 409 && decodeError(t, b).Code == "client_id_conflict" && strings.Contains(string(b), "token: abc123") &&
		strings.Contains(string(b), `"client_id":"dev-1"`), "the device's 409: %d %s", status, b)
	// It answers an approval.
	ix := e.ask(threadN(1), chatrelay.Ask{Type: chatrelay.Approval, Prompt: "Deploy build 412?"})
	status, b = e.asDevice(http.MethodPost, "/api/chat/respond", phone.Token, `{"interaction_id":"`+ix.Interaction.ID+`","decision":"approve"}`)
	assert.True(t, status == 200 && strings.Contains(string(b), `"state":"approved"`) && strings.Contains(string(b), `"answered_by":"operator"`),
		"the device's answer: %d %s", status, b)
	// It manages participants.
	status, b = e.asDevice(http.MethodPost, "/api/chat/participants", phone.Token, `{"name":"Alex"}`)
	assert.Equal(t, "the device invites "+string(b), status, http.StatusCreated)
	status, b = e.asDevice(http.MethodGet, "/api/chat/participants", phone.Token, "")
	assert.True(t, status == 200 && strings.Contains(string(b), `"name":"Alex"`) && !strings.Contains(string(b), "Phone"),
		"the participants (no device among them): %d %s", status, b)
	// whoami: the owner, on this device.
	status, b = e.asDevice(http.MethodGet, "/api/chat/whoami", phone.Token, "")
	var who struct {
		Role         string
		Device       *deviceObject
		Participant  *json.RawMessage
		Participants []map[string]string
	}
	assert.Success(t, json.Unmarshal(b, &who))
	assert.True(t, status == 200 && who.Role == "owner" && who.Device != nil && who.Device.ID == phone.Device.ID && who.Participant == nil &&
		len(who.Participants) == 1 && who.Participants[0]["name"] == "Alex", "the device's whoami: %d %s", status, b)
	// It may not make a device.
	status, b = e.asDevice(http.MethodPost, "/api/chat/devices", phone.Token, `{"name":"Tablet"}`)
	assert.True(t, status == 403 && decodeError(t, b).Code == "not_permitted", "a device making a device: %d %s", status, b)

	// It lists the devices, newest first, seen since.
	status, b = e.asDevice(http.MethodGet, "/api/chat/devices", phone.Token, "")
	var list struct{ Devices []deviceObject }
	assert.Success(t, json.Unmarshal(b, &list))
	assert.True(t, status == 200 && len(list.Devices) == 2 && list.Devices[0].ID == laptop.Device.ID && list.Devices[1].ID == phone.Device.ID,
		"the devices: %d %s", status, b)
	assert.True(t, list.Devices[1].LastSeen > 0 && list.Devices[0].LastSeen == 0, "last_seen: %s", b)
	status, _, b = e.do(http.MethodGet, "/api/chat/devices", owner, "", nil)
	assert.True(t, status == 200 && !strings.Contains(string(b), phone.Token) && !strings.Contains(string(b), "Alex"), "the owner's list: %d %s", status, b)

	// It revokes another, then itself; then it is refused.
	status, b = e.asDevice(http.MethodDelete, "/api/chat/devices/"+laptop.Device.ID, phone.Token, "")
	assert.True(t, status == 200 && strings.Contains(string(b), `"state":"revoked"`), "revoke the laptop: %d %s", status, b)
	status, b = e.asDevice(http.MethodGet, "/api/chat/poll", laptop.Token, "")
	assert.True(t, status == 401 && decodeError(t, b).Code == "token_revoked", "the laptop after: %d %s", status, b)
	status, b = e.asDevice(http.MethodDelete, "/api/chat/devices/"+phone.Device.ID, phone.Token, "")
	assert.True(t, status == 200 && strings.Contains(string(b), `"state":"revoked"`), "revoke itself: %d %s", status, b)
	status, _, b2 := e.do(http.MethodDelete, "/api/chat/devices/"+phone.Device.ID, owner, "", nil)
	assert.True(t, status == 200 && string(b2) == string(b), "revoking again answers the same: %d %s", status, b2)
	status, b = e.asDevice(http.MethodPost, "/api/chat/post", phone.Token, `{"text":"still here?"}`)
	assert.True(t, status == 401 && decodeError(t, b).Code == "token_revoked", "the phone after: %d %s", status, b)
	status, _, b = e.do(http.MethodDelete, "/api/chat/devices/d_00000000", owner, "", nil)
	assert.True(t, status == 404 && decodeError(t, b).Code == "not_found", "revoke unknown: %d %s", status, b)
	// A participant's id is not a device's, nor the other way round.
	status, _, b = e.do(http.MethodDelete, "/api/chat/participants/"+phone.Device.ID, owner, "", nil)
	assert.True(t, status == 404 && decodeError(t, b).Code == "not_found", "a device revoked as a participant: %d %s", status, b)

	// The audit.
	status, _, b = e.do(http.MethodGet, "/api/chat/participants/audit", owner, "", nil)
	assert.Equal(t, "audit", status, http.StatusOK)
	var audit struct {
		Events []struct {
			Event, Device, Participant string
		}
	}
	assert.Success(t, json.Unmarshal(b, &audit))
	var events []string
	for _, ev := range audit.Events {
		events = append(events, ev.Event+":"+ev.Device)
	}
	p, l := phone.Device.ID, laptop.Device.ID
	assert.Equal(t, "audit events", events, []string{"device_issued:" + p, "device_issued:" + l, "device_first_use:" + p, "issued:",
		"device_revoked:" + l, "device_revoked:" + p})
	assert.True(t, !strings.Contains(string(b), phone.Token) && !strings.Contains(string(b), chatrelay.DigestOf(phone.Token)), "the audit shows a token or a digest")

	// Refusals.
	for _, tc := range []struct{ body, code string }{
		{`{"name":" \n<>[] "}`, "invalid_name"},
		{`{}`, "invalid_name"},
		{`{"name":"x","expires_in":3599}`, "invalid_expiry"},
		{`{"name":"x","expires_in":31536001}`, "invalid_expiry"},
		{`{"name":"x","expires_in":"1h"}`, "invalid_expiry"},
		{`{"name":"x","expires_in":3600.5}`, "invalid_expiry"},
		{`[]`, "invalid_json"},
	} {
		status, _, b := e.do(http.MethodPost, "/api/chat/devices", owner, tc.body, nil)
		assert.True(t, status == 400 && decodeError(t, b).Code == tc.code, "device %s: %d %s", tc.body, status, b)
	}
	year := e.issueDevice(owner, `{"name":"a year","expires_in":31536000}`)
	assert.Equal(t, "a year", year.Device.ExpiresAt-year.Device.CreatedAt, int64(31536000_000))
	// A whole number with a fraction is an integer, as JSON Schema counts one.
	hour := e.issueDevice(owner, `{"name":"an hour","expires_in":3600.0}`)
	assert.Equal(t, "an hour (3600.0)", hour.Device.ExpiresAt-hour.Device.CreatedAt, int64(3600_000))

	for _, tok := range []string{phone.Token, laptop.Token, year.Token, chatrelay.DigestOf(phone.Token)} {
		assert.True(t, !strings.Contains(logs.String(), tok), "the log holds a device's token or digest:\n%s", logs.String())
	}
}

// TestDeviceLimit: at most 10 active devices per thread; the 11th is
// refused with 409 device_limit and leaves nothing behind (no device, no
// audit event); a revoke makes room. Participants do not count.
func TestDeviceLimit(t *testing.T) {
	t.Parallel()
	storetest.Run(t, testDeviceLimit)
}

func testDeviceLimit(t *testing.T, backend string) {
	e := startPush(t, pushOptions{backend: backend})
	owner := tokenN(1)
	status, _, b := e.do(http.MethodPost, "/api/chat/devices", owner, `{"name":"early"}`, nil)
	assert.True(t, status == 404 && decodeError(t, b).Code == "not_found", "a device of an empty thread: %d %s", status, b)
	e.mustPost(owner, "hello")
	e.invite(owner, `{"name":"Alex"}`)
	var first deviceIssued
	for i := range 10 {
		d := e.issueDevice(owner, `{"name":"device"}`)
		if i == 0 {
			first = d
		}
	}
	audit := func() string {
		_, _, b := e.do(http.MethodGet, "/api/chat/participants/audit", owner, "", nil)
		return string(b)
	}
	list := func() string {
		_, _, b := e.do(http.MethodGet, "/api/chat/devices", owner, "", nil)
		return string(b)
	}
	beforeAudit, beforeList := audit(), list()
	status, _, b = e.do(http.MethodPost, "/api/chat/devices", owner, `{"name":"eleventh"}`, nil)
	assert.True(t, status == 409 && decodeError(t, b).Code == "device_limit", "the 11th: %d %s", status, b)
	assert.Equal(t, "the audit after the refusal", audit(), beforeAudit)
	assert.Equal(t, "the devices after the refusal", list(), beforeList)
	assert.True(t, !strings.Contains(beforeList, "eleventh"), "the list: %s", beforeList)
	// Participants still have their own room.
	e.invite(owner, `{"name":"Bo"}`)
	status, _, _ = e.do(http.MethodDelete, "/api/chat/devices/"+first.Device.ID, owner, "", nil)
	assert.Equal(t, "revoke", status, http.StatusOK)
	e.issueDevice(owner, `{"name":"eleventh"}`)
}

// TestDeviceRevokeEndsStreamsWithinASecond: a revoke over HTTP (by
// another device) or by `chatrelay device revoke` in another process ends
// the device's SSE, WebSocket and ticket streams within a second, while
// the owner's stay open.
func TestDeviceRevokeEndsStreamsWithinASecond(t *testing.T) {
	t.Parallel()
	storetest.Run(t, testDeviceRevokeEndsStreamsWithinASecond)
}

func testDeviceRevokeEndsStreamsWithinASecond(t *testing.T, backend string) {
	bin := mustBinary(t)
	for _, by := range []string{"another device", "the CLI"} {
		t.Run(by, func(t *testing.T) {
			t.Parallel()
			e := startPush(t, pushOptions{backend: backend})
			owner := tokenN(1)
			e.mustPost(owner, "hello")
			phone := e.issueDevice(owner, `{"name":"Phone"}`)
			laptop := e.issueDevice(owner, `{"name":"Laptop"}`)
			status, tb := e.asDevice(http.MethodPost, "/api/chat/ticket", phone.Token, "")
			assert.Equal(t, "ticket", status, http.StatusCreated)
			var tk struct{ Ticket string }
			assert.Success(t, json.Unmarshal(tb, &tk))

			sse := e.mustSSE("/api/chat/stream", "", bearer(phone.Token))
			ticketSSE := e.mustSSE("/api/chat/stream?ticket="+tk.Ticket, "", nil)
			ws, _, err := e.dialWS(t.Context(), "/api/chat/ws", "", http.Header{"Authorization": {"Bearer " + phone.Token}})
			assert.Success(t, err)
			defer ws.CloseNow()
			ownerSSE := e.mustSSE("/api/chat/stream", owner, nil)
			laptopSSE := e.mustSSE("/api/chat/stream", "", bearer(laptop.Token))
			for _, s := range []*sseStream{sse, ticketSSE, ownerSSE, laptopSSE} {
				assert.Equal(t, "ready", s.nextEvent(t).Event, "ready")
				assert.Equal(t, "the backlog", s.nextEvent(t).Event, "message")
			}
			assert.Equal(t, "ws ready", nextWS(t, ws).Type, "ready")
			assert.Equal(t, "ws backlog", nextWS(t, ws).Type, "message")

			start := time.Now()
			if by == "another device" {
				status, b := e.asDevice(http.MethodDelete, "/api/chat/devices/"+phone.Device.ID, laptop.Token, "")
				assert.Equal(t, "revoke "+string(b), status, http.StatusOK)
			} else {
				args := append([]string{"device", "revoke", threadN(1), phone.Device.ID, "--fsync", "never"}, e.backend.CLIArgs()...)
				cmd := exec.CommandContext(t.Context(), bin, args...)
				cmd.Env = append(os.Environ(), "CHATRELAY_DATA=", "CHATRELAY_STORE=", "CHATRELAY_REDIS_PREFIX=")
				out, err := cmd.CombinedOutput()
				assert.True(t, err == nil && strings.Contains(string(out), "revoked Phone"), "chatrelay device revoke: %v %s", err, out)
				start = e.revokedAt(t, threadN(1), phone.Device.ID) // not the process's start: not the server's to pay
			}
			for _, s := range []*sseStream{sse, ticketSSE} {
				f := within(t, 2*time.Second, "the revoked event", s.Close, s.NextEvent)
				took := time.Since(start)
				assert.True(t, f.Event == "revoked" && f.Data == `{"code":"token_revoked"}`, "revoked event %+v", f)
				assert.True(t, took <= time.Second, "the SSE stream ended %v after the revoke", took)
				t.Logf("SSE ended %v after the revoke (%s)", took.Round(time.Millisecond), by)
			}
			_, err = readWS(t.Context(), ws)
			took := time.Since(start)
			var ce websocket.CloseError
			assert.True(t, errors.As(err, &ce) && ce.Code == websocket.StatusPolicyViolation && ce.Reason == "token_revoked", "close %v", err)
			assert.True(t, took <= time.Second, "the WebSocket closed %v after the revoke", took)

			e.mustPost(owner, "still here")
			assert.Equal(t, "owner's stream", ownerSSE.nextEvent(t).Event, "message")
			assert.Equal(t, "the laptop's stream", laptopSSE.nextEvent(t).Event, "message")
			status, b := e.asDevice(http.MethodGet, "/api/chat/poll", phone.Token, "")
			assert.True(t, status == 401 && decodeError(t, b).Code == "token_revoked", "the token after the revoke: %d %s", status, b)
			_, resp, b, err := e.openSSE(t.Context(), "/api/chat/stream?ticket="+tk.Ticket, "", nil)
			assert.Success(t, err)
			assert.True(t, resp.StatusCode == 401 && decodeError(t, b).Code == "token_revoked", "the ticket after the revoke: %d %s", resp.StatusCode, b)
		})
	}
}

// TestDeviceExpiry: with a settable clock, a device's streams end with
// token_expired within a second of expires_at, its token is then refused
// with 401 token_expired, and the audit has device_expired once.
func TestDeviceExpiry(t *testing.T) {
	t.Parallel()
	storetest.Run(t, testDeviceExpiry)
}

// slowExpiryAudit is a store whose writes of an expiry's audit event take
// a while (a slow disk, a far Redis): what the server does after that
// write shows only once it is done.
type slowExpiryAudit struct {
	store.Store
	store.Participants
}

func (s slowExpiryAudit) Audit(ctx context.Context, thread string, ev chatrelay.AuditEvent) error {
	if strings.HasSuffix(ev.Event, chatrelay.AuditExpired) {
		time.Sleep(300 * time.Millisecond)
	}
	return s.Participants.Audit(ctx, thread, ev)
}

// testDeviceExpiry: on the server's clock (a settable one here), the
// device's streams stay open until its expires_at and end at expires_at
// with token_expired, with no other move of the clock; the audit already
// lists device_expired (once) when they end, however slow the audit's
// write; the token is refused after.
func testDeviceExpiry(t *testing.T, backend string) {
	clk := testclock.New(time.Now())
	e := startPush(t, pushOptions{backend: backend, store: storetest.Options{Now: clk.Now}, config: func(c *transport.Config) {
		c.Now = clk.Now
		c.AfterFunc = func(d time.Duration, f func()) interface{ Stop() bool } { return clk.AfterFunc(d, f) }
		c.Store = slowExpiryAudit{c.Store, c.Store.(store.Participants)}
	}})
	owner := tokenN(1)
	e.mustPost(owner, "hello")
	phone := e.issueDevice(owner, `{"name":"Phone","expires_in":3600}`)
	sse := e.mustSSE("/api/chat/stream", "", bearer(phone.Token))
	assert.Equal(t, "ready", sse.nextEvent(t).Event, "ready")
	assert.Equal(t, "the backlog", sse.nextEvent(t).Event, "message")
	ws, _, err := e.dialWS(t.Context(), "/api/chat/ws", "", http.Header{"Authorization": {"Bearer " + phone.Token}})
	assert.Success(t, err)
	defer ws.CloseNow()
	assert.Equal(t, "ws ready", nextWS(t, ws).Type, "ready")

	clk.Advance(3599 * time.Second)
	status, b := e.asDevice(http.MethodGet, "/api/chat/poll", phone.Token, "")
	assert.Equal(t, "a second before "+string(b), status, http.StatusOK)
	e.mustPost(owner, "a second before")
	assert.Equal(t, "still open a second before", sse.nextEvent(t).Event, "message")
	// expires_at: the clock moves no further, so only the expiry's timer
	// can end the stream. (Within a second of real time is not what a
	// settable clock tests, nor a loaded machine keeps: nextEvent's bound
	// only stands for "never".)
	clk.Advance(time.Second)
	f := sse.nextEvent(t)
	for f.Event == "message" {
		f = sse.nextEvent(t)
	}
	assert.True(t, f.Event == "revoked" && f.Data == `{"code":"token_expired"}`, "event %+v", f)
	_, _, b = e.do(http.MethodGet, "/api/chat/participants/audit", owner, "", nil)
	assert.Equal(t, "device_expired events when the stream ended "+string(b), strings.Count(string(b), `"device_expired"`), 1)
	for {
		wf, err := readWS(t.Context(), ws)
		if err != nil {
			var ce websocket.CloseError
			assert.True(t, errors.As(err, &ce) && ce.Code == websocket.StatusPolicyViolation && ce.Reason == "token_expired", "WS %v", err)
			break
		}
		assert.Equal(t, "only messages before the close", wf.Type, "message")
	}
	for range 2 {
		status, b = e.asDevice(http.MethodGet, "/api/chat/poll", phone.Token, "")
		assert.True(t, status == 401 && decodeError(t, b).Code == "token_expired", "after expiry: %d %s", status, b)
	}
	_, _, b = e.do(http.MethodGet, "/api/chat/devices", owner, "", nil)
	assert.True(t, strings.Contains(string(b), `"state":"expired"`), "the list: %s", b)
	_, _, b = e.do(http.MethodGet, "/api/chat/participants/audit", owner, "", nil)
	assert.Equal(t, "device_expired events", strings.Count(string(b), `"device_expired"`), 1)
}

// TestNodesDeviceRevokeEndsStreams: on Redis, a device made on node B
// works on node A at once; its revoke on node B ends the device's SSE
// stream and WebSocket on node A within a second, and A refuses it after.
func TestNodesDeviceRevokeEndsStreams(t *testing.T) {
	t.Parallel()
	_, nodes := startNodes(t, 2, pushOptions{})
	a, b := nodes[0], nodes[1]
	owner := tokenN(1)
	a.mustPost(owner, "hello")
	phone := b.issueDevice(owner, `{"name":"Phone"}`)
	sse := a.mustSSE("/api/chat/stream", "", bearer(phone.Token))
	assert.Equal(t, "ready", sse.nextEvent(t).Event, "ready")
	assert.Equal(t, "the backlog", sse.nextEvent(t).Event, "message")
	ws, _, err := a.dialWS(t.Context(), "/api/chat/ws", "", http.Header{"Authorization": {"Bearer " + phone.Token}})
	assert.Success(t, err)
	defer ws.CloseNow()
	assert.Equal(t, "ws ready", nextWS(t, ws).Type, "ready")
	assert.Equal(t, "ws backlog", nextWS(t, ws).Type, "message")

	start := time.Now()
	status, _, _ := b.do(http.MethodDelete, "/api/chat/devices/"+phone.Device.ID, owner, "", nil)
	assert.Equal(t, "revoke on B", status, http.StatusOK)
	f := within(t, 2*time.Second, "the revoked event on A", sse.Close, sse.NextEvent)
	took := time.Since(start)
	assert.True(t, f.Event == "revoked" && f.Data == `{"code":"token_revoked"}`, "revoked event %+v", f)
	assert.True(t, took <= time.Second, "A's SSE stream ended %v after the revoke on B", took)
	_, err = readWS(t.Context(), ws)
	wsTook := time.Since(start)
	var ce websocket.CloseError
	assert.True(t, errors.As(err, &ce) && ce.Code == websocket.StatusPolicyViolation && ce.Reason == "token_revoked", "WS close %v", err)
	assert.True(t, wsTook <= time.Second, "A's WebSocket closed %v after the revoke on B", wsTook)
	status, body := a.asDevice(http.MethodGet, "/api/chat/poll", phone.Token, "")
	assert.True(t, status == 401 && decodeError(t, body).Code == "token_revoked", "the token on A after the revoke: %d %s", status, body)
}

// TestDevicesFailClosed: a participants record that does not parse
// refuses every device token of the thread (401 unauthorized), answers the
// device routes 503 participants_unreadable, is never written over, and
// leaves the owner's own token working.
func TestDevicesFailClosed(t *testing.T) {
	t.Parallel()
	storetest.Run(t, testDevicesFailClosed)
}

func testDevicesFailClosed(t *testing.T, backend string) {
	e := startPush(t, pushOptions{backend: backend})
	owner := tokenN(1)
	e.mustPost(owner, "hello")
	phone := e.issueDevice(owner, `{"name":"Phone"}`)
	raw := e.backend.CorruptParticipants(t, threadN(1), phone.Device.ID)
	bad := raw()

	for _, path := range []string{"/api/chat/poll", "/api/chat/whoami", "/api/chat/devices"} {
		status, b := e.asDevice(http.MethodGet, path, phone.Token, "")
		assert.True(t, status == 401 && decodeError(t, b).Code == "unauthorized", "%s with the device's token: %d %s", path, status, b)
	}
	for _, rq := range []struct{ method, path, body string }{
		{http.MethodPost, "/api/chat/devices", `{"name":"Tablet"}`},
		{http.MethodGet, "/api/chat/devices", ""},
		{http.MethodDelete, "/api/chat/devices/" + phone.Device.ID, ""},
	} {
		status, _, b := e.do(rq.method, rq.path, owner, rq.body, nil)
		assert.True(t, status == 503 && decodeError(t, b).Code == "participants_unreadable", "%s %s: %d %s", rq.method, rq.path, status, b)
	}
	e.mustPost(owner, "the owner keeps working")
	assert.Equal(t, "the record's bytes", string(raw()), string(bad))
}
