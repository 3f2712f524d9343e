package transport

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/filestore"
)

// TestGateWalksEveryRoute is the red team: it walks every route of the
// route table as each kind of principal and checks the table's promise.
// A route added to the table is walked too, so it cannot forget a
// principal: every owner route answers a participant 403 not_permitted,
// and a device is let in wherever the owner is but making devices.
func TestGateWalksEveryRoute(t *testing.T) {
	t.Parallel()
	clk := testclock.New(time.Now())
	st, err := filestore.OpenFile(t.TempDir(), filestore.FileOptions{NoFsync: true, Now: clk.Now, Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	t.Cleanup(func() { st.Close() })
	srv := NewServer(Config{Store: st, Now: clk.Now, AfterFunc: func(d time.Duration, f func()) interface{ Stop() bool } { return clk.AfterFunc(d, f) },
		TicketKey: []byte(strings.Repeat("k", 32)), Log: slog.New(slog.DiscardHandler)})
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	ctx := context.Background()

	owner := strings.Repeat("ab", 32)
	thread := chatrelay.ThreadOf(owner)
	otherOwner := strings.Repeat("cd", 32)
	for _, tok := range []string{owner, otherOwner} {
		_, err := st.Append(ctx, chatrelay.ThreadOf(tok), store.NewMessage{Text: "hello"})
		assert.Success(t, err)
	}
	grant := func(thread string, role chatrelay.Role, expiresIn time.Duration) (chatrelay.Grant, string) {
		in := chatrelay.Invite{Name: string(role), Role: role, ExpiresIn: expiresIn}
		assert.Success(t, in.Check())
		g, tok := in.Grant(clk.Now())
		assert.Success(t, st.Invite(ctx, thread, g))
		return g, tok
	}
	revokedG, revoked := grant(thread, chatrelay.Commenter, time.Hour)
	_, err = st.Revoke(ctx, thread, revokedG.ID)
	assert.Success(t, err)
	_, expired := grant(thread, chatrelay.Commenter, time.Hour)
	_, elsewhere := grant(chatrelay.ThreadOf(otherOwner), chatrelay.Commenter, 2*time.Hour)
	device := func(thread string) (chatrelay.Grant, string) {
		in := chatrelay.DeviceRequest{Name: "phone", ExpiresIn: time.Hour}
		assert.Success(t, in.Check())
		g, tok := in.Grant(clk.Now())
		assert.Success(t, st.Invite(ctx, thread, g))
		return g, tok
	}
	revokedDG, revokedDevice := device(thread)
	_, err = st.Revoke(ctx, thread, revokedDG.ID)
	assert.Success(t, err)
	_, expiredDevice := device(thread)
	clk.Advance(time.Hour + time.Second) // the expired one expires; the others were made before
	_, viewer := grant(thread, chatrelay.Viewer, time.Hour)
	_, commenter := grant(thread, chatrelay.Commenter, time.Hour)
	_, phone := device(thread)
	unknown := "chp_" + strings.Repeat("Z", 43)
	unknownDevice := "chd_" + strings.Repeat("Z", 43)

	type principal struct {
		name string
		hdr  map[string]string
	}
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	principals := []principal{
		{"owner", map[string]string{"X-Chat-Token": owner}},
		{"viewer", bearer(viewer)},
		{"commenter", bearer(commenter)},
		{"revoked", bearer(revoked)},
		{"expired", bearer(expired)},
		{"unknown chp_", bearer(unknown)},
		{"another thread's participant", bearer(elsewhere)},
		{"nobody", nil},
		{"the owner's token as a Bearer", bearer(owner)},
		{"device", bearer(phone)},
		{"revoked device", bearer(revokedDevice)},
		{"expired device", bearer(expiredDevice)},
		{"unknown chd_", bearer(unknownDevice)},
	}
	// want is the gate's answer for a principal on a route of who: 0 when
	// it lets the request through.
	want := func(p string, w who) (int, chatrelay.Code) {
		bit := chatrelay.CallerCommenter
		switch p {
		case "revoked", "revoked device":
			return 401, chatrelay.TokenRevoked
		case "expired", "expired device":
			return 401, chatrelay.TokenExpired
		case "unknown chp_", "unknown chd_", "nobody", "the owner's token as a Bearer":
			return 401, chatrelay.Unauthorized
		case "owner":
			bit = chatrelay.CallerOwner
		case "device":
			bit = chatrelay.CallerDevice
		case "viewer":
			bit = chatrelay.CallerViewer
		}
		if chatrelay.Callers(w)&bit == 0 {
			return 403, chatrelay.NotPermitted
		}
		return 0, ""
	}
	// The table's promise, as the contract words it.
	assert.Equal(t, "making devices is the owner's token's alone", whoOfRoute(srv, "POST "+chatrelay.PathDevices), ownerOnly)
	for _, key := range []string{"POST " + chatrelay.PathRespond, "GET " + chatrelay.PathDevices, "DELETE " + chatrelay.PathDevice,
		"POST " + chatrelay.PathParticipants, "GET " + chatrelay.PathAudit} {
		assert.Equal(t, key+": the owner, on any device", whoOfRoute(srv, key), owners)
	}
	for _, rt := range srv.routeTable() {
		path := strings.ReplaceAll(rt.pattern, "{id}", "p_00000000")
		for _, p := range principals {
			t.Run(rt.method+" "+path+" as "+p.name, func(t *testing.T) {
				req, err := http.NewRequest(rt.method, ts.URL+path, strings.NewReader("{}"))
				assert.Success(t, err)
				for k, v := range p.hdr {
					req.Header.Set(k, v)
				}
				resp, err := http.DefaultClient.Do(req)
				assert.Success(t, err)
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var eb struct{ Code chatrelay.Code }
				json.Unmarshal(body, &eb)
				status, code := want(p.name, rt.who)
				if status == 0 {
					assert.True(t, resp.StatusCode != 401 && resp.StatusCode != 403, "%s as %s: refused by the gate: %d %s", path, p.name, resp.StatusCode, body)
					return
				}
				assert.Equal(t, "status "+string(body), resp.StatusCode, status)
				assert.Equal(t, "code", eb.Code, code)
			})
		}
	}
	// Another thread's participant acts on its own thread, never this one.
	req, _ := http.NewRequest(http.MethodGet, ts.URL+"/api/chat/poll", nil)
	req.Header.Set("Authorization", "Bearer "+elsewhere)
	resp, err := http.DefaultClient.Do(req)
	assert.Success(t, err)
	var page struct{ Thread string }
	assert.Success(t, json.NewDecoder(resp.Body).Decode(&page))
	resp.Body.Close()
	assert.Equal(t, "the other participant's thread", page.Thread, chatrelay.ThreadOf(otherOwner))

	// Every refusal of a grant's token is in the thread's audit.
	events, err := st.AuditLog(ctx, thread)
	assert.Success(t, err)
	refused := map[chatrelay.Code]int{}
	for _, ev := range events {
		if strings.HasPrefix(ev.Event, "device_") {
			assert.True(t, chatrelay.ValidDeviceID(ev.Device) && ev.Participant == "" && ev.Code == "", "a device's audit event %+v", ev)
			continue
		}
		assert.True(t, chatrelay.ValidParticipantID(ev.Participant) && (ev.IP != "" || ev.Event == chatrelay.AuditExpired), "audit event %+v", ev)
		if ev.Event == chatrelay.AuditRefused {
			refused[ev.Code]++
		}
	}
	assert.True(t, refused[chatrelay.TokenRevoked] > 0 && refused[chatrelay.TokenExpired] > 0 && refused[chatrelay.NotPermitted] > 0,
		"refusals audited: %v", refused)
}

// whoOfRoute is the gate's who of the route key.
func whoOfRoute(srv *Server, key string) who {
	for _, rt := range srv.routeTable() {
		if rt.row.Key() == key {
			return rt.who
		}
	}
	return 0
}
