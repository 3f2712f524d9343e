package webhook

import (
	"context"
	"net/http"
	"time"

	"github.com/chatrelay/chatrelay/store"
)

// PingType is the type of the event Ping sends.
const PingType = "ping"

// Ping sends url a signed test event, {"type": "ping", "timestamp",
// "data": {}}, once (no retry), and returns its webhook-id and the
// receiver's status; err is nil for a 2xx within WebhookTimeout.
func Ping(ctx context.Context, c *http.Client, url string, keys [][]byte) (id string, status int, err error) {
	if c == nil {
		c = noRedirect()
	}
	id = store.NewEventID()
	body := []byte(`{"type":"` + PingType + `","timestamp":"` + time.Now().UTC().Format(TimestampFormat) + `","data":{}}`)
	status, err = Send(ctx, c, url, keys, id, body)
	return id, status, err
}
