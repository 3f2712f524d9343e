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
// (32 random bytes, mode 0600) on first use, under the file's lock and
// through the same atomic write as thread documents, so that processes
// starting at once agree on one key and none ever sees half of one.
func KeyFile(path string, log *slog.Logger) func(ctx context.Context) ([]byte, error) {
	return func(ctx context.Context) ([]byte, error) {
		key, err := readKey(path)
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			return key, err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("ticket key: %w", err)
		}
		unlock, err := lockPath(ctx, path+".lock", chatrelay.DefaultLockTimeout)
		if err != nil {
			return nil, err
		}
		defer unlock()
		if key, err := readKey(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
			return key, err // another process made it meanwhile
		}
		key = make([]byte, minKey)
		rand.Read(key)
		f, _, err := writeFile(filepath.Dir(path), filepath.Base(path), key, true)
		if err != nil {
			return nil, fmt.Errorf("ticket key: %w", err)
		}
		f.Close()
		if log != nil {
			log.Info("created the ticket key", "file", path)
		}
		return key, nil
	}
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
