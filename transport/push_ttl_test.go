package transport_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
)

// TestPushRetryTTLCountsDown: an approval's push is kept by the push
// service for the seconds left to its deadline (TTL); its retry, sent
// later, says the seconds left then, not those of the first attempt
// (which would keep it past the deadline, by up to the 10 minutes of the
// retries).
func TestPushRetryTTLCountsDown(t *testing.T) {
	t.Parallel()
	svc := pushtest.NewService(t)
	svc.Respond = func(_ string, n int) pushtest.Answer {
		if n == 1 {
			return pushtest.Answer{Status: http.StatusServiceUnavailable}
		}
		return pushtest.Answer{Status: http.StatusCreated}
	}
	e := startPush(t, pushOptions{config: withPush(svc, func(c *transport.PushConfig) { c.Backoff = []time.Duration{2 * time.Second} })})
	owner, thread := tokenN(1), threadN(1)
	e.mustPost(owner, "hello")
	status, a := e.subscribe(owner, nil, svc.Subscribe(t, "phone"))
	assert.Equal(t, "subscribe "+a.Code, status, 201)
	_, err := e.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true,
		Ask: &chatrelay.Ask{Type: chatrelay.Approval, Title: "deploy", Prompt: "Deploy?", Timeout: time.Hour}})
	assert.Success(t, err)
	ps, _ := awaitPushes(t, svc, "/push/phone", 2)
	first, err := strconv.Atoi(ps[0].TTL)
	assert.Success(t, err)
	retry, err := strconv.Atoi(ps[1].TTL)
	assert.Success(t, err)
	gap := ps[1].At.Sub(ps[0].At)
	assert.True(t, retry <= first-int(gap/time.Second)+1 && retry < first, "TTL %d at the first attempt, %d at the retry %v later", first, retry, gap)
}
