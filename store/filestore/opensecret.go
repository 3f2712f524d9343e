package filestore

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

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
	return keptFile(ctx, s.openSecretPath(), "open_thread secret", readOpenSecret, store.NewOpenSecret, false, s.log)
}

func readOpenSecret(path string) ([]byte, error) {
	secret, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return store.CheckOpenSecret("open_thread secret "+path, secret, err)
}
