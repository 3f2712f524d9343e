package transport_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

// invited is the 201 of an invite.
type invited struct {
	Success     bool                  `json:"success"`
	Participant chatrelay.Participant `json:"participant"`
	Token       string                `json:"token"`
	Link        string                `json:"link"`
	QR          string                `json:"qr"`
}

func (e *pushEnv) invite(owner, body string) invited {
	e.t.Helper()
	status, _, b := e.do(http.MethodPost, "/api/chat/participants", owner, body, nil)
	assert.Equal(e.t, "invite status "+string(b), status, http.StatusCreated)
	var in invited
	assert.Success(e.t, json.Unmarshal(b, &in))
	return in
}

func bearer(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

// asParticipant sends a request with a share token.
func (e *pushEnv) asParticipant(method, path, tok, body string) (int, []byte) {
	e.t.Helper()
	status, _, b := e.do(method, path, "", body, bearer(tok))
	return status, b
}

// TestParticipantReadsTheSchema: a participant's Bearer token works on
// the schema routes (contract Part 3), a viewer's as well as a
// commenter's: the same bytes as without a token.
func TestParticipantReadsTheSchema(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{})
	owner := tokenN(1)
	e.mustPost(owner, "hello")
	for _, body := range []string{`{"name":"Alex"}`, `{"name":"Vi","role":"viewer"}`} {
		p := e.invite(owner, body)
		for path, want := range map[string][]byte{"/api/schema.json": chatrelay.Schema(), "/api/limits.json": nil} {
			status, b := e.asParticipant(http.MethodGet, path, p.Token, "")
			assert.Equal(t, path+" as "+body, status, http.StatusOK)
			if want == nil {
				_, _, want = e.do(http.MethodGet, path, "", "", nil)
			}
			assert.Equal(t, path+" as "+body+": the body", string(b), string(want))
		}
	}
}

// TestInviteAndManage: invite, list, whoami, revoke and audit as the
// contract says, with every refusal's code.
func TestInviteAndManage(t *testing.T) {
	t.Parallel()
	storetest.Run(t, testInviteAndManage)
}

