package filestore

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// A folder whose paths do not fit in a pathBuf takes the string calls:
// posts to a thread there are stored and read back as anywhere else.
func TestLongFolderPath(t *testing.T) {
	dir := t.TempDir()
	for len(dir) <= pathBufSize {
		dir = filepath.Join(dir, strings.Repeat("d", 100))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := OpenFile(dir, FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for _, text := range []string{"first", "second", "third"} { // a creation, then two replaces
		if _, err := s.Append(ctx, threadA, store.NewMessage{Author: chatrelay.Operator, Text: text}); err != nil {
			t.Fatal(err)
		}
	}
	other, err := OpenFile(dir, FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	pg, err := other.Since(ctx, threadA, 0, 50)
	if err != nil || len(pg.Messages) != 3 || pg.Messages[2].Text != "third" {
		t.Fatalf("another store reads %d messages (%v), want the three posted", len(pg.Messages), err)
	}
	des, _ := os.ReadDir(filepath.Join(dir, "chat"))
	for _, de := range des {
		if strings.Contains(de.Name(), ".tmp-") {
			t.Errorf("a temp file is left: %s", de.Name())
		}
	}
}

// pathBuf's paths are the joined strings, in the buffer or past it, and a
// temp file's name is one the sweep knows as the thread's.
func TestPathBuf(t *testing.T) {
	for _, dir := range []string{"/data/chat", "/" + strings.Repeat("x", pathBufSize)} {
		var p pathBuf
		p.set(dir, threadA, ".json")
		if got, want := p.String(), dir+"/"+threadA+".json"; got != want {
			t.Errorf("set = %q, want %q", got, want)
		}
		p.setTemp(dir, threadA, ".json")
		base := filepath.Base(p.String())
		if filepath.Dir(p.String()) != dir || !strings.HasPrefix(base, "."+threadA+".json.tmp-") || len(base) == len("."+threadA+".json.tmp-") {
			t.Errorf("setTemp = %q, want %s/.%s.json.tmp-<random>", p.String(), dir, threadA)
		}
		if th, lock := orphanOf(base); th != threadA || lock {
			t.Errorf("the sweep sees %q as thread %q's (lock %v), want %q's temp file", base, th, lock, threadA)
		}
	}
}
