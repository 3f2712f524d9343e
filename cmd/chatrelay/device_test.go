package main

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/transport"
)

// TestDevice: `chatrelay device` makes a device link on either store and
// prints it once; the link's token works on a running server as the
// owner; `device list` shows it (never its token) and `device revoke`
// revokes it, after which the server answers it 401 token_revoked. The
// token is in no file of the data folder, no Redis key or value, and no
// log of the server or the CLI: only its digest is stored.
func TestDevice(t *testing.T) {
	for _, backend := range storetest.Backends() {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			b := ownBackend(t, backend)
			serverLog := &lockedBuffer{}
			log := slog.New(slog.NewTextHandler(serverLog, &slog.HandlerOptions{Level: slog.LevelDebug}))
			hs := httptest.NewServer(transport.NewServer(transport.Config{Store: b.Store, Log: log}))
			t.Cleanup(hs.Close)
			owner := strings.Repeat("ab", 32)
			thread := chatrelay.ThreadOf(owner)

			r := runCLI(t, nil, "", append([]string{"device", thread, "--name", "Phone"}, b.CLIArgs()...)...)
			assert.Equal(t, "a device of a thread with no message", chatrelay.CodeOf(r.err), chatrelay.NotFound)
			req, _ := http.NewRequest(http.MethodPost, hs.URL+"/api/chat/post", strings.NewReader(`{"text":"hello"}`))
			req.Header.Set("X-Chat-Token", owner)
			resp, err := http.DefaultClient.Do(req)
			assert.Success(t, err)
			resp.Body.Close()

			r = runCLI(t, nil, "", append([]string{"device", thread, "--name", "Phone", "--expires-in", "30d", "--public-url", "https://chat.example.com/relay/"}, b.CLIArgs()...)...)
			assert.Success(t, r.err)
			m := regexp.MustCompile(`\(d_([0-9a-f]{8})\), until .*\n\n  (https://chat\.example\.com/relay/d#(chd_[A-Za-z0-9_-]{43}))\n`).FindStringSubmatch(r.stdout)
			assert.True(t, m != nil, "chatrelay device printed %q", r.stdout)
			id, token := "d_"+m[1], m[3]
			assert.Equal(t, "the token is printed once", strings.Count(r.stdout+r.stderr, token), 1)

			poll := func() (int, string) {
				req, _ := http.NewRequest(http.MethodGet, hs.URL+"/api/chat/poll", nil)
				req.Header.Set("Authorization", "Bearer "+token)
				resp, err := http.DefaultClient.Do(req)
				assert.Success(t, err)
				defer resp.Body.Close()
				var e struct{ Code string }
				json.NewDecoder(resp.Body).Decode(&e)
				return resp.StatusCode, e.Code
			}
			status, _ := poll()
			assert.Equal(t, "the device's poll", status, http.StatusOK)

			r = runCLI(t, nil, "", append([]string{"device", "list", thread, "--json"}, b.CLIArgs()...)...)
			assert.Success(t, r.err)
			var list struct {
				Devices []chatrelay.Device `json:"devices"`
			}
			assert.Success(t, json.Unmarshal([]byte(r.stdout), &list))
			assert.True(t, len(list.Devices) == 1 && list.Devices[0].ID == id && list.Devices[0].State == chatrelay.Active &&
				list.Devices[0].LastSeen > 0 && list.Devices[0].ExpiresAt-list.Devices[0].CreatedAt == 30*24*3600_000, "device list: %s", r.stdout)
			assert.True(t, !strings.Contains(r.stdout, token), "the list shows the token")

			for _, bad := range [][]string{
				{"device", thread, "--name", "x", "--expires-in", "59m"},
				{"device", thread, "--name", "x", "--expires-in", "366d"},
			} {
				r := runCLI(t, nil, "", append(bad, b.CLIArgs()...)...)
				assert.Equal(t, strings.Join(bad, " "), chatrelay.CodeOf(r.err), chatrelay.InvalidExpiry)
			}
			r = runCLI(t, nil, "", append([]string{"device", "revoke", thread}, b.CLIArgs()...)...)
			assert.Equal(t, "revoke without an id: exit", exitCode(r.err), 2)

			r = runCLI(t, nil, "", append([]string{"device", "revoke", thread, id}, b.CLIArgs()...)...)
			assert.True(t, r.err == nil && r.stdout == "revoked Phone ("+id+")\n", "device revoke: %v %q", r.err, r.stdout)
			status, code := poll()
			assert.True(t, status == http.StatusUnauthorized && code == "token_revoked", "after the revoke: %d %s", status, code)
			r = runCLI(t, nil, "", append([]string{"device", "revoke", thread, "d_00000000"}, b.CLIArgs()...)...)
			assert.Equal(t, "revoke an unknown device", chatrelay.CodeOf(r.err), chatrelay.NotFound)

			assert.True(t, !strings.Contains(serverLog.String(), token), "the server's log holds the token")
			digest, found := chatrelay.DigestOf(token), false
			for where, data := range stored(t, b) {
				assert.True(t, !strings.Contains(data, token), "%s holds the token", where)
				found = found || strings.Contains(data, digest)
			}
			assert.True(t, found, "the digest is stored nowhere")
		})
	}
}
