package chatrelay

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	segjson "github.com/segmentio/encoding/json"
)

// UnmarshalExactCase is json.Unmarshal with object keys matched to struct
// fields in their own case only, as the MCP SDK decodes: encoding/json
// would also take "METHOD" or "REQUESTID" for a field, and the last of
// two such keys, so a check decoding a message its own way could judge
// another message than the one the SDK then serves. Like the SDK's, it
// refuses data nested deeper than MaxJSONDepth before it decodes any of
// it: the decoder's work grows with the depth times the length (a
// megabyte of '[' took it minutes).
func UnmarshalExactCase(data []byte, v any) error {
	if tooDeep(data) {
		return errTooDeep
	}
	rest, err := segjson.Parse(data, v, segjson.DontMatchCaseInsensitiveStructFields)
	if err == nil && len(rest) > 0 {
		return errors.New("invalid character after top-level value")
	}
	return err
}

// MaxJSONDepth is how deep the MCP SDK's decoder lets JSON nest (objects
// and arrays, the outermost counted): its internal json's
// defaultMaxDepth, counted over a whole body, a batch's array too.
const MaxJSONDepth = 1000

var errTooDeep = fmt.Errorf("json: exceeded maximum nesting depth of %d", MaxJSONDepth)

// tooDeep reports whether data nests deeper than MaxJSONDepth, counted as
// the SDK counts (NestsDeeper).
func tooDeep(data []byte) bool { return NestsDeeper(data, MaxJSONDepth) }

// NestsDeeper reports whether data nests objects and arrays deeper than
// depth (the outermost counted), in one pass that skips strings and does
// not judge the rest, as the MCP SDK's internal json's checkMaxDepth
// counts: a closing bracket at depth 0 is passed over. For valid JSON it
// is the nesting depth encoding/json limits (to 10000).
func NestsDeeper(data []byte, depth int) bool {
	d := 0
	inString, escaped := false, false
	for _, b := range data {
		if inString {
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
			continue
		}
		switch b {
		case '"':
			inString = true
		case '{', '[':
			d++
			if d > depth {
				return true
			}
		case '}', ']':
			if d > 0 {
				d--
			}
		}
	}
	return false
}

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

// JSONProblem words a decoding error of encoding/json for a client, who
// knows JSON's types and field names, not the server's Go types: a field
// of the wrong type is "title must be a string" (its path as the decoder
// gives it: "blocks.text"); other errors lose their "json: " prefix. The
// words are cut to 200 code points: an unknown field's name is the
// client's, of any length.
func JSONProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return cut(te.Field, 200) + " must be " + jsonKind(te.Type)
	}
	return cut(strings.TrimPrefix(err.Error(), "json: "), 200)
}

// jsonKind names the JSON value a Go type decodes from.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "of another JSON type"
}