func testInviteAndManage(t *testing.T, backend string) {
	e := startPush(t, pushOptions{backend: backend, config: func(c *transport.Config) {
		c.Trusted = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	}})
	owner := tokenN(1)
	status, _, b := e.do(http.MethodPost, "/api/chat/participants", owner, `{"name":"Alex"}`, nil)
	assert.True(t, status == 404 && decodeError(t, b).Code == "not_found", "invite into an empty thread: %d %s", status, b)
	e.mustPost(owner, "hello")

	alex := e.invite(owner, `{"name":"Alex","role":"commenter","kind":"human","expires_in":86400,"cap":5}`)
	assert.True(t, chatrelay.ValidShareToken(alex.Token), "token %q", alex.Token)
	assert.Equal(t, "link", alex.Link, e.ts.URL+"/p#"+alex.Token)
	assert.True(t, strings.HasPrefix(alex.QR, "data:image/png;base64,"), "qr %.40s", alex.QR)
	p := alex.Participant
	assert.True(t, chatrelay.ValidParticipantID(p.ID) && p.Name == "Alex" && p.Role == "commenter" && p.Kind == "human" && p.Cap == 5 &&
		p.State == "active" && p.Sent == 0 && p.ExpiresAt-p.CreatedAt == 86400_000, "participant %+v", p)
	bo := e.invite(owner, `{"name":"Bo","role":"viewer","kind":"agent"}`)
	assert.Equal(t, "defaults", [2]any{bo.Participant.Cap, bo.Participant.ExpiresAt - bo.Participant.CreatedAt}, [2]any{50, int64(7 * 24 * 3600_000)})
	// Behind a trusted proxy that says https, the link is https.
	_, _, b = e.do(http.MethodPost, "/api/chat/participants", owner, `{"name":"Cy"}`, map[string]string{"X-Forwarded-Proto": "https"})
	var cy invited
	assert.Success(t, json.Unmarshal(b, &cy))
	assert.True(t, strings.HasPrefix(cy.Link, "https://"), "link behind a proxy: %s", cy.Link)

	status, _, b = e.do(http.MethodGet, "/api/chat/participants", owner, "", nil)
	assert.Equal(t, "list", status, http.StatusOK)
	var list struct{ Participants []chatrelay.Participant }
	assert.Success(t, json.Unmarshal(b, &list))
	assert.Equal(t, "newest first", []string{list.Participants[0].Name, list.Participants[1].Name, list.Participants[2].Name}, []string{"Cy", "Bo", "Alex"})
	assert.True(t, !strings.Contains(string(b), alex.Token) && !strings.Contains(string(b), chatrelay.DigestOf(alex.Token)), "the list shows a token or digest")

	status, wb := e.asParticipant(http.MethodGet, "/api/chat/whoami", bo.Token, "")
	assert.Equal(t, "whoami", status, http.StatusOK)
	var who struct {
		Thread       string
		Role         string
		Participant  *chatrelay.Participant
		Participants []map[string]string
	}
	assert.Success(t, json.Unmarshal(wb, &who))
	assert.True(t, who.Thread == threadN(1) && who.Role == "viewer" && who.Participant.ID == bo.Participant.ID && len(who.Participants) == 3, "whoami %s", wb)
	status, _, wb = e.do(http.MethodGet, "/api/chat/whoami", owner, "", nil)
	assert.True(t, status == 200 && strings.Contains(string(wb), `"role":"owner","participant":null`), "owner's whoami %s", wb)

	status, _, b = e.do(http.MethodDelete, "/api/chat/participants/"+alex.Participant.ID, owner, "", nil)
	assert.True(t, status == 200 && strings.Contains(string(b), `"state":"revoked"`), "revoke: %d %s", status, b)
	status2, _, b2 := e.do(http.MethodDelete, "/api/chat/participants/"+alex.Participant.ID, owner, "", nil)
	assert.True(t, status2 == 200 && string(b2) == string(b), "revoking again: %d %s", status2, b2)
	status, _, b = e.do(http.MethodDelete, "/api/chat/participants/p_00000000", owner, "", nil)
	assert.True(t, status == 404 && decodeError(t, b).Code == "not_found", "revoke unknown: %d %s", status, b)
	status, b = e.asParticipant(http.MethodGet, "/api/chat/poll", alex.Token, "")
	assert.True(t, status == 401 && decodeError(t, b).Code == "token_revoked", "a revoked token: %d %s", status, b)

	status, _, b = e.do(http.MethodGet, "/api/chat/participants/audit", owner, "", nil)
	assert.Equal(t, "audit", status, http.StatusOK)
	var audit struct{ Events []chatrelay.AuditEvent }
	assert.Success(t, json.Unmarshal(b, &audit))
	var events []string
	for _, ev := range audit.Events {
		events = append(events, ev.Event+":"+string(ev.Code))
	}
	assert.Equal(t, "audit events", events, []string{"issued:", "issued:", "issued:", "first_use:", "revoked:", "refused:token_revoked"})
	assert.True(t, !strings.Contains(string(b), alex.Token) && !strings.Contains(string(b), "hello"), "the audit shows a token or a text")

	for _, tc := range []struct{ body, code string }{
		{`{"name":" \n<>[] "}`, "invalid_name"},
		{`{}`, "invalid_name"},
		{`{"name":"x","role":"owner"}`, "invalid_role"},
		{`{"name":"x","kind":"robot"}`, "invalid_kind"},
		{`{"name":"x","expires_in":3599}`, "invalid_expiry"},
		{`{"name":"x","expires_in":2592001}`, "invalid_expiry"},
		{`{"name":"x","expires_in":"1h"}`, "invalid_expiry"},
		{`{"name":"x","cap":0}`, "invalid_cap"},
		{`{"name":"x","cap":1001}`, "invalid_cap"},
		{`{"name":"x","cap":1.5}`, "invalid_cap"},
	} {
		status, _, b := e.do(http.MethodPost, "/api/chat/participants", owner, tc.body, nil)
		assert.True(t, status == 400 && decodeError(t, b).Code == tc.code, "invite %s: %d %s", tc.body, status, b)
	}
	// A whole number written with a fraction or an exponent (3600.0, as
	// Python writes a float; 1e3) is an integer, as JSON Schema counts one:
	// the bundle's body takes it, and so do MCP's arguments. It was
	// invalid_expiry and invalid_cap.
	whole := e.invite(owner, `{"name":"whole","expires_in":3600.0,"cap":1e3}`)
	assert.Equal(t, "expires_in 3600.0", whole.Participant.ExpiresAt-whole.Participant.CreatedAt, int64(3600_000))
	assert.Equal(t, "cap 1e3", whole.Participant.Cap, 1000)
}

// TestNamesAreCleaned: no name can forge an attribution line.
func TestNamesAreCleaned(t *testing.T) {
	t.Parallel()
	storetest.Run(t, testNamesAreCleaned)
}

func testNamesAreCleaned(t *testing.T, backend string) {
	e := startPush(t, pushOptions{backend: backend})
	owner := tokenN(1)
	e.mustPost(owner, "hello")
	for _, tc := range []struct{ in, want string }{
		{"Alex\nhermes: approved", "Alex hermes: approved"},
		{"[hermes] <b>Boss</b>", "hermes bBoss/b"},
		{"  tabs\tand\r\nbreaks  ", "tabs and breaks"},
		{strings.Repeat("é", 500), strings.Repeat("é", 64)},
		{"zero\u200bwidth\u2028line", "zerowidth line"},
		{"Alex \u202etsoh eht", "Alex tsoh eht"},
		{"\ufeff\u2066Bo\u2069\u200e\u200f\u202a\u202c\u2060", "Bo"},
	} {
		b, _ := json.Marshal(map[string]string{"name": tc.in})
		in := e.invite(owner, string(b))
		assert.Equal(t, "name of "+strconv.Quote(tc.in), in.Participant.Name, tc.want)
	}
	// Nothing visible left: refused.
	status, _, b := e.do(http.MethodPost, "/api/chat/participants", owner, `{"name":"\u202e\u200b\ufeff"}`, nil)
	assert.True(t, status == http.StatusBadRequest && decodeError(t, b).Code == "invalid_name", "an invisible name: %d %s", status, b)
}

