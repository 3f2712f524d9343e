package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// go-redis writes lines of its own (a dial that failed, a pub/sub
// connection it dropped) through one logger per process, by default plain
// text on standard error. Open replaces it, once, with clientLogger, which
// hands each line to the logger of the newest Store still open (in a
// server or the CLI there is one) as a warn record "redis client" with the
// line as "detail": the server's level, format (--log-format json) and
// destination apply. With no Store open, lines go to slog.Default().
var clientLogs struct {
	once   sync.Once
	mu     sync.Mutex
	stores []*Store // open stores, oldest first
}

type clientLogger struct{}

func (clientLogger) Printf(ctx context.Context, format string, v ...any) {
	log := slog.Default()
	clientLogs.mu.Lock()
	if n := len(clientLogs.stores); n > 0 {
		log = clientLogs.stores[n-1].log
	}
	clientLogs.mu.Unlock()
	msg := strings.TrimSpace(fmt.Sprintf(format, v...))
	log.Warn("redis client", "detail", strings.TrimPrefix(msg, "redis: "))
}

func routeClientLog(s *Store) {
	clientLogs.once.Do(func() { redis.SetLogger(clientLogger{}) })
	clientLogs.mu.Lock()
	defer clientLogs.mu.Unlock()
	clientLogs.stores = append(clientLogs.stores, s)
}

func unrouteClientLog(s *Store) {
	clientLogs.mu.Lock()
	defer clientLogs.mu.Unlock()
	clientLogs.stores = slices.DeleteFunc(clientLogs.stores, func(x *Store) bool { return x == s })
}
