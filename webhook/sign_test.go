package webhook_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/webhook"
)

// The signature is the reference library's, byte for byte.
func TestSignIsStandardWebhooks(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	key, err := webhook.ParseSecret(secret)
	assert.Success(t, err)
	ref, err := standardwebhooks.NewWebhook(secret)
	assert.Success(t, err)
	ts := time.Unix(1614265330, 0)
	body := []byte(`{"type":"message.created","timestamp":"2021-02-25T15:02:10Z","data":{"thread":"52b6419d27bd7f54"}}`)
	want, err := ref.Sign("evt_2KWPBgLlAfxdpx2AI54pPJ85f4W", ts, body)
	assert.Success(t, err)
	assert.Equal(t, "signature", webhook.Sign(key, "evt_2KWPBgLlAfxdpx2AI54pPJ85f4W", ts, body), want)
}

func TestParseSecret(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, secret string
		ok           bool
	}{
		{"24 bytes", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", true},
		{"no prefix", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", false},
		{"not base64", "whsec_not base64!", false},
		{"too short", "whsec_c2hvcnQ=", false},
		{"empty", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := webhook.ParseSecret(tc.secret)
			assert.Equal(t, "accepted", err == nil, tc.ok)
		})
	}
}

// The body's timestamp is RFC 3339 with milliseconds, always three
// digits (docs/api.md, Webhooks): a change at a whole second, or at
// .950, was written "…:05Z" or "…:05.95Z" (RFC3339Nano drops trailing
// zeros), which a receiver parsing the documented form refuses.
func TestBodyTimestampHasMilliseconds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ms   int64
		want string
	}{
		{1795971605000, `"timestamp":"2026-11-29T17:00:05.000Z"`},
		{1795971605950, `"timestamp":"2026-11-29T17:00:05.950Z"`},
		{1795971605229, `"timestamp":"2026-11-29T17:00:05.229Z"`},
	} {
		body := string(webhook.Body(store.Event{Type: store.EventMessageCreated, Thread: "52b6419d27bd7f54", At: time.UnixMilli(tc.ms)}))
		assert.True(t, strings.Contains(body, tc.want), "body %s lacks %s", body, tc.want)
	}
}

// TestSecretsRotate: while a secret is rotated the operator gives the
// old and the new one, space-separated; each event then carries a
// signature of each (Standard Webhooks' space-separated list), so a
// receiver verifies it with either, and the reference library with
// either secret alone.
func TestSecretsRotate(t *testing.T) {
	t.Parallel()
	const old, next = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_Aq3nDc4m1JbYm7o4YFz2tT1O1k2n1xQ8cW5vCg=="
	keys, err := webhook.ParseSecrets(old + " " + next)
	assert.Success(t, err)
	assert.Equal(t, "keys", len(keys), 2)
	var got []string
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		for _, secret := range []string{old, next} {
			ref, err := standardwebhooks.NewWebhook(secret)
			if err == nil {
				err = ref.Verify(body, r.Header)
			}
			if err != nil {
				got = append(got, secret[:10]+": "+err.Error())
			} else {
				got = append(got, secret[:10]+": verified")
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rcv.Close()
	_, status, err := webhook.Ping(t.Context(), nil, rcv.URL, keys)
	assert.Success(t, err)
	assert.Equal(t, "status", status, http.StatusNoContent)
	assert.Equal(t, "verified", strings.Join(got, "; "), "whsec_MfKQ: verified; whsec_Aq3n: verified")

	for _, tc := range []struct{ name, secrets string }{
		{"none", "  "},
		{"one bad of two", old + " whsec_c2hvcnQ="},
		{"five", strings.Repeat(old+" ", 5)},
	} {
		_, err := webhook.ParseSecrets(tc.secrets)
		assert.True(t, err != nil, "%s: accepted", tc.name)
	}
}
