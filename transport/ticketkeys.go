package transport

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"time"
)

// TicketKeys is where a shared ticket signing key is kept when it may
// change under a running server: nodes sharing a Redis keep it there
// (redisstore.Store implements it), and a Redis that lost its data may come
// back with another node's key. Config.TicketKeys makes the server read it
// again before it signs a ticket and when a ticket does not verify, so the
// nodes agree again without a restart.
type TicketKeys interface {
	// TicketKey returns the current key (at least 32 bytes).
	TicketKey(ctx context.Context) ([]byte, error)
}

// TicketKeyFunc is a function that returns the current key, as a
// TicketKeys (store.Backend.TicketKey).
type TicketKeyFunc func(ctx context.Context) ([]byte, error)

// TicketKey implements TicketKeys.
func (f TicketKeyFunc) TicketKey(ctx context.Context) ([]byte, error) { return f(ctx) }

// ticketRefresh is how often the key is read again at most, and
// ticketRefreshTimeout how long a read may take (a stalled Redis must not
// hold a ticket request: the key held is used meanwhile).
const (
	ticketRefresh        = time.Second
	ticketRefreshTimeout = 500 * time.Millisecond
)

// keyRing holds the current ticket key and reads it again from src, at
// most once per ticketRefresh and by one caller at a time.
type keyRing struct {
	src TicketKeys
	log *slog.Logger

	mu      sync.Mutex // guards the fields below
	key     []byte
	read    time.Time // the last read began
	reading bool
}

func newKeyRing(src TicketKeys, key []byte, log *slog.Logger) *keyRing {
	if src == nil {
		return nil
	}
	return &keyRing{src: src, key: key, log: log, read: time.Now()}
}

// current returns the key, first reading it again if the last read began
// more than ticketRefresh ago and no other caller is reading it.
func (k *keyRing) current() []byte {
	k.mu.Lock()
	if k.reading || time.Since(k.read) < ticketRefresh {
		defer k.mu.Unlock()
		return k.key
	}
	k.reading, k.read = true, time.Now()
	k.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), ticketRefreshTimeout)
	fresh, err := k.src.TicketKey(ctx)
	cancel()

	k.mu.Lock()
	defer k.mu.Unlock()
	k.reading = false
	if err != nil || len(fresh) < 32 {
		k.log.Warn("ticket key: could not read it again; the key held is used", "err", err)
		return k.key
	}
	if !bytes.Equal(fresh, k.key) {
		k.log.Warn("ticket key: the shared key changed; tickets signed with the old one are refused")
		k.key = fresh
	}
	return k.key
}

// held returns the key without reading it again.
func (k *keyRing) held() []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.key
}