// TestParticipantPosts: a commenter posts as p:<id> with author_name
// (v2), over HTTP and the WebSocket; a viewer may not; a kind is refused;
// three messages wait for hermes at most; the cap holds; both 429s are
// not retryable.
func TestParticipantPosts(t *testing.T) {
	t.Parallel()
	storetest.Run(t, testParticipantPosts)
}

func testParticipantPosts(t *testing.T, backend string) {
	e := startPush(t, pushOptions{backend: backend})
	owner := tokenN(1)
	e.mustPost(owner, "hello")
	alex := e.invite(owner, `{"name":"Alex","cap":4}`)
	viewer := e.invite(owner, `{"name":"Vi","role":"viewer"}`)

	status, b := e.asParticipant(http.MethodPost, "/api/chat/post", alex.Token, `{"text":"looks good"}`)
	assert.Equal(t, "commenter posts "+string(b), status, http.StatusCreated)
	status, b = e.asParticipant(http.MethodPost, "/api/chat/post", alex.Token, `{"text":"x","kind":"agent"}`)
	assert.True(t, status == 400 && decodeError(t, b).Code == "invalid_kind", "a kind: %d %s", status, b)
	status, b = e.asParticipant(http.MethodPost, "/api/chat/post", viewer.Token, `{"text":"x"}`)
	assert.True(t, status == 403 && decodeError(t, b).Code == "not_permitted", "a viewer posts: %d %s", status, b)
	ws, _, err := e.dialWS(t.Context(), "/api/chat/ws", "", http.Header{"Authorization": {"Bearer " + alex.Token}})
	assert.Success(t, err)
	defer ws.CloseNow()
	assert.Equal(t, "ready", nextWS(t, ws).Type, "ready")
	answer, _ := wsAnswer(t, ws, map[string]any{"type": "post", "text": "over the socket"})
	assert.True(t, answer.Type == "posted", "WS post: %s", answer.raw)
	status, _ = e.asParticipant(http.MethodPost, "/api/chat/post", alex.Token, `{"text":"third"}`)
	assert.Equal(t, "third", status, http.StatusCreated)
	status, b = e.asParticipant(http.MethodPost, "/api/chat/post", alex.Token, `{"text":"fourth"}`)
	eb := decodeError(t, b)
	assert.True(t, status == 429 && eb.Code == "too_many_messages" && !eb.Retryable, "fourth before hermes: %d %s", status, b)
	_, err = e.store.Append(t.Context(), threadN(1), store.NewMessage{Author: chatrelay.Hermes, Text: "answered", MustExist: true})
	assert.Success(t, err)
	status, _ = e.asParticipant(http.MethodPost, "/api/chat/post", alex.Token, `{"text":"fourth"}`)
	assert.Equal(t, "fourth after hermes", status, http.StatusCreated)
	status, b = e.asParticipant(http.MethodPost, "/api/chat/post", alex.Token, `{"text":"fifth"}`)
	eb = decodeError(t, b)
	assert.True(t, status == 429 && eb.Code == "cap_reached" && !eb.Retryable, "past the cap: %d %s", status, b)

	page := e.pollV2(owner, 0)
	var mine []v2msg
	for _, m := range page.Messages {
		if m.Author == "p:"+alex.Participant.ID {
			mine = append(mine, m)
		}
	}
	assert.Equal(t, "the commenter's messages", len(mine), 4)
	_, _, b = e.do(http.MethodGet, "/api/chat/poll?v=2", owner, "", nil)
	assert.True(t, strings.Contains(string(b), `"author_name":"Alex"`), "v2 carries author_name: %s", b)
	_, _, b = e.do(http.MethodGet, "/api/chat/poll", owner, "", nil)
	assert.True(t, strings.Contains(string(b), `"author":"p:`+alex.Participant.ID+`"`) && !strings.Contains(string(b), "author_name"), "v1: %s", b)
	_, _, b = e.do(http.MethodGet, "/api/chat/participants", owner, "", nil)
	assert.True(t, strings.Contains(string(b), `"sent":4`), "sent counted: %s", b)
}

// planted holds one secret of each shape the contract names.
var planted = []string{
	"sk-proj-AbCdEfGhIjKlMnOpQrStUv123",
	"ghp_abcdefghijklmnopqrstuvwxyz0123456789",
	"github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
	"AKIAIOSFODNN7EXAMPLE",
	"xoxb-123456789012-1234567890123-AbCdEfGhIjKl",
	"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NSJ9.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk",
	"-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
	"chp_" + strings.Repeat("Q", 43),
	strings.Repeat("a1b2c3d4", 8),
	"password=hunter2hunter2",
	"https://alice:s3cr3tpass@git.example.com/x",
	// The clarified shapes (2026-12-01).
	"DB_PASSWORD=pl4nted-db-pw",
	`{"password": "pl4nted-json-pw", "user": "bob"}`,
	"redis://:pl4nted-redis-pw@127.0.0.1:6379/0",
	"xoxe-1-pl4ntedSlackRefresh",
	"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\npl4ntedPGPbody\n-----END PGP PRIVATE KEY BLOCK-----",
	"Authorization: Bearer pl4nted.bearer-token",
}

