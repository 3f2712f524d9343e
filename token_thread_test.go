package chatrelay

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// TestThreadOfIsOneAllocation: a token's thread is the first 16 hex
// characters of its SHA-256, found with one allocation (the string) on
// every request that carries a token.
func TestThreadOfIsOneAllocation(t *testing.T) {
	token := strings.Repeat("0123456789abcdef", 4)
	sum := sha256.Sum256([]byte(token))
	if got, want := ThreadOf(token), hex.EncodeToString(sum[:])[:16]; got != want {
		t.Fatalf("ThreadOf = %q, want %q", got, want)
	}
	if n := testing.AllocsPerRun(100, func() { ThreadOf(token) }); n != 1 {
		t.Errorf("ThreadOf allocates %v times, want 1", n)
	}
}
