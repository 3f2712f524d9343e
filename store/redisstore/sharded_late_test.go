package redisstore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/store"
)

// threadsOn returns a thread on each of n shards.
func threadsOn(sh *Sharded, n int) []string {
	out := make([]string, n)
	for i, left := 0, n; left > 0; i++ {
		th := fmt.Sprintf("%016x", 0x1a7e0+i)
		if k := sh.ShardOf(th); out[k] == "" {
			out[k] = th
			left--
		}
	}
	return out
}

// hasText reports whether rec handed on a message of thread with text.
func hasText(rec *recorder, thread, text string) bool {
	return slices.ContainsFunc(rec.messages(thread), func(e store.Entry) bool { return e.Text == text })
}

// TestShardDownAtOpen: a store of instances opens while one of its
// shards does not answer (a node restarted during the shard's outage):
// the other shard's threads are written and reach the feed; the down
// shard's answer StoreUnavailable, and so do the readers that need every
// shard and the readiness check (store.Partial: the node stays ready, its
// feed not held against it once the check found the shard down); once it is back (same address), with no
// reopening, its threads are written and its feed is followed: a post
// of another node on it reaches this node's feed.
func TestShardDownAtOpen(t *testing.T) {
	t.Parallel()
	s1 := redistest.StartServer(t, redistest.ServerOptions{Persist: true})
	s2 := redistest.StartServer(t, redistest.ServerOptions{Persist: true})
	spec := s1.URL() + "," + s2.URL()
	first := openSharded(t, spec, Options{})
	th := threadsOn(first, 2)
	ctx := t.Context()
	for _, thread := range th {
		must[store.Entry](t)(first.Append(ctx, thread, store.NewMessage{Text: "before"}))
	}
	first.Close()

	s2.Kill()
	sh := openSharded(t, spec, Options{Timeout: time.Second})
	rec := follow(t, sh)
	must[store.Entry](t)(sh.Append(ctx, th[0], store.NewMessage{Text: "during"}))
	assert.Eventually(t, 10*time.Second, "the healthy shard's post on the feed", func() bool { return hasText(rec, th[0], "during") })
	_, err := sh.Append(ctx, th[1], store.NewMessage{Text: "during"})
	he := wantCode(t, err, chatrelay.StoreUnavailable)
	if he.Retry <= 0 {
		t.Fatalf("the down shard's error has no Retry: %+v", he)
	}
	_, err = sh.Since(ctx, th[1], 0, 0)
	wantCode(t, err, chatrelay.StoreUnavailable)
	_, err = sh.Threads(ctx)
	wantCode(t, err, chatrelay.StoreUnavailable)
	if sh.FeedLive() {
		t.Fatal("the feed is live while a shard's is not followed (and no check found it down)")
	}
	err = sh.Check(ctx)
	wantCode(t, err, chatrelay.StoreUnavailable)
	if !store.Partial(err) {
		t.Fatalf("a down shard of two, shard 0 up: %v is not store.Partial", err)
	}
	// The readiness probe checks first: the feed of a shard the check
	// found down is not held against the node (every node alike).
	if !sh.FeedLive() {
		t.Fatal("the feed is not live for a shard the check found down")
	}

	s2.Restart(t)
	assert.Eventually(t, 10*time.Second, "a post on the shard back", func() bool {
		_, err := sh.Append(ctx, th[1], store.NewMessage{Text: "after"})
		return err == nil
	})
	assert.Eventually(t, 10*time.Second, "the shard's post on the feed", func() bool { return hasText(rec, th[1], "after") })
	other := openSharded(t, spec, Options{})
	must[store.Entry](t)(other.Append(ctx, th[1], store.NewMessage{Text: "from another node"}))
	assert.Eventually(t, 10*time.Second, "another node's post on the shard back, on the feed", func() bool {
		return hasText(rec, th[1], "from another node")
	})
	assert.Eventually(t, 10*time.Second, "ready again", func() bool { return sh.Check(ctx) == nil && sh.FeedLive() })
	if p := must[store.Page](t)(sh.Since(ctx, th[1], 0, 0)); len(p.Messages) != 3 {
		t.Fatalf("the shard back holds %+v", p.Messages)
	}
	if infos := must[[]store.ThreadInfo](t)(sh.Threads(ctx)); len(infos) != 2 {
		t.Fatalf("threads %+v", infos)
	}
}

