package transport_test

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
)

// TestPushRefusesPointOffTheCurve: a p256dh of the right length and
// prefix (65 bytes, starting 4) that is not a point of P-256 is not a
// subscription's shape: 400 invalid_push_endpoint, nothing stored. (It
// was taken, and then no push to it could ever be encrypted.)
func TestPushRefusesPointOffTheCurve(t *testing.T) {
	t.Parallel()
	svc := pushtest.NewService(t)
	e := startPush(t, pushOptions{config: withPush(svc, nil)})
	owner := tokenN(1)
	e.mustPost(owner, "hello")
	a := svc.Subscribe(t, "a")
	off := make([]byte, 65)
	off[0] = 4
	for i := 1; i < len(off); i++ {
		off[i] = 1 // (1…1, 1…1) is not on the curve
	}
	for name, p256dh := range map[string]string{
		"off the curve": base64.RawURLEncoding.EncodeToString(off),
		"all zero":      base64.RawURLEncoding.EncodeToString(append([]byte{4}, make([]byte, 64)...)),
	} {
		body := `{"subscription":{"endpoint":"` + a.Endpoint + `","keys":{"p256dh":"` + p256dh + `","auth":"` + a.AuthKey() + `"}}}`
		status, _, b := e.do(http.MethodPost, chatrelay.PathPush, owner, body, nil)
		assert.True(t, status == 400 && strings.Contains(string(b), `"invalid_push_endpoint"`), "%s: %d %s", name, status, b)
	}
	_, mine := e.pushCall(http.MethodGet, chatrelay.PathPush, owner, nil)
	assert.Equal(t, "subscriptions after the refusals", len(mine.Subscriptions), 0)
	status, _ := e.subscribe(owner, nil, a)
	assert.Equal(t, "the real subscription", status, 201)
}
