package transport_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestPushRetryTTLCountsDown: an approval's push is kept by the push
// service for the seconds left to its deadline (TTL); its retry, sent
// later, says the seconds left then, not those of the first attempt
// (which would keep it past the deadline, by up to the 10 minutes of the
// retries).
func TestPushRetryTTLCountsDown(t *testing.T) {
	t.Parallel()
	svc, _, _, _ := approvalRefusedOnce(t)
	ps, _ := awaitPushes(t, svc, "/push/phone", 2)
	first, err := strconv.Atoi(ps[0].TTL)
	assert.Success(t, err)
	retry, err := strconv.Atoi(ps[1].TTL)
	assert.Success(t, err)
	gap := ps[1].At.Sub(ps[0].At)
	assert.True(t, retry <= first-int(gap/time.Second)+1 && retry < first, "TTL %d at the first attempt, %d at the retry %v later", first, retry, gap)
}