// TestShardDownAtOpenChecks: what a start with every shard up refuses
// is still refused, or held, with one shard down. A store's first start
// (no shard record anywhere) needs every shard, and writes nothing; with
// shard 0 down the CLI's store opens (the other shards' threads are
// written) and the node-wide singletons of shard 0 answer
// StoreUnavailable; and a listed instance that comes back with no record
// beside a shard 0 that has one is refused, its calls answering
// StoreUnavailable.
func TestShardDownAtOpenChecks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s1 := redistest.StartServer(t, redistest.ServerOptions{Persist: true})
	s2 := redistest.StartServer(t, redistest.ServerOptions{Persist: true})
	s3 := redistest.StartServer(t, redistest.ServerOptions{Persist: true})

	// The first start, s2 down: refused, s1 untouched.
	s2.Kill()
	if _, err := OpenSharded(ctx, s1.URL()+","+s2.URL(), Options{Log: testLogger(t), Timeout: time.Second}); chatrelay.CodeOf(err) != chatrelay.StoreUnavailable {
		t.Fatalf("a first start with a shard down: %v, want StoreUnavailable", err)
	}
	if keys := s1.Client(t).Keys(ctx, "*").Val(); len(keys) != 0 {
		t.Fatalf("a refused first start wrote %q", keys)
	}
	s2.Restart(t)
	spec := s1.URL() + "," + s2.URL()
	first := openSharded(t, spec, Options{})
	th := threadsOn(first, 2)
	for _, thread := range th {
		must[store.Entry](t)(first.Append(ctx, thread, store.NewMessage{Text: "before"}))
	}
	first.Close()

	// Shard 0 down: the host CLI writes shard 1's threads; shard 0's
	// singletons answer StoreUnavailable.
	s1.Kill()
	b, err := store.Open(ctx, spec, store.Options{Log: testLogger(t)})
	if err != nil {
		t.Fatalf("shard 0 down: %v", err)
	}
	must[store.Entry](t)(b.Append(ctx, th[1], store.NewMessage{Text: "shard 0 down"}))
	_, err = b.TicketKey(ctx)
	wantCode(t, err, chatrelay.StoreUnavailable)
	b.Close()

	// s3, down, in shard 1's place: once it answers, it is refused (it
	// has no record beside a shard 0 that has one), and nothing is
	// written on it, not even by the webhooks' setup or the feed of a node
	// that lists it.
	s1.Restart(t)
	s3.Kill()
	late := openSharded(t, s1.URL()+","+s3.URL(), Options{Timeout: time.Second, Webhooks: []string{store.DestinationID("https://hooks.example.com/")}})
	follow(t, late) // its feed reads nothing of s3 either
	must[store.Entry](t)(late.Append(ctx, th[0], store.NewMessage{Text: "s3 down"}))
	s3.Restart(t)
	assert.Eventually(t, 10*time.Second, "the misplaced instance refused", func() bool {
		_, err := late.Append(ctx, th[1], store.NewMessage{Text: "misplaced"})
		return err != nil && strings.Contains(err.Error(), "no shard record")
	})
	_, err = late.Append(ctx, th[1], store.NewMessage{Text: "misplaced"})
	wantCode(t, err, chatrelay.StoreUnavailable)
	var ce *store.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("a misplaced instance: %v, want the configuration error within", err)
	}
	if keys := s3.Client(t).Keys(ctx, "*").Val(); len(keys) != 0 {
		t.Fatalf("a misplaced instance was written: %q", keys)
	}
}

