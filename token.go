package chatrelay

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode/utf8"
)

// CheckText returns an *Error with code InvalidText or TextTooLong if text
// may not be stored. Text is rejected, never truncated.
func CheckText(text string) error {
	if !utf8.ValidString(text) {
		return Errorf(InvalidText, "text is not valid UTF-8")
	}
	if strings.TrimSpace(text) == "" {
		return Errorf(InvalidText, "text is empty")
	}
	if utf8.RuneCountInString(text) > MaxText {
		return Errorf(TextTooLong, "text too long (max %d chars)", MaxText)
	}
	return nil
}

// ValidThread reports whether s has the form of a thread id: 16 lowercase hex.
func ValidThread(s string) bool {
	return len(s) == 16 && isLowerHex(s)
}

// CheckThread is InvalidThread unless thread has the form of a thread id
// (ValidThread), the refusal every store and command gives.
func CheckThread(thread string) error {
	if !ValidThread(thread) {
		return Errorf(InvalidThread, "a thread id is 16 lowercase hex characters")
	}
	return nil
}

// ValidToken reports whether s has the form of a token: 64 lowercase hex.
func ValidToken(s string) bool {
	return len(s) == 64 && isLowerHex(s)
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ThreadOf returns the thread of a token: the first 16 hex characters of the
// SHA-256 of its 64 ASCII characters. The client never sends a thread.
func ThreadOf(token string) string {
	// The token's bytes and the hex digits in buffers on the stack: one
	// allocation (the string) a request, not two.
	var tb [64]byte
	sum := sha256.Sum256(append(tb[:0], token...))
	var b [16]byte
	hex.Encode(b[:], sum[:8])
	return string(b[:])
}
