package filestore

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// BenchmarkAppend is one append through the file store: lock, read, write a
// temp file, rename; with fsync of the file and the folder, or without. With
// 0 messages each append creates a new thread (as a new tab's first post
// does; its files are removed off the clock, so the folder stays empty);
// a thread of 200 stays at 200 (retention drops one per append), so every
// append rewrites 200 messages.
func BenchmarkAppend(b *testing.B) {
	text := strings.Repeat("a benchmark message of ordinary length. ", 3)
	for _, fsync := range []bool{true, false} {
		for _, size := range []int{0, 200} {
			b.Run(fmt.Sprintf("fsync=%v/messages=%d", fsync, size), func(b *testing.B) {
				dir := b.TempDir()
				s, err := OpenFile(dir, FileOptions{NoFsync: !fsync, MaxThreads: 1 << 30, Log: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				ctx := context.Background()
				m := store.NewMessage{Author: chatrelay.Operator, Text: text}
				for range size {
					if _, err := s.Append(ctx, threadA, m); err != nil {
						b.Fatal(err)
					}
				}
				i := 0
				b.ReportAllocs()
				for b.Loop() {
					thread := threadA
					if size == 0 {
						i++
						thread = fmt.Sprintf("%016x", 1<<50+i)
					}
					if _, err := s.Append(ctx, thread, m); err != nil {
						b.Fatal(err)
					}
					if size == 0 {
						removeThread(b, dir, thread)
					}
				}
			})
		}
	}
}

// BenchmarkCreateThread is the append that creates a thread, with n other
// threads in the folder (each created thread is removed off the clock, so
// n stays n): its cost must not grow with n.
func BenchmarkCreateThread(b *testing.B) {
	for _, n := range []int{0, 10000} {
		b.Run(fmt.Sprintf("threads=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			s, err := OpenFile(dir, FileOptions{NoFsync: true, MaxThreads: 1 << 30, Log: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			m := store.NewMessage{Author: chatrelay.Operator, Text: "the first message of a new tab"}
			for i := range n {
				if _, err := s.Append(ctx, fmt.Sprintf("%016x", 1<<40+i), m); err != nil {
					b.Fatal(err)
				}
			}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				i++
				thread := fmt.Sprintf("%016x", 1<<50+i)
				if _, err := s.Append(ctx, thread, m); err != nil {
					b.Fatal(err)
				}
				removeThread(b, dir, thread)
			}
		})
	}
}

// removeThread removes a thread's document and lock file, off the clock.
// (The store's thread count keeps it until a sweep: the limit is off.)
func removeThread(b *testing.B, dir, thread string) {
	b.StopTimer()
	defer b.StartTimer()
	for _, name := range []string{thread + ".json", thread + ".json.lock"} {
		if err := os.Remove(filepath.Join(dir, "chat", name)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendBelowRetention is the common post: to a thread of 100
// to 200 messages that retention does not trim yet (the default keeps
// 200), so nothing but the new message changes. Each thread takes 100
// posts, then the next thread (its document, of 100 messages, written
// off the clock) takes over, so every b.N measures the same mix. With
// and without the thread's log (AppendLog).
func BenchmarkAppendBelowRetention(b *testing.B) {
	text := strings.Repeat("a benchmark message of ordinary length. ", 3)
	now := time.Now()
	var tmpl threadDoc
	for i := range 100 {
		at := now.Add(time.Duration(i-200) * time.Second).UTC()
		tmpl.msgs = append(tmpl.msgs, store.NewEntry(chatrelay.Message{
			ID: fmt.Sprintf("MSG-%s-%06x", at.Format("20060102-150405"), i), Epoch: at.UnixMilli(),
			TS: at.Format("2006-01-02T15:04:05+00:00"), Author: chatrelay.Operator, Text: text, Rev: at.UnixMilli(),
		}))
		tmpl.rev = at.UnixMilli()
	}
	for _, c := range []struct{ fsync, appendLog bool }{{true, false}, {true, true}, {false, false}, {false, true}} {
		b.Run(fmt.Sprintf("fsync=%v/append-log=%v", c.fsync, c.appendLog), func(b *testing.B) {
			dir := b.TempDir()
			s, err := OpenFile(dir, FileOptions{NoFsync: !c.fsync, AppendLog: c.appendLog, MaxThreads: 1 << 30, Log: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			m := store.NewMessage{Author: chatrelay.Operator, Text: text}
			var thread string
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				if i%100 == 0 {
					b.StopTimer()
					thread = fmt.Sprintf("%016x", 1<<50+i/100)
					// The version the store writes: 5 for a thread a store
					// with the log posts to.
					ver := 0
					if c.appendLog {
						ver = 5
					}
					doc := appendDocumentV(nil, thread, tmpl, ver)
					if err := os.WriteFile(filepath.Join(dir, "chat", thread+".json"), doc, 0o600); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				i++
				if _, err := s.Append(ctx, thread, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPushSubscriptions is the store's part of what every message
// hermes writes costs the pusher: the thread's push subscriptions read
// (5, each with its keys), unchanged since the last read, as they are
// between two subscribes.
func BenchmarkPushSubscriptions(b *testing.B) {
	s, ctx := benchThread(b)
	key := ecdhKey(b)
	for i := range 5 {
		sub := chatrelay.PushSubscription{ID: chatrelay.NewPushID(), Endpoint: fmt.Sprintf("https://push.example.com/wpush/v2/%040d", i),
			P256dh: key, Auth: base64.RawURLEncoding.EncodeToString(make([]byte, 16)), Events: chatrelay.PushEvents, CreatedAt: 1, Subscriber: chatrelay.SubscriberOwner}
		if _, _, err := s.PushSubscribe(ctx, threadA, sub); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		subs, err := s.PushSubscriptions(ctx, threadA)
		if err != nil || len(subs) != 5 {
			b.Fatal(len(subs), err)
		}
	}
}

// ecdhKey is a P-256 public key, base64url: a subscription's p256dh.
func ecdhKey(b *testing.B) string {
	k, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(k.PublicKey().Bytes())
}

// benchThread is a store (no fsync) in a folder of the benchmark's, closed
// at its end, whose thread threadA has one message.
func benchThread(b *testing.B) (*File, context.Context) {
	s, err := OpenFile(b.TempDir(), FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	ctx := context.Background()
	if _, err := s.Append(ctx, threadA, store.NewMessage{Author: chatrelay.Operator, Text: "hello"}); err != nil {
		b.Fatal(err)
	}
	return s, ctx
}
