package transport

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestPushAgainFullIsDroppedOnly: a retry that finds the retry queue full
// is counted dropped, and not also retried (it is never tried again).
func TestPushAgainFullIsDroppedOnly(t *testing.T) {
	ps := &pusher{
		s:       &Server{cfg: Config{Now: time.Now}},
		backoff: []time.Duration{time.Second},
		retry:   make(chan pushTask), // no reader: always full
		total:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "t"}, []string{"result"}),
	}
	ps.again(context.Background(), &pushJob{attempt: 1, first: time.Now()}, 0)
	got := []float64{testutil.ToFloat64(ps.total.WithLabelValues(pushRetried)), testutil.ToFloat64(ps.total.WithLabelValues(pushDropped))}
	assert.Equal(t, "retried, dropped", got, []float64{0, 1})
}
