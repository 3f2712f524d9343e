// Package webhooktest is a webhook receiver for tests: an HTTP server on
// 127.0.0.1 that verifies every request with the Standard Webhooks
// reference library (github.com/standard-webhooks/standard-webhooks/libraries),
// as an operator's receiver would, and records what it got.
package webhooktest

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// NewSecret returns a fresh secret, whsec_ and 32 random bytes in base64.
func NewSecret() string {
	var b [32]byte
	rand.Read(b[:])
	return "whsec_" + base64.StdEncoding.EncodeToString(b[:])
}

// Delivery is one request the receiver got.
type Delivery struct {
	ID     string // webhook-id
	Valid  bool   // the signature verified (and the timestamp is recent)
	Err    string // why it did not verify
	Status int    // what the receiver answered
	Body   []byte
	Event  Event // Body, decoded
}

// Event is a decoded body.
type Event struct {
	Type      string `json:"type"`
	Timestamp string `json:"timestamp"`
	Data      struct {
		Thread  string          `json:"thread"`
		Message json.RawMessage `json:"message"`
	} `json:"data"`
}

// Receiver records deliveries; it answers 204 to a request that verifies
// while it is up, and 503 to every request while it is down (recorded
// too, with that status).
type Receiver struct {
	URL    string
	Secret string
	srv    *httptest.Server
	wh     *standardwebhooks.Webhook

	mu   sync.Mutex
	got  []Delivery
	down bool
	gone bool
}

// Start starts a receiver for secret, stopped when the test ends.
func Start(t testing.TB, secret string) *Receiver {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	r := &Receiver{Secret: secret, wh: wh}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve)) // 127.0.0.1
	r.URL = r.srv.URL + "/hook"
	t.Cleanup(r.srv.Close)
	return r
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	d := Delivery{ID: req.Header.Get("webhook-id"), Body: body}
	if err := r.wh.Verify(body, req.Header); err != nil {
		d.Err = err.Error()
	} else {
		d.Valid = true
	}
	json.Unmarshal(body, &d.Event)
	r.mu.Lock()
	switch {
	case r.down:
		d.Status = http.StatusServiceUnavailable
	case r.gone:
		d.Status = http.StatusGone
	case !d.Valid || req.Method != http.MethodPost:
		d.Status = http.StatusBadRequest
	default:
		d.Status = http.StatusNoContent
	}
	r.got = append(r.got, d)
	r.mu.Unlock()
	w.WriteHeader(d.Status)
}

// SetDown makes the receiver answer 503 (true) or verify and accept
// (false).
func (r *Receiver) SetDown(down bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down = down
}

// SetGone makes the receiver answer 410 Gone (true): it wants no more
// events.
func (r *Receiver) SetGone(gone bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gone = gone
}

// All returns every request received, in order.
func (r *Receiver) All() []Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Delivery(nil), r.got...)
}

// Accepted returns the requests answered 204, in order.
func (r *Receiver) Accepted() []Delivery {
	var out []Delivery
	for _, d := range r.All() {
		if d.Status == http.StatusNoContent {
			out = append(out, d)
		}
	}
	return out
}