// secretLeft names a planted secret's distinctive part found in s.
func secretLeft(s string) string {
	for _, p := range []string{"AbCdEfGhIjKl", "abcdefghijklmnopqrstuvwxyz0123456789", "11ABCDEFG0123456789", "AKIAIOSFODNN7EXAMPLE",
		"123456789012-1234567890123", "dBjftJeZ4CVPmB92K27", "MIIEowIBAAKCAQEA", strings.Repeat("Q", 43), strings.Repeat("a1b2c3d4", 8),
		"hunter2hunter2", "s3cr3tpass", "pl4nted"} {
		if strings.Contains(s, p) {
			return p
		}
	}
	return ""
}

// TestParticipantsSeeRedacted: with a secret of every shape planted in a
// thread (a post, hermes's question and card), a participant's poll (v1,
// v2), SSE and WebSocket never carry one; the owner's carry all unchanged.
func TestParticipantsSeeRedacted(t *testing.T) {
	t.Parallel()
	storetest.Run(t, testParticipantsSeeRedacted)
}

func testParticipantsSeeRedacted(t *testing.T, backend string) {
	e := startPush(t, pushOptions{backend: backend})
	owner := tokenN(1)
	for _, s := range planted {
		b, _ := json.Marshal(map[string]string{"text": "here: " + s})
		status, _, body := e.do(http.MethodPost, "/api/chat/post", owner, string(b), nil)
		assert.Equal(t, "post "+string(body), status, http.StatusCreated)
	}
	e.ask(threadN(1), chatrelay.Ask{Type: chatrelay.Input, Title: planted[0], Prompt: "token: " + planted[8], Choices: []chatrelay.Choice{{Value: planted[3], Label: planted[1]}}})
	_, err := e.store.Append(t.Context(), threadN(1), store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Card: &chatrelay.Card{
		FallbackText: planted[2], Blocks: []chatrelay.Block{{Type: chatrelay.CodeBlock, Text: planted[6]}, {Type: chatrelay.LinkBlock, URL: planted[10]}}}})
	assert.Success(t, err)
	alex := e.invite(owner, `{"name":"Alex","role":"viewer"}`)

	var seen []string
	for _, path := range []string{"/api/chat/poll", "/api/chat/poll?v=2"} {
		status, b := e.asParticipant(http.MethodGet, path, alex.Token, "")
		assert.Equal(t, path, status, http.StatusOK)
		assert.Equal(t, path+" leaks in "+string(b), secretLeft(string(b)), "")
		seen = append(seen, string(b))
		_, _, ob := e.do(http.MethodGet, path, owner, "", nil)
		for _, s := range planted {
			js, _ := json.Marshal(s)
			assert.True(t, strings.Contains(string(ob), strings.Trim(string(js), `"`)), "the owner's %s lacks %q", path, s)
		}
	}
	assert.True(t, strings.Contains(seen[0], "[redacted]"), "nothing redacted: %s", seen[0])
	for _, v := range []string{"", "&v=2"} {
		s := e.mustSSE("/api/chat/stream?since=1"+v, "", bearer(alex.Token))
		ws, _, err := e.dialWS(t.Context(), "/api/chat/ws?since=1"+v, "", http.Header{"Authorization": {"Bearer " + alex.Token}})
		assert.Success(t, err)
		assert.Equal(t, "SSE ready", s.nextEvent(t).Event, "ready")
		assert.Equal(t, "WS ready", nextWS(t, ws).Type, "ready")
		for range len(planted) + 2 {
			f := s.nextEvent(t)
			assert.Equal(t, "SSE leaks "+f.Data, secretLeft(f.Data), "")
			wf := nextWS(t, ws)
			assert.Equal(t, "WS leaks "+string(wf.raw), secretLeft(string(wf.raw)), "")
		}
		// Live too.
		b, _ := json.Marshal(map[string]string{"text": "live " + planted[0]})
		e.do(http.MethodPost, "/api/chat/post", owner, string(b), nil)
		f := s.nextEvent(t)
		assert.True(t, secretLeft(f.Data) == "" && strings.Contains(f.Data, "live [redacted]"), "live SSE %s", f.Data)
		wf := nextWS(t, ws)
		assert.True(t, secretLeft(string(wf.raw)) == "" && strings.Contains(string(wf.raw), "live [redacted]"), "live WS %s", wf.raw)
		ws.CloseNow()
		s.Close()
	}
}

// TestErrorsCarryTheRedactedMessage: a refusal that carries the message
// it is about (409 client_id_conflict, too_many_reactions) carries a
// participant's view of it, over HTTP and on a WebSocket post frame:
// redacted, and without the owner's client_id; the owner's refusal
// carries the message as stored.
func TestErrorsCarryTheRedactedMessage(t *testing.T) {
	t.Parallel()
	storetest.Run(t, testErrorsCarryTheRedactedMessage)
}

