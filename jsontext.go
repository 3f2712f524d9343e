package chatrelay

import (
	"strconv"
	"unicode/utf8"
)

// ValidJSONText reports whether the JSON text s (a string literal, or a
// whole document, already known to decode) is text: valid UTF-8 that
// escapes no lone UTF-16 surrogate (LoneSurrogate). encoding/json would
// quietly decode either fault as U+FFFD; a request refuses it instead.
func ValidJSONText(s []byte) bool {
	return utf8.Valid(s) && !LoneSurrogate(s)
}

// LoneSurrogate reports whether the JSON text s (a string literal, or a
// whole document, already known to decode) escapes a UTF-16 surrogate
// that is not half of a pair, such as "\ud83d" from a sliced emoji: no
// UTF-8 text can hold it, and encoding/json would quietly decode it as
// U+FFFD.
func LoneSurrogate(s []byte) bool {
	hex4 := func(i int) rune { // the code unit of the \uXXXX escape at s[i]
		if i+6 > len(s) || s[i] != '\\' || s[i+1] != 'u' {
			return -1
		}
		n, err := strconv.ParseUint(string(s[i+2:i+6]), 16, 16)
		if err != nil {
			return -1
		}
		return rune(n)
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		r := hex4(i)
		switch {
		case r >= 0xd800 && r < 0xdc00:
			if lo := hex4(i + 6); lo < 0xdc00 || lo > 0xdfff {
				return true
			}
			i += 11
		case r >= 0xdc00 && r <= 0xdfff:
			return true
		default:
			i++ // skip the escaped character
		}
	}
	return false
}
