package host_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/store"
)

// TestAttachRefusesBeforeStoringAny: a tool call whose files the input
// schema requires "data" of stored a file without it as an empty one
// (silent success), and a call whose second file was refused (a bad
// name, one byte past the limit) kept its first file as an upload no
// message names, counted against the thread's pending uploads for an
// hour. Every file is checked before any is stored: a file with no data
// is invalid_attachment (data "" is an empty file), and a refused call
// stores nothing.
func TestAttachRefusesBeforeStoringAny(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	b := storetest.OpenFileIn(t, dir, storetest.Options{})
	const thread = "00000000000000b2"
	_, err := b.Store.Append(ctx, thread, store.NewMessage{Text: "hello"})
	assert.Success(t, err)
	v := &host.Verbs{Store: b.Store, MaxAttachmentBytes: 4}
	stored := func() int { return storedFiles(dir, thread) }
	ok := host.AttachmentInput{Name: "ok.txt", Data: []byte("hi")}
	for _, c := range []struct {
		name  string
		files []host.AttachmentInput
		code  chatrelay.Code
	}{
		{"a file without data", []host.AttachmentInput{{Name: "nodata.txt"}}, chatrelay.InvalidAttachment},
		{"a second file without data", []host.AttachmentInput{ok, {Name: "nodata.txt"}}, chatrelay.InvalidAttachment},
		{"a second file with a bad name", []host.AttachmentInput{ok, {Name: "[]<>", Data: []byte("x")}}, chatrelay.InvalidAttachment},
		{"a second file past the limit", []host.AttachmentInput{ok, {Name: "big.bin", Data: []byte("12345")}}, chatrelay.AttachmentTooLarge},
	} {
		_, err := v.Send(ctx, host.SendInput{Thread: thread, Text: c.name, Attachments: c.files})
		assert.Code(t, err, c.code)
		assert.Equal(t, c.name+": files stored", stored(), 0)
	}
	big := filepath.Join(t.TempDir(), "big.bin")
	assert.Success(t, os.WriteFile(big, []byte("12345"), 0o600))
	f, err := os.Open(big)
	assert.Success(t, err)
	defer f.Close()
	_, err = v.Send(ctx, host.SendInput{Thread: thread, Text: "a file past the limit", Attachments: []host.AttachmentInput{ok, {Name: "big.bin", Body: f}}})
	assert.Code(t, err, chatrelay.AttachmentTooLarge)
	assert.Equal(t, "a file past the limit: files stored", stored(), 0)
	r, err := v.Send(ctx, host.SendInput{Thread: thread, Text: "empty", Attachments: []host.AttachmentInput{{Name: "empty.txt", Data: []byte{}}}})
	assert.Success(t, err)
	assert.True(t, len(r.Message) > 0, "an empty file (data \"\") is sent")
}

// TestAttachRefusesAClientIDBeforeStoring: a call with files and a
// client_id it could never store under (one that does not match the
// pattern, or one a stored message carries with other files) uploaded its
// files, then was refused (invalid_client_id, client_id_conflict): the
// refused call kept them as uploads no message names, counted against the
// thread's 100 pending uploads and its 100 MiB for an hour. Both are known
// before any file is stored, and a refused call stores nothing.
func TestAttachRefusesAClientIDBeforeStoring(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	b := storetest.OpenFileIn(t, dir, storetest.Options{})
	const thread = "00000000000000b3"
	_, err := b.Store.Append(ctx, thread, store.NewMessage{Text: "hello"})
	assert.Success(t, err)
	v := &host.Verbs{Store: b.Store}
	stored := func() int { return storedFiles(dir, thread) }
	file := func(name, data string) []host.AttachmentInput {
		return []host.AttachmentInput{{Name: name, Data: []byte(data)}}
	}
	_, err = v.Send(ctx, host.SendInput{Thread: thread, Text: "x", ClientID: "bad id!", Attachments: file("a.txt", "a")})
	assert.Code(t, err, chatrelay.InvalidClientID)
	_, err = v.SendCard(ctx, host.SendCardInput{Thread: thread, ClientID: "bad id!", Attachments: file("a.txt", "a"),
		Card: &chatrelay.Card{FallbackText: "f", Blocks: []chatrelay.Block{{Type: "text", Text: "t"}}}})
	assert.Code(t, err, chatrelay.InvalidClientID)
	_, err = v.RequestApproval(ctx, host.RequestApprovalInput{Thread: thread, Summary: "ok?", ClientID: "bad id!", Attachments: file("a.txt", "a")})
	assert.Code(t, err, chatrelay.InvalidClientID)
	assert.Equal(t, "files stored after an invalid client_id", stored(), 0)

	_, err = v.Send(ctx, host.SendInput{Thread: thread, Text: "x", ClientID: "k1", Attachments: file("a.txt", "a")})
	assert.Success(t, err)
	_, err = v.Send(ctx, host.SendInput{Thread: thread, Text: "x", ClientID: "k1", Attachments: file("b.txt", "b")})
	assert.Code(t, err, chatrelay.ClientIDConflict)
	_, err = v.Send(ctx, host.SendInput{Thread: thread, Text: "y", ClientID: "k2"})
	assert.Success(t, err)
	_, err = v.Send(ctx, host.SendInput{Thread: thread, Text: "y", ClientID: "k2", Attachments: file("c.txt", "c")})
	assert.Code(t, err, chatrelay.ClientIDConflict)
	assert.Equal(t, "files stored after a client_id of another message", stored(), 1)
}

// storedFiles counts the files a file store in dir holds for thread (its
// attachments' bytes, not their index).
func storedFiles(dir, thread string) int {
	es, _ := os.ReadDir(filepath.Join(dir, "chat", thread+".files"))
	n := 0
	for _, e := range es {
		if e.Name() != "index.json" {
			n++
		}
	}
	return n
}
