package transport_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/store"
)

// TestPushRetryAfterPastTheWindow: a push service that answers 429 with a
// Retry-After of more seconds than a time.Duration holds (one just past,
// one past an int64, one an HTTP date in the year 9999) is not tried
// again before it: the push fails at once (no attempt left within the
// 10 minutes), where a Retry-After read as none was tried again after the
// first backoff.
func TestPushRetryAfterPastTheWindow(t *testing.T) {
	t.Parallel()
	waits := map[string]string{
		"/push/duration": "9223372037",
		"/push/int64":    "18446744073709551616",
		"/push/date":     "Fri, 31 Dec 9999 23:59:59 GMT",
	}
	svc := pushtest.NewService(t)
	svc.Respond = func(path string, _ int) pushtest.Answer {
		return pushtest.Answer{Status: http.StatusTooManyRequests, Headers: http.Header{"Retry-After": {waits[path]}}}
	}
	e := startPush(t, pushOptions{config: withPush(svc, nil)})
	owner, thread := tokenN(1), threadN(1)
	e.mustPost(owner, "hello")
	for path := range waits {
		status, a := e.subscribe(owner, nil, svc.Subscribe(t, path[len("/push/"):]))
		assert.Equal(t, "subscribe "+a.Code, status, 201)
	}
	_, err := e.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "later"})
	assert.Success(t, err)
	var m map[string]float64
	assert.Eventually(t, 10*time.Second, "every push's outcome counted", func() bool {
		m = opsScrape(t, e.client, e.ts.URL+"/metrics")
		return m[`chatrelay_push_total{result="failed"}`]+m[`chatrelay_push_total{result="retried"}`] >= 3
	})
	// The test's backoff is 10 ms: a retry would have come by now.
	assert.Equal(t, "failed, retried", []float64{m[`chatrelay_push_total{result="failed"}`], m[`chatrelay_push_total{result="retried"}`]}, []float64{3, 0})
	for path := range waits {
		assert.Equal(t, "attempts to "+path, len(pushesTo(svc, path)), 1)
	}
}
