package store

import (
	"context"
	"crypto/rand"
	"fmt"
)

// OpenSecrets is a store that keeps the secret open_thread derives the
// token of a thread opened with a client_id from (host.OpenThread): made
// from crypto/rand on first use and kept, the same secret for every
// process and node of the store, as the VAPID key is (Push). A backend
// that keeps it implements it; the host finds it by a type assertion.
type OpenSecrets interface {
	// OpenSecret returns the secret (OpenSecretSize bytes), made and
	// kept on first use: when several processes or nodes make it at
	// once, every one of them gets the one that was kept.
	OpenSecret(ctx context.Context) ([]byte, error)
}

// OpenSecretSize is the size of the open_thread secret in bytes.
const OpenSecretSize = 32

// NewOpenSecret is a fresh secret of OpenSecretSize bytes from the
// system's CSPRNG.
func NewOpenSecret() []byte {
	b := make([]byte, OpenSecretSize)
	rand.Read(b) // never fails (crypto/rand)
	return b
}

// CheckOpenSecret checks the secret as a backend read it (secret, or the
// read's error err): a failed read, or a secret of another size, is an
// error that names where it is kept (never the secret itself).
func CheckOpenSecret(where string, secret []byte, err error) ([]byte, error) {
	if err == nil && len(secret) != OpenSecretSize {
		err = fmt.Errorf("the secret is %d bytes, not %d", len(secret), OpenSecretSize)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return secret, nil
}

// OpenSecretsOf is st's OpenSecrets (st's Store's, for a Backend), or nil
// if it keeps no secret.
func OpenSecretsOf(st Store) OpenSecrets {
	if b, ok := st.(*Backend); ok {
		st = b.Store
	}
	o, _ := st.(OpenSecrets)
	return o
}
