package main

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"strconv"
	"testing"

	"github.com/chatrelay/chatrelay/webhook"
)

// FuzzWebhookFlags: --webhook and --webhook-secret (and webhook test's
// URL and --secret, and CHATRELAY_WEBHOOK_SECRET) are an operator's
// strings, read at start. Checking them never panics; a URL taken makes
// an http or https request with a host, as the deliverer builds it; a
// secret taken is a key of 24 … 64 bytes, and its canonical form
// ("whsec_" + standard base64) reads as the same key.
func FuzzWebhookFlags(f *testing.F) {
	key := bytes.Repeat([]byte{0xa5}, 32)
	for _, s := range []struct{ url, secret string }{
		{"https://hooks.example.com/chatrelay", "whsec_" + base64.StdEncoding.EncodeToString(key)},
		{"http://127.0.0.1:47401/hook?x=1", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
		{"https://user:pass@hooks.example.com/", "whsec_" + base64.StdEncoding.EncodeToString(key[:23])},
		{"hooks.example.com/x", "whsec_" + base64.RawStdEncoding.EncodeToString(key)},
		{"ftp://hooks.example.com/", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
		{"https:///x", "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat(key, 3))},
		{"https://[::1]:47402/", "whsec_MfKQ9r8GKYqrTwjU\nPD8ILPZIo2LaLaSw"},
		{"https://hooks.example.com:99999/", "whsec_"},
	} {
		f.Add(s.url, s.secret)
	}
	f.Fuzz(func(t *testing.T, u, secret string) {
		if checkHookURL("--webhook", u) == nil {
			req, err := http.NewRequest(http.MethodPost, u, nil)
			if err != nil || (req.URL.Scheme != "http" && req.URL.Scheme != "https") || req.URL.Hostname() == "" {
				t.Fatalf("--webhook %q taken, but its request is %v, %v", u, req, err)
			}
			if port := req.URL.Port(); port != "" {
				if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
					t.Fatalf("--webhook %q taken with port %q", u, port)
				}
			}
		}
		k, err := webhook.ParseSecret(secret)
		if err != nil {
			return
		}
		if len(k) < 24 || len(k) > 64 {
			t.Fatalf("secret %q taken as a key of %d bytes", secret, len(k))
		}
		again, err := webhook.ParseSecret(webhook.SecretPrefix + base64.StdEncoding.EncodeToString(k))
		if err != nil || !bytes.Equal(again, k) {
			t.Fatalf("secret %q: its canonical form reads %x, %v", secret, again, err)
		}
	})
}

// TestWebhookURLRefused: a --webhook whose host or port cannot be
// dialled is refused at start, not taken and failed at every delivery.
func TestWebhookURLRefused(t *testing.T) {
	for _, u := range []string{"https://hooks.example.com:99999/", "https://hooks.example.com:0/", "https://:443/", "ftp://hooks.example.com/"} {
		if err := checkHookURL("--webhook", u); err == nil {
			t.Errorf("--webhook %q taken", u)
		}
	}
	for _, u := range []string{"https://hooks.example.com/", "http://127.0.0.1:47401/hook", "https://[::1]:65535/"} {
		if err := checkHookURL("--webhook", u); err != nil {
			t.Errorf("--webhook %q refused: %v", u, err)
		}
	}
}
