package filestore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/chatrelay/chatrelay"
)

// minKey is the shortest ticket key accepted, in bytes.
const minKey = 32

func keyPath(data string) string { return filepath.Join(data, "ticket.key") }

// KeyFile returns a ticket key source reading path: the key is created
// (32 random bytes, mode 0600) on first use (keptFile).
func KeyFile(path string, log *slog.Logger) func(ctx context.Context) ([]byte, error) {
	return func(ctx context.Context) ([]byte, error) {
		return keptFile(ctx, path, "ticket key", readKey, func() []byte {
			key := make([]byte, minKey)
			rand.Read(key)
			return key
		}, false, log)
	}
}

// keptFile returns the key kept at path (read), made (fresh) on first use
// or always if rotate: written 0600 under the file's lock and through the
// same atomic write as thread documents, so that processes that need it at
// once agree on one and none ever sees half of one. what names it in the
// log (info, with the path) and in a failure.
func keptFile(ctx context.Context, path, what string, read func(string) ([]byte, error), fresh func() []byte, rotate bool, log *slog.Logger) ([]byte, error) {
	if !rotate {
		if key, err := read(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
			return key, err
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	unlock, err := lockPath(ctx, path+".lock", chatrelay.DefaultLockTimeout)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if !rotate {
		if key, err := read(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
			return key, err // another process made it meanwhile
		}
	}
	key := fresh()
	f, _, err := writeFile(filepath.Dir(path), filepath.Base(path), key, true)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	f.Close()
	if log != nil {
		log.Info("made the "+what, "file", path, "rotated", rotate)
	}
	return key, nil
}

func readKey(path string) ([]byte, error) {
	key, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("ticket key: %w", err)
	}
	if len(key) < minKey {
		return nil, fmt.Errorf("ticket key %s: want at least %d bytes, has %d", path, minKey, len(key))
	}
	return key, nil
}