func testErrorsCarryTheRedactedMessage(t *testing.T, backend string) {
	e := startPush(t, pushOptions{backend: backend})
	owner := tokenN(1)
	const clientID = "tab-owner:1"
	b, _ := json.Marshal(map[string]string{"text": "deploy with " + planted[1] + " and password=hunter2hunter2", "client_id": clientID})
	status, _, body := e.do(http.MethodPost, "/api/chat/post", owner, string(b), nil)
	assert.Equal(t, "the owner's post "+string(body), status, http.StatusCreated)
	var posted postAnswer
	assert.Success(t, json.Unmarshal(body, &posted))
	alex := e.invite(owner, `{"name":"Alex"}`)

	type refusal struct {
		Code    string          `json:"code"`
		Message json.RawMessage `json:"message"`
	}
	check := func(what string, participant bool, status int, body []byte, code string) {
		t.Helper()
		var r refusal
		assert.Success(t, json.Unmarshal(body, &r))
		assert.True(t, status == http.StatusConflict && r.Code == code && len(r.Message) > 0, "%s: %d %s, want 409 %s with the message", what, status, body, code)
		m := string(r.Message)
		if participant {
			assert.Equal(t, what+" leaks in "+m, secretLeft(m), "")
			assert.True(t, strings.Contains(m, "[redacted]"), "%s: nothing redacted in %s", what, m)
			assert.True(t, !strings.Contains(m, "client_id") && !strings.Contains(m, clientID), "%s: the participant reads the client_id: %s", what, m)
		} else {
			assert.True(t, strings.Contains(m, "hunter2hunter2") && strings.Contains(m, planted[1]) && strings.Contains(m, `"client_id":"`+clientID+`"`),
				"%s: the owner's refusal lacks the stored message: %s", what, m)
		}
	}

	// client_id_conflict, over HTTP and the WebSocket.
	conflict := map[string]string{"text": "something else", "client_id": clientID}
	b, _ = json.Marshal(conflict)
	status, body = e.asParticipant(http.MethodPost, "/api/chat/post", alex.Token, string(b))
	check("a commenter's HTTP post", true, status, body, "client_id_conflict")
	status, _, body = e.do(http.MethodPost, "/api/chat/post", owner, string(b), nil)
	check("the owner's HTTP post", false, status, body, "client_id_conflict")
	for _, participant := range []bool{true, false} {
		hdr := http.Header{"Authorization": {"Bearer " + alex.Token}}
		tok := ""
		if !participant {
			hdr, tok = nil, owner
		}
		ws, _, err := e.dialWS(t.Context(), "/api/chat/ws", tok, hdr)
		assert.Success(t, err)
		assert.Equal(t, "ready", nextWS(t, ws).Type, "ready")
		frame := map[string]string{"type": "post", "text": conflict["text"], "client_id": clientID}
		answer, _ := wsAnswer(t, ws, frame)
		assert.Equal(t, "the answer's type "+string(answer.raw), answer.Type, "error")
		check(fmt.Sprintf("a WebSocket post frame (participant %v)", participant), participant, http.StatusConflict, answer.raw, "client_id_conflict")
		ws.CloseNow()
	}

	// too_many_reactions: a commenter alone reaches the most emoji.
	react := func(i int) map[string]any {
		return map[string]any{"message_id": posted.ID, "emoji": string(rune(0x1F600 + i))}
	}
	for i := range chatrelay.LimitReactions.Max {
		b, _ = json.Marshal(react(i))
		status, body = e.asParticipant(http.MethodPost, "/api/chat/react", alex.Token, string(b))
		assert.Equal(t, "reaction "+strconv.Itoa(i)+" "+string(body), status, http.StatusOK)
	}
	b, _ = json.Marshal(react(chatrelay.LimitReactions.Max))
	status, body = e.asParticipant(http.MethodPost, "/api/chat/react", alex.Token, string(b))
	check("a commenter's reaction past the most", true, status, body, "too_many_reactions")
	status, _, body = e.do(http.MethodPost, "/api/chat/react", owner, string(b), nil)
	check("the owner's reaction past the most", false, status, body, "too_many_reactions")
}

// TestRevokeEndsStreamsWithinASecond: a revoke over HTTP, by another store
// of the same data, or by `chatrelay share revoke` in another process ends
// the participant's SSE, WebSocket and ticket streams within a second
// (each measured; for the CLI, from when the command started), while the
// owner's and another participant's stay open.
func TestRevokeEndsStreamsWithinASecond(t *testing.T) {
	t.Parallel()
	storetest.Run(t, testRevokeEndsStreamsWithinASecond)
}

