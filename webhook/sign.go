// Package webhook sends the store's webhook events (contract Part 5,
// "Events out: webhooks") to the operator's URLs, signed the Standard
// Webhooks way (https://www.standardwebhooks.com): the headers
// webhook-id, webhook-timestamp and webhook-signature
// "v1,<base64 HMAC-SHA256 of id.timestamp.body>" under the secret's
// decoded bytes. The events are queued by the store in the same write as
// their change (store.Outbox); a Deliverer takes them, sends them, and
// settles them: delivered, retried on chatrelay.WebhookSchedule, or
// dropped.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/chatrelay/chatrelay/store"
)

// The Standard Webhooks headers.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts a webhook secret: whsec_ and the key in base64.
const SecretPrefix = "whsec_"

// ParseSecret decodes a secret "whsec_<base64>" into its key: 24 to 64
// bytes, as Standard Webhooks asks.
func ParseSecret(s string) ([]byte, error) {
	b64, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok {
		return nil, fmt.Errorf("a webhook secret starts with %s", SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("a webhook secret is %s and base64: %v", SecretPrefix, err)
	}
	if len(key) < 24 || len(key) > 64 {
		return nil, fmt.Errorf("a webhook secret's key is 24 to 64 bytes, this one %d", len(key))
	}
	return key, nil
}

// MaxSecrets bounds the secrets given at once (ParseSecrets): the one in
// use and the ones a rotation adds or retires.
const MaxSecrets = 4

// ParseSecrets decodes one secret, or several separated by spaces (while
// a secret is rotated: the old and the new), into their keys, in order.
func ParseSecrets(s string) ([][]byte, error) {
	fields := strings.Fields(s)
	switch {
	case len(fields) == 0:
		return nil, fmt.Errorf("no webhook secret")
	case len(fields) > MaxSecrets:
		return nil, fmt.Errorf("at most %d webhook secrets at once, not %d", MaxSecrets, len(fields))
	}
	keys := make([][]byte, 0, len(fields))
	for i, f := range fields {
		key, err := ParseSecret(f)
		if err != nil {
			if len(fields) > 1 {
				err = fmt.Errorf("secret %d of %d: %w", i+1, len(fields), err)
			}
			return nil, err
		}
		keys = append(keys, key)
	}
	return keys, nil
}

// Signatures returns the webhook-signature of body sent as event id at
// ts under each of keys: their signatures separated by spaces, as
// Standard Webhooks lists them, so that a receiver that knows any one of
// the secrets verifies it.
func Signatures(keys [][]byte, id string, ts time.Time, body []byte) string {
	sigs := make([]string, len(keys))
	for i, key := range keys {
		sigs[i] = Sign(key, id, ts, body)
	}
	return strings.Join(sigs, " ")
}

// Sign returns the webhook-signature of body sent as event id at ts.
func Sign(key []byte, id string, ts time.Time, body []byte) string {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(id))
	h.Write([]byte{'.'})
	h.Write(strconv.AppendInt(nil, ts.Unix(), 10))
	h.Write([]byte{'.'})
	h.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// TimestampFormat is the body's "timestamp": RFC 3339 in UTC with
// milliseconds, always three digits (time.RFC3339Nano would drop
// trailing zeros: "…:05Z" for a change at a whole second).
const TimestampFormat = "2006-01-02T15:04:05.000Z"

// Body is the JSON an event is sent as: {"type", "timestamp" (RFC 3339,
// the change's time), "data": {"thread", "message" or "participant"}}.
func Body(ev store.Event) []byte {
	b := make([]byte, 0, 96+len(ev.Thread)+len(ev.Message))
	b = append(b, `{"type":`...)
	b = appendString(b, ev.Type)
	b = append(b, `,"timestamp":`...)
	b = appendString(b, ev.At.UTC().Format(TimestampFormat))
	b = append(b, `,"data":{"thread":`...)
	b = appendString(b, ev.Thread)
	if len(ev.Message) > 0 {
		b = append(b, `,"message":`...)
		b = append(b, ev.Message...)
	}
	if len(ev.Participant) > 0 {
		b = append(b, `,"participant":`...)
		b = append(b, ev.Participant...)
	}
	return append(b, "}}"...)
}

func appendString(b []byte, s string) []byte {
	js, _ := json.Marshal(s)
	return append(b, js...)
}
