package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// The secret open_thread derives a client_id's token from (store.OpenSecrets)
// is <data>/open.key (0600): 32 bytes, made under the file's lock on first
// use, as the VAPID key is (push.go), so that two processes that need it
// at once (the server and the host CLI) keep one.

var _ store.OpenSecrets = (*File)(nil)

func (s *File) openSecretPath() string { return filepath.Join(filepath.Dir(s.dir), "open.key") }

// OpenSecret implements store.OpenSecrets.
func (s *File) OpenSecret(ctx context.Context) ([]byte, error) {
	path := s.openSecretPath()
	secret, err := readOpenSecret(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return secret, err
	}
	unlock, err := lockPath(ctx, path+".lock", chatrelay.DefaultLockTimeout)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if secret, err := readOpenSecret(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return secret, err // another process made it meanwhile
	}
	secret = store.NewOpenSecret()
	f, _, err := writeFile(filepath.Dir(path), filepath.Base(path), secret, true)
	if err != nil {
		return nil, fmt.Errorf("open_thread secret: %w", err)
	}
	f.Close()
	s.log.Info("made the open_thread secret", "file", path)
	return secret, nil
}

func readOpenSecret(path string) ([]byte, error) {
	secret, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return store.CheckOpenSecret("open_thread secret "+path, secret, err)
}
