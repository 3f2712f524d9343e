package chatrelay

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"strings"
)

// The ids and the secrets chatrelay makes. An id is a prefix and a few
// random bytes in lowercase hex ("p_" + 8 hex). A secret shown once (a
// share or device token, an agent key) is a prefix and 43 base64url
// characters of 32 random bytes; the store keeps its digest (DigestOf).

// newID returns prefix and n (at most 16) random bytes in lowercase hex.
func newID(prefix string, n int) string {
	var b [16]byte
	rand.Read(b[:n])
	return prefix + hex.EncodeToString(b[:n])
}

// validID reports whether s has newID(prefix, n)'s form.
func validID(s, prefix string, n int) bool {
	rest, ok := strings.CutPrefix(s, prefix)
	return ok && len(rest) == 2*n && isLowerHex(rest)
}

// newSecret returns prefix and 43 base64url characters of 32 random bytes.
func newSecret(prefix string) string {
	var b [32]byte
	rand.Read(b[:])
	return prefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// validSecret reports whether s has newSecret(prefix)'s form.
func validSecret(s, prefix string) bool {
	rest, ok := strings.CutPrefix(s, prefix)
	return ok && len(rest) == 43 && isBase64URL(rest)
}

func isBase64URL(s string) bool {
	for _, c := range s {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
