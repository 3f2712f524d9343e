package storetest

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/store"
)

func TestMain(m *testing.M) {
	alsoRun = []string{FileAppendLog, RedisCluster, RedisShards, RedisWait}
	Main(m)
}

// Two stores of one backend see each other's messages; two tests'
// stores on the shared Redis see nothing of each other.
func TestOpenAndAnother(t *testing.T) {
	Run(t, func(t *testing.T, backend string) {
		ctx := context.Background()
		a := Open(t, backend, Options{})
		other := Open(t, backend, Options{})
		const thread = "0123456789abcdef"
		e, err := a.Store.Append(ctx, thread, store.NewMessage{Author: chatrelay.Operator, Text: "hello"})
		if err != nil {
			t.Fatal(err)
		}
		p, err := a.Another(t, Options{}).Store.Since(ctx, thread, 0, 0)
		if err != nil || len(p.Messages) != 1 || p.Messages[0].ID != e.ID {
			t.Fatalf("another store of the same data: %+v, %v", p, err)
		}
		if got := other.Threads(t); len(got) != 0 {
			t.Fatalf("another test's store holds %v", got)
		}
		if got := a.Threads(t); !slices.Equal(got, []string{thread}) {
			t.Fatalf("threads %v", got)
		}
		if backend == Redis {
			if a.Prefix == other.Prefix || !strings.HasPrefix(a.CLIArgs()[1], "redis://127.0.0.1:") {
				t.Fatalf("prefixes %q %q, CLI args %q", a.Prefix, other.Prefix, a.CLIArgs())
			}
		}
		if backend == RedisWait {
			// Its writes waited for the replica, and another store of the
			// same data (the host CLI's) waits too.
			stats := a.Client(t).Info(ctx, "commandstats").Val()
			if !strings.Contains(stats, "cmdstat_wait:calls=") || !strings.HasSuffix(a.CLIArgs()[1], "?wait-replicas=1") {
				t.Fatalf("no WAIT on the primary, or CLI args %q:\n%s", a.CLIArgs(), stats)
			}
		}
	})
}

// Without redis-server on the PATH, starting one fails with words that
// say what to install.
func TestMissingRedisServer(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := redistest.Start(t.TempDir(), ServerOptions{})
	if err == nil || !strings.Contains(err.Error(), "redis-server is not installed") || !strings.Contains(err.Error(), "apt-get install redis-server") {
		t.Fatalf("err = %v", err)
	}
}

// A persistent server keeps what it acknowledged across a kill.
func TestPersistentServerSurvivesKill(t *testing.T) {
	t.Parallel()
	srv := StartServer(t, ServerOptions{Persist: true})
	c := srv.Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered after Kill")
	}
	srv.Restart(t)
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("after the restart: %q, %v", v, err)
	}
}