func testRevokeEndsStreamsWithinASecond(t *testing.T, backend string) {
	bin := mustBinary(t)
	for _, by := range []string{"http", "another store", "the CLI"} {
		t.Run(by, func(t *testing.T) {
			t.Parallel()
			e := startPush(t, pushOptions{backend: backend})
			owner := tokenN(1)
			e.mustPost(owner, "hello")
			alex := e.invite(owner, `{"name":"Alex"}`)
			bo := e.invite(owner, `{"name":"Bo"}`)
			status, tb := e.asParticipant(http.MethodPost, "/api/chat/ticket", alex.Token, "")
			assert.Equal(t, "ticket", status, http.StatusCreated)
			var tk struct{ Ticket string }
			assert.Success(t, json.Unmarshal(tb, &tk))

			sse := e.mustSSE("/api/chat/stream", "", bearer(alex.Token))
			ticketSSE := e.mustSSE("/api/chat/stream?ticket="+tk.Ticket, "", nil)
			ws, _, err := e.dialWS(t.Context(), "/api/chat/ws", "", http.Header{"Authorization": {"Bearer " + alex.Token}})
			assert.Success(t, err)
			defer ws.CloseNow()
			ownerSSE := e.mustSSE("/api/chat/stream", owner, nil)
			boSSE := e.mustSSE("/api/chat/stream", "", bearer(bo.Token))
			for _, s := range []*sseStream{sse, ticketSSE, ownerSSE, boSSE} {
				assert.Equal(t, "ready", s.nextEvent(t).Event, "ready")
				assert.Equal(t, "the backlog", s.nextEvent(t).Event, "message")
			}
			assert.Equal(t, "ws ready", nextWS(t, ws).Type, "ready")
			assert.Equal(t, "ws backlog", nextWS(t, ws).Type, "message")

			start := time.Now()
			if by == "http" {
				status, _, _ := e.do(http.MethodDelete, "/api/chat/participants/"+alex.Participant.ID, owner, "", nil)
				assert.Equal(t, "revoke", status, http.StatusOK)
			} else if by == "another store" {
				other := e.backend.Another(t, storetest.Options{})
				_, err := other.Store.(store.Participants).Revoke(t.Context(), threadN(1), alex.Participant.ID)
				assert.Success(t, err)
			} else {
				args := append([]string{"share", "revoke", threadN(1), alex.Participant.ID, "--fsync", "never"}, e.backend.CLIArgs()...)
				cmd := exec.CommandContext(t.Context(), bin, args...)
				cmd.Env = append(os.Environ(), "CHATRELAY_DATA=", "CHATRELAY_STORE=")
				out, err := cmd.CombinedOutput()
				assert.True(t, err == nil && strings.Contains(string(out), "revoked Alex"), "chatrelay share revoke: %v %s", err, out)
				start = e.revokedAt(t, threadN(1), alex.Participant.ID) // not the process's start: not the server's to pay
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
			assert.Equal(t, "WS close", websocket.CloseStatus(err), websocket.StatusPolicyViolation)
			var ce websocket.CloseError
			assert.True(t, errors.As(err, &ce) && ce.Reason == "token_revoked", "close reason %v", err)
			assert.True(t, took <= time.Second, "the WebSocket closed %v after the revoke", took)

			// The others stay open: a new message reaches them.
			e.mustPost(owner, "still here")
			assert.Equal(t, "owner's stream", ownerSSE.nextEvent(t).Event, "message")
			assert.Equal(t, "Bo's stream", boSSE.nextEvent(t).Event, "message")
			// The ticket is refused from now on.
			_, resp, b, err := e.openSSE(t.Context(), "/api/chat/stream?ticket="+tk.Ticket, "", nil)
			assert.Success(t, err)
			assert.True(t, resp.StatusCode == 401 && decodeError(t, b).Code == "token_revoked", "the ticket after the revoke: %d %s", resp.StatusCode, b)
		})
	}
}

// TestExpiryEndsStreams: with a settable clock, a participant's streams end
// with token_expired within a second of expires_at, and its token is then
// refused with token_expired.
func TestExpiryEndsStreams(t *testing.T) {
	t.Parallel()
	storetest.Run(t, testExpiryEndsStreams)
}

func testExpiryEndsStreams(t *testing.T, backend string) {
	clk := testclock.New(time.Now())
	e := startPush(t, pushOptions{backend: backend, store: storetest.Options{Now: clk.Now}, config: func(c *transport.Config) {
		c.Now = clk.Now
		c.AfterFunc = func(d time.Duration, f func()) interface{ Stop() bool } { return clk.AfterFunc(d, f) }
	}})
	owner := tokenN(1)
	e.mustPost(owner, "hello")
	alex := e.invite(owner, `{"name":"Alex","expires_in":3600}`)
	sse := e.mustSSE("/api/chat/stream", "", bearer(alex.Token))
	assert.Equal(t, "ready", sse.nextEvent(t).Event, "ready")
	assert.Equal(t, "the backlog", sse.nextEvent(t).Event, "message")
	ws, _, err := e.dialWS(t.Context(), "/api/chat/ws", "", http.Header{"Authorization": {"Bearer " + alex.Token}})
	assert.Success(t, err)
	defer ws.CloseNow()
	assert.Equal(t, "ws ready", nextWS(t, ws).Type, "ready")

	clk.Advance(3599 * time.Second)
	e.mustPost(owner, "a second before")
	assert.Equal(t, "still open", sse.nextEvent(t).Event, "message")
	start := time.Now()
	clk.Advance(time.Second)
	f := within(t, 2*time.Second, "the expired event", sse.Close, sse.NextEvent)
	for f.Event == "message" {
		f = within(t, 2*time.Second, "the expired event", sse.Close, sse.NextEvent)
	}
	assert.True(t, f.Event == "revoked" && f.Data == `{"code":"token_expired"}`, "event %+v", f)
	assert.True(t, time.Since(start) <= time.Second, "ended %v after expires_at", time.Since(start))
	for {
		wf, err := readWS(t.Context(), ws)
		if err != nil {
			var ce websocket.CloseError
			assert.True(t, errors.As(err, &ce) && ce.Code == websocket.StatusPolicyViolation && ce.Reason == "token_expired", "WS %v", err)
			break
		}
		assert.Equal(t, "only messages before the close", wf.Type, "message")
	}
	status, b := e.asParticipant(http.MethodGet, "/api/chat/poll", alex.Token, "")
	assert.True(t, status == 401 && decodeError(t, b).Code == "token_expired", "after expiry: %d %s", status, b)
}

// TestParticipantsFailClosed: a participants record that does not parse
// refuses every share token of the thread (401 unauthorized), answers the
// owner's participant routes 503 participants_unreadable, is never
// written over whatever route is tried, and leaves the thread's messages
// working for the owner.
func TestParticipantsFailClosed(t *testing.T) {
	t.Parallel()
	storetest.Run(t, testParticipantsFailClosed)
}

func testParticipantsFailClosed(t *testing.T, backend string) {
	e := startPush(t, pushOptions{backend: backend})
	owner := tokenN(1)
	e.mustPost(owner, "hello")
	alex := e.invite(owner, `{"name":"Alex"}`)
	raw := e.backend.CorruptParticipants(t, threadN(1), alex.Participant.ID)
	bad := raw()

	for _, path := range []string{"/api/chat/poll", "/api/chat/whoami", "/api/chat/stream"} {
		status, b := e.asParticipant(http.MethodGet, path, alex.Token, "")
		assert.True(t, status == 401 && decodeError(t, b).Code == "unauthorized", "%s with the token: %d %s", path, status, b)
	}
	for _, rq := range []struct{ method, path, body string }{
		{http.MethodPost, "/api/chat/participants", `{"name":"Bo"}`},
		{http.MethodGet, "/api/chat/participants", ""},
		{http.MethodDelete, "/api/chat/participants/" + alex.Participant.ID, ""},
		{http.MethodGet, "/api/chat/participants/audit", ""},
	} {
		status, _, b := e.do(rq.method, rq.path, owner, rq.body, nil)
		assert.True(t, status == 503 && decodeError(t, b).Code == "participants_unreadable", "%s %s: %d %s", rq.method, rq.path, status, b)
	}
	e.mustPost(owner, "the owner keeps working")
	assert.Equal(t, "owner's poll", len(e.poll(owner, 0).Messages), 2)
	assert.Equal(t, "the record's bytes", string(raw()), string(bad))
}

// TestUnusedExpiredLinkEndsWithItsEvent: a share link nobody uses after
// its expiry (no stream open at it, no request with its token since)
// still ends with its audit "expired" and its participant.revoked webhook
// (contract Part 5: a grant's revoke or expiry), once, when the server's
// sweep looks at the thread's grants (NoteExpiries). Before, only a
// request or a stream noticed an expiry: such a link stayed active for a
// webhook receiver, with no event ever, until it was dropped 30 days later.
func TestUnusedExpiredLinkEndsWithItsEvent(t *testing.T) {
	t.Parallel()
	storetest.Run(t, testUnusedExpiredLinkEndsWithItsEvent)
}

func testUnusedExpiredLinkEndsWithItsEvent(t *testing.T, backend string) {
	clk := testclock.New(time.Now())
	const dest = "0123456789abcdef"
	e := startPush(t, pushOptions{backend: backend, store: storetest.Options{Now: clk.Now, Webhooks: []string{dest}}, config: func(c *transport.Config) {
		c.Now = clk.Now
		c.AfterFunc = func(d time.Duration, f func()) interface{ Stop() bool } { return clk.AfterFunc(d, f) }
	}})
	owner := tokenN(1)
	e.mustPost(owner, "hello")
	alex := e.invite(owner, `{"name":"Alex","expires_in":3600}`)
	e.invite(owner, `{"name":"Bo","expires_in":86400}`) // not expired: no event
	clk.Advance(2 * time.Hour)
	assert.Success(t, e.srv.NoteExpiries(t.Context()))
	assert.Success(t, e.srv.NoteExpiries(t.Context())) // noticed once

	_, _, b := e.do(http.MethodGet, "/api/chat/participants/audit", owner, "", nil)
	var audit struct {
		Events []chatrelay.AuditEvent `json:"events"`
	}
	assert.Success(t, json.Unmarshal(b, &audit))
	var expired []string
	for _, ev := range audit.Events {
		if ev.Event == chatrelay.AuditExpired {
			expired = append(expired, ev.Participant)
		}
	}
	assert.Equal(t, "the audit's expired events", expired, []string{alex.Participant.ID})

	assert.Equal(t, "webhook events", queuedEvents(t, e, dest, clk.Now()), []string{store.EventMessageCreated + "  ", store.EventParticipantRevoked + " Alex expired"})
}

// TestRemovedThreadsExpiredLinkEndsWithItsEvent: a share link that expired
// unnoticed in a thread whose messages all expired still ends with its
// participant.revoked webhook at the sweep that removes the thread. The
// sweep removed the thread (its grants with it) before it looked for
// expiries, so such a link never had its event (lifeprobe).
func TestRemovedThreadsExpiredLinkEndsWithItsEvent(t *testing.T) {
	t.Parallel()
	storetest.Run(t, testRemovedThreadsExpiredLinkEndsWithItsEvent)
}

func testRemovedThreadsExpiredLinkEndsWithItsEvent(t *testing.T, backend string) {
	clk := testclock.New(time.Now())
	const dest = "0123456789abcdef"
	e := startPush(t, pushOptions{backend: backend, store: storetest.Options{Now: clk.Now, Webhooks: []string{dest}}, config: func(c *transport.Config) {
		c.Now = clk.Now
		c.AfterFunc = func(d time.Duration, f func()) interface{ Stop() bool } { return clk.AfterFunc(d, f) }
	}})
	owner := tokenN(1)
	e.mustPost(owner, "hello")
	e.invite(owner, `{"name":"Alex","expires_in":3600}`)
	clk.Advance(chatrelay.DefaultRetainAge + time.Hour)
	stats, err := e.srv.Sweep(t.Context())
	assert.Success(t, err)
	assert.Equal(t, "threads removed", stats.ThreadsRemoved, 1)

	assert.Equal(t, "webhook events", queuedEvents(t, e, dest, clk.Now()), []string{store.EventMessageCreated + "  ", store.EventParticipantRevoked + " Alex expired"})
}

// TestUploadAcrossItsThreadsRemoval: a participant's upload whose bytes
// were still arriving when the sweep removed its thread, and the owner's
// next post made the thread again, is refused (401 unauthorized: the link
// is gone with the old thread), and the new thread's audit names nothing
// of the old one. It was stored in the new thread, and audited there as
// the old participant's upload (lifeprobe).
func TestUploadAcrossItsThreadsRemoval(t *testing.T) {
	t.Parallel()
	storetest.Run(t, testUploadAcrossItsThreadsRemoval)
}

func testUploadAcrossItsThreadsRemoval(t *testing.T, backend string) {
	clk := testclock.New(time.Now())
	e := startPush(t, pushOptions{backend: backend, store: storetest.Options{Now: clk.Now, Retention: chatrelay.Retention{Age: time.Minute}}, config: func(c *transport.Config) {
		c.Now = clk.Now
		c.AfterFunc = func(d time.Duration, f func()) interface{ Stop() bool } { return clk.AfterFunc(d, f) }
	}})
	owner := tokenN(1)
	thread := chatrelay.ThreadOf(owner)
	e.mustPost(owner, "the old conversation")
	alex := e.invite(owner, `{"name":"Alex"}`)

	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, e.url("/api/chat/attachments"), pr)
	assert.Success(t, err)
	req.Header.Set("Authorization", "Bearer "+alex.Token)
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set("X-Filename", "slow.txt")
	type answer struct {
		status int
		body   []byte
		err    error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := e.client.Do(req)
		if err != nil {
			done <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		done <- answer{resp.StatusCode, b, err}
	}()
	_, err = pw.Write(bytes.Repeat([]byte("x"), 300<<10)) // past a Redis staging chunk (256 KiB)
	assert.Success(t, err)
	assert.Eventually(t, 10*time.Second, "the upload is being received", func() bool { // its link was accepted
		if e.dir != "" {
			tmps, _ := filepath.Glob(filepath.Join(e.dir, "chat", ".*.upload.tmp-*"))
			return len(tmps) > 0
		}
		keys, _ := e.backend.ThreadClient(t, thread).Keys(t.Context(), e.backend.KeyPrefix(thread)+"{"+thread+"}:att:up:*").Result()
		return len(keys) > 0
	})
	clk.Advance(2 * time.Minute)
	stats, err := e.srv.Sweep(t.Context())
	assert.Success(t, err)
	assert.Equal(t, "threads removed", stats.ThreadsRemoved, 1)
	e.mustPost(owner, "the thread made again")
	_, err = pw.Write([]byte("the rest"))
	assert.Success(t, err)
	assert.Success(t, pw.Close())
	a := <-done
	assert.Success(t, a.err)
	assert.Equal(t, "the upload's status "+string(a.body), a.status, http.StatusUnauthorized)
	assert.Equal(t, "its code", decodeError(t, a.body).Code, "unauthorized")

	_, _, b := e.do(http.MethodGet, "/api/chat/participants/audit", owner, "", nil)
	assert.Equal(t, "the new thread's audit", string(b), `{"success":true,"events":[]}`)
}

// queuedEvents are the webhook events queued for dest by now, each as
// "TYPE NAME STATE" (the participant's, blank for a message's), sorted.
func queuedEvents(t *testing.T, e *pushEnv, dest string, now time.Time) []string {
	t.Helper()
	due, err := e.backend.Outbox.Take(t.Context(), dest, now, 100)
	assert.Success(t, err)
	var got []string
	for _, d := range due {
		var p chatrelay.Participant
		if d.Type != store.EventMessageCreated {
			assert.Success(t, json.Unmarshal(d.Participant, &p))
		}
		got = append(got, d.Type+" "+p.Name+" "+string(p.State))
	}
	slices.Sort(got)
	return got
}
