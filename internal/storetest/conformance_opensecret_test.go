package storetest

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
)

// TestConformanceOpenSecret: the secret open_thread derives a client_id's
// token from is made once when many stores of the same data (processes,
// nodes) need it at once: each gets the one kept, 32 bytes, and asks
// again get it again. The file store keeps it 0600.
func TestConformanceOpenSecret(t *testing.T) {
	Run(t, func(t *testing.T, backend string) {
		ctx := t.Context()
		b := Open(t, backend, Options{})
		const n = 8
		stores := []store.OpenSecrets{store.OpenSecretsOf(b.Store)}
		for range n - 1 {
			stores = append(stores, store.OpenSecretsOf(b.Another(t, Options{}).Store))
		}
		secrets := make([][]byte, n)
		var wg sync.WaitGroup
		for i, s := range stores {
			assert.True(t, s != nil, "the %s store keeps no open_thread secret", backend)
			wg.Go(func() {
				k, err := s.OpenSecret(ctx)
				assert.Success(t, err)
				secrets[i] = k
			})
		}
		wg.Wait()
		assert.Equal(t, "size", len(secrets[0]), store.OpenSecretSize)
		for _, k := range secrets[1:] {
			assert.True(t, slices.Equal(k, secrets[0]), "two stores got different secrets")
		}
		again, err := stores[n-1].OpenSecret(ctx)
		assert.Success(t, err)
		assert.True(t, slices.Equal(again, secrets[0]), "the secret changed")
		if !IsRedis(backend) {
			dir := b.Store.(interface{ Dir() string }).Dir()
			fi, err := os.Stat(filepath.Join(filepath.Dir(dir), "open.key"))
			assert.Success(t, err)
			assert.Equal(t, "open.key mode", fi.Mode().Perm(), os.FileMode(0o600))
		}
	})
}