// TestShardRefusedLateReadAgain: a listed instance that comes back with
// no shard record beside a shard 0 that has one is refused; once the
// record is put on it (as the refusal says: SET <prefix>shard k/n), it
// is read again and the shard is served, with no restart.
func TestShardRefusedLateReadAgain(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s1 := redistest.StartServer(t, redistest.ServerOptions{Persist: true})
	s2 := redistest.StartServer(t, redistest.ServerOptions{Persist: true})
	s3 := redistest.StartServer(t, redistest.ServerOptions{Persist: true})
	first := openSharded(t, s1.URL()+","+s2.URL(), Options{})
	th := threadsOn(first, 2)
	first.Close()

	s3.Kill()
	late := openSharded(t, s1.URL()+","+s3.URL(), Options{Timeout: time.Second})
	s3.Restart(t)
	assert.Eventually(t, 10*time.Second, "the instance with no record refused", func() bool {
		_, err := late.Append(ctx, th[1], store.NewMessage{Text: "misplaced"})
		return err != nil && strings.Contains(err.Error(), "no shard record")
	})
	if keys := s3.Client(t).Keys(ctx, "*").Val(); len(keys) != 0 {
		t.Fatalf("a refused instance was written: %q", keys)
	}
	assert.Success(t, s3.Client(t).Set(ctx, late.Shards()[1].prefix+"shard", "1/2", 0).Err())
	assert.Eventually(t, 10*time.Second, "a post on the instance once its record is put right", func() bool {
		_, err := late.Append(ctx, th[1], store.NewMessage{Text: "recorded"})
		return err == nil
	})
}

// TestLateShardFailureAfterSetupMarksDown: a call of a shard that did
// not answer at open sets the shard up at its gate (the setup's calls
// answer), then fails with no answer since: the shard is marked down, as
// any call that fails so. The setup's answers are older than the call's
// own command, and no news that the shard answered it. So for a read,
// and for a readiness check (which then finds the shard down).
func TestLateShardFailureAfterSetupMarksDown(t *testing.T) {
	t.Parallel()
	for _, call := range []string{"read", "check"} {
		t.Run(call, func(t *testing.T) {
			t.Parallel()
			s0 := redistest.StartServer(t, redistest.ServerOptions{Persist: true})
			s1 := redistest.StartServer(t, redistest.ServerOptions{Persist: true})
			p := startStallProxy(t, s1.Addr())
			spec := s0.URL() + "," + p.url()
			first := openSharded(t, spec, Options{Prefix: "lf:"})
			th := threadsOnShard(first, 1, 1, 0x5b0000)[0]
			first.Close()

			s1.Kill()
			// A timeout no loaded machine reaches: the call fails when
			// the test cuts its connection.
			sh := openSharded(t, spec, Options{Prefix: "lf:", Timeout: time.Minute})
			sh.late.stop() // the call's own gate sets the shard up, not the retries
			<-sh.late.done
			s1.Restart(t)
			stalled := th // the read's command names its thread
			if call == "check" {
				stalled = "readyz"
			}
			p.stallOn(stalled)
			failed := make(chan error, 1)
			go func() {
				if call == "check" {
					failed <- sh.Check(t.Context())
					return
				}
				_, err := sh.Since(t.Context(), th, 0, 0)
				failed <- err
			}()
			assert.Eventually(t, 10*time.Second, "the call to reach shard 1", func() bool { return p.count(stalled) > 0 })
			assert.True(t, sh.late.gates[1].open.Load(), "the call reached shard 1 before its gate opened")
			p.cutOn(stalled) // no answer of shard 1 since the gate let the call through
			err := <-failed
			wantCode(t, err, chatrelay.StoreUnavailable)
			assert.True(t, sh.Shards()[1].down.Load(), "a call failed after its gate opened, with no answer since, and shard 1 is not marked down")
			if call == "check" {
				assert.True(t, store.Partial(err), "a check with shard 1 down, shard 0 up, is not store.Partial")
				assert.True(t, sh.down[1].Load(), "the check failed on shard 1, and does not find it down")
			}
		})
	}
}
