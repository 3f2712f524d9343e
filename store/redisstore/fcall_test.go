package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestFCallArgs: the store's FCALL is go-redis's FCall, argument for
// argument as go-redis writes them (a *string as its string), and its
// keys and text arguments are no allocation each: an append's 14 to 16
// keys cost what 2 do.
func TestFCallArgs(t *testing.T) {
	keys := []string{"p:{t}:meta", "p:{t}:log", "p:index"}
	x, y := "thread", "settings"
	args := []any{&x, "plain", int64(1733300000000), &y}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialed: a pipeline only queues
	defer rdb.Close()
	want := rdb.Pipeline().FCall(t.Context(), appendScript.name, keys, "thread", "plain", int64(1733300000000), "settings").Args()
	got := fcallArgs(appendScript, keys, args)
	if text(got) != text(want) {
		t.Fatalf("FCALL sent as %s, want go-redis's %s", text(got), text(want))
	}

	allocs := func(n int) float64 {
		keys := make([]string, n)
		texts := make([]string, n)
		args := make([]any, n)
		for i := range n {
			keys[i] = fmt.Sprint("p:{t}:", i)
			texts[i] = fmt.Sprint("argument ", i)
			args[i] = &texts[i]
		}
		return testing.AllocsPerRun(100, func() { fcallArgs(appendScript, keys, args) })
	}
	if few, many := allocs(2), allocs(16); many != few {
		t.Fatalf("FCALL's arguments with 16 keys and 16 texts cost %v allocations, with 2 each %v: want the same", many, few)
	}
}

// text is the arguments as go-redis writes them: a *string as its string.
func text(args []any) string {
	s := ""
	for _, a := range args {
		if p, ok := a.(*string); ok {
			a = *p
		}
		s += fmt.Sprintf("%q ", fmt.Sprint(a))
	}
	return s
}

// TestFCallOfTakeWaitsForNoReplica: with wait-replicas, an FCALL of the
// rate windows' take (bookkeeping, noWaitScripts) is sent without a
// WAIT, an append's with one, the function's name being a *string.
func TestFCallOfTakeWaitsForNoReplica(t *testing.T) {
	for _, c := range []struct {
		ls   *luaScript
		want bool
	}{{takeScript, false}, {appendScript, true}} {
		cmd := redis.NewCmd(t.Context(), fcallArgs(c.ls, []string{"k"}, nil)...)
		if got := needsWait(cmd); got != c.want {
			t.Errorf("an FCALL of %s needs a WAIT: %v, want %v", c.ls.fn, got, c.want)
		}
	}
}

// TestAppendSettingsKept: an append's settings text is made once for a
// set of rate windows and sent again as it is (no allocation), and a
// call with other windows, or none, gets its own.
func TestAppendSettingsKept(t *testing.T) {
	s := &Store{pubFeed: "chatrelay:feed"}
	s.opt.Retention.Messages, s.opt.Retention.Age = 50, time.Hour
	l := &RateLimiter{window: time.Minute}
	both := &rateTake{l: l, w: []rateWindow{{limit: 30}, {limit: 60}}}
	thread := &rateTake{l: l, w: []rateWindow{{limit: 30}}}
	for _, c := range []struct {
		rt   *rateTake
		want string
	}{
		{both, "50 3600000 60000 30 60 chatrelay:feed"},
		{nil, "50 3600000 0 0 0 chatrelay:feed"},
		{thread, "50 3600000 60000 30 0 chatrelay:feed"},
		{both, "50 3600000 60000 30 60 chatrelay:feed"},
	} {
		if got := s.appendSettings(c.rt); got != c.want {
			t.Fatalf("appendSettings = %q, want %q", got, c.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { s.appendSettings(both) }); n != 0 {
		t.Fatalf("the same settings again cost %v allocations, want 0", n)
	}
}

// TestHeldScriptWaitsForNoReplica: the look that settles a lost append's
// address count only reads, so it is sent without a WAIT: with a replica
// behind, a WAIT would fail it and leave a post that was not stored
// counted.
func TestHeldScriptWaitsForNoReplica(t *testing.T) {
	cmd := redis.NewCmd(t.Context(), "evalsha", heldScript.Hash(), 1, "k", "MSG-1")
	if needsWait(cmd) {
		t.Error("heldScript needs a WAIT, want none: it only reads")
	}
}

// TestScriptRefusedNotByItsWait: an error reply to the script is the
// script's refusal (its rate entries are undone); one to the WAIT after
// it is not (the script ran: its post is stored and counts), nor is a
// failure without an answer.
func TestScriptRefusedNotByItsWait(t *testing.T) {
	reply := errorReply("ERR refused")
	for _, c := range []struct {
		err  error
		want bool
	}{
		{reply, true},
		{&notReplicatedError{want: 1, err: reply}, false},
		{&notReplicatedError{want: 1, got: 0}, false},
		{context.DeadlineExceeded, false},
	} {
		if got := scriptRefused(c.err); got != c.want {
			t.Errorf("scriptRefused(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
