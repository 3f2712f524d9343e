package transport_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestAttachmentRangeNotSatisfiable: a Range no byte of the file
// satisfies, or that does not parse, is an error like every other: 416 with the API's JSON body
// and code range_not_satisfiable (and Content-Range "bytes */size"), not
// net/http's plain-text "invalid range". A satisfiable Range is still a
// 206 of its bytes.
func TestAttachmentRangeNotSatisfiable(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{})
	tok := tokenN(1)
	a := e.mustUpload(tok, "digits.txt", "text/plain", []byte("0123456789"))
	for _, rg := range []string{"bytes=20-30", "bytes=abc", "bytes=5-2", "bytes=-0", "bytes=-0, -00"} {
		status, h, b := e.fetch(chatrelay.PathAttachments+"/"+a.ID, map[string]string{"X-Chat-Token": tok, "Range": rg})
		assert.Equal(t, rg+": status", status, http.StatusRequestedRangeNotSatisfiable)
		assertDownloadRefused(t, rg, h, b, "range_not_satisfiable")
		// Also for a Range that does not parse (docs/api.md: "with
		// Content-Range: bytes */SIZE"), which net/http answers without one.
		assert.Equal(t, rg+": Content-Range of a 416", h.Get("Content-Range"), "bytes */10")
	}
	status, _, b := e.fetch(chatrelay.PathAttachments+"/"+a.ID, map[string]string{"X-Chat-Token": tok, "Range": "bytes=8-"})
	assert.True(t, status == http.StatusPartialContent && string(b) == "89", "a satisfiable range: %d %q", status, b)
	// A suffix of no byte beside a satisfiable range is left out: never a
	// part whose Content-Range ends before it starts ("bytes 10-9/10").
	status, h, b := e.fetch(chatrelay.PathAttachments+"/"+a.ID, map[string]string{"X-Chat-Token": tok, "Range": "bytes=-0,8-"})
	assert.True(t, status == http.StatusPartialContent && string(b) == "89" && h.Get("Content-Range") == "bytes 8-9/10",
		"a satisfiable range beside -0: %d %q %q", status, h.Get("Content-Range"), b)
	// A zero-byte file ignores every Range (docs/api.md): an outside probe
	// got 206 with "Content-Range: bytes 0--1/0" for a suffix (net/http
	// serves it a part of no byte), and 416 for a Range that does not parse.
	empty := e.mustUpload(tok, "empty.txt", "text/plain", nil)
	for _, rg := range []string{"bytes=-0", "bytes=0-", "bytes=-1", "bytes=-5,0-", "bytes=abc", "bytes=18446744073709551615-"} {
		status, h, b = e.fetch(chatrelay.PathAttachments+"/"+empty.ID, map[string]string{"X-Chat-Token": tok, "Range": rg})
		assert.True(t, status == http.StatusOK && len(b) == 0 && h.Get("Content-Range") == "",
			"a zero-byte file ignores Range %s: %d %q, Content-Range %q", rg, status, b, h.Get("Content-Range"))
	}
}

// TestAttachmentIfRangeBeforeRange: a Range sent with an If-Range the
// file no longer matches (another ETag, a weak one, a date: the file
// has no Last-Modified) is ignored, whatever it asks (RFC 9110, 13.1.5):
// 200 with the whole file, which the client asked for in that case. A
// suffix of no byte was refused 416 before the If-Range was looked at.
func TestAttachmentIfRangeBeforeRange(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{})
	tok := tokenN(1)
	a := e.mustUpload(tok, "digits.txt", "text/plain", []byte("0123456789"))
	etag := `"` + a.SHA256 + `"`
	for _, ifRange := range []string{`"another"`, "W/" + etag, "Tue, 01 Dec 2026 10:00:00 GMT"} {
		for _, rg := range []string{"bytes=-0", "bytes=20-30", "bytes=abc", "bytes=8-"} {
			status, _, b := e.fetch(chatrelay.PathAttachments+"/"+a.ID, map[string]string{"X-Chat-Token": tok, "Range": rg, "If-Range": ifRange})
			assert.True(t, status == http.StatusOK && string(b) == "0123456789", "Range %s, If-Range %s: %d %q", rg, ifRange, status, b)
		}
	}
	status, _, b := e.fetch(chatrelay.PathAttachments+"/"+a.ID, map[string]string{"X-Chat-Token": tok, "Range": "bytes=8-", "If-Range": etag})
	assert.True(t, status == http.StatusPartialContent && string(b) == "89", "the file's own ETag: %d %q", status, b)
	status, _, _ = e.fetch(chatrelay.PathAttachments+"/"+a.ID, map[string]string{"X-Chat-Token": tok, "Range": "bytes=-0", "If-Range": etag})
	assert.Equal(t, "bytes=-0 with the file's own ETag", status, http.StatusRequestedRangeNotSatisfiable)
}

// TestAttachmentRangeUnits: a range unit is compared without case (RFC
// 9110, 14.1: "BYTES=8-" is a bytes Range, 206), and a Range of a unit
// the server does not know is ignored (14.2, a MUST: 200, the whole
// file), never refused as one that does not parse. An outside probe got
// 416 for both.
func TestAttachmentRangeUnits(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{})
	tok := tokenN(1)
	a := e.mustUpload(tok, "digits.txt", "text/plain", []byte("0123456789"))
	for _, rg := range []string{"BYTES=8-", "Bytes=8-9", " bytes=8-"} {
		status, h, b := e.fetch(chatrelay.PathAttachments+"/"+a.ID, map[string]string{"X-Chat-Token": tok, "Range": rg})
		assert.True(t, status == http.StatusPartialContent && string(b) == "89" && h.Get("Content-Range") == "bytes 8-9/10",
			"Range %q: %d %q, Content-Range %q", rg, status, b, h.Get("Content-Range"))
	}
	for _, rg := range []string{"items=0-5", "lines=1-2", "none=0-0"} {
		status, h, b := e.fetch(chatrelay.PathAttachments+"/"+a.ID, map[string]string{"X-Chat-Token": tok, "Range": rg})
		assert.True(t, status == http.StatusOK && string(b) == "0123456789" && h.Get("Content-Range") == "",
			"Range %q of another unit: %d %q, Content-Range %q", rg, status, b, h.Get("Content-Range"))
	}
}

// TestAttachmentPreconditionFailed: an If-Match the file does not match
// is an error like every other: 412 with the API's JSON body and code
// precondition_failed, without the file's name. An outside probe got
// net/http's 412 with no body at all (and the file's Content-Disposition).
// A matching If-Match still serves the file.
func TestAttachmentPreconditionFailed(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{})
	tok := tokenN(1)
	a := e.mustUpload(tok, "digits.txt", "text/plain", []byte("0123456789"))
	for _, h := range []map[string]string{
		{"If-Match": `"another"`},
		{"If-Match": `"another"`, "Range": "bytes=8-"},
		{"If-Match": "W/\"" + a.SHA256 + `"`}, // If-Match compares strongly
	} {
		h["X-Chat-Token"] = tok
		status, hd, b := e.fetch(chatrelay.PathAttachments+"/"+a.ID, h)
		assert.Equal(t, "status", status, http.StatusPreconditionFailed)
		assertDownloadRefused(t, fmt.Sprint(h), hd, b, "precondition_failed")
		assert.Equal(t, "the 412's ETag, the version the file has", hd.Get("ETag"), `"`+a.SHA256+`"`)
	}
	for _, im := range []string{`"` + a.SHA256 + `"`, "*", `"x", "` + a.SHA256 + `"`} {
		status, _, b := e.fetch(chatrelay.PathAttachments+"/"+a.ID, map[string]string{"X-Chat-Token": tok, "If-Match": im})
		assert.True(t, status == http.StatusOK && string(b) == "0123456789", "If-Match %s: %d %q", im, status, b)
	}
}

// TestAttachmentRangeThatDoesNotParse: a Range whose positions are not
// digits alone (RFC 9110's first-pos and last-pos are 1*DIGIT), or that
// names no range at all, does not parse: 416 range_not_satisfiable, as
// docs/api.md says. An outside probe got 206 for "bytes=+1-2" and
// "bytes=-+5" (strconv reads a sign) and 200 for "bytes=" and "bytes=,-0".
func TestAttachmentRangeThatDoesNotParse(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{})
	tok := tokenN(1)
	a := e.mustUpload(tok, "digits.txt", "text/plain", []byte("0123456789"))
	for _, rg := range []string{"bytes=+1-2", "bytes=-+5", "bytes=0-+1", "bytes=", "bytes=,", "bytes=,-0", "bytes=0-1,+3-4", "bytes=-5,x"} {
		status, h, b := e.fetch(chatrelay.PathAttachments+"/"+a.ID, map[string]string{"X-Chat-Token": tok, "Range": rg})
		assert.True(t, status == http.StatusRequestedRangeNotSatisfiable && h.Get("Content-Range") == "bytes */10",
			"%q: %d %q %s", rg, status, h.Get("Content-Range"), b)
	}
	// White space around a range and empty list elements are the list
	// syntax's (RFC 9110, 5.6.1): still a Range of its ranges.
	for rg, want := range map[string]string{"bytes= 8-": "89", "bytes=,8-": "89", "bytes=8- ,": "89", "bytes=-2": "89", "bytes=08-09": "89"} {
		status, _, b := e.fetch(chatrelay.PathAttachments+"/"+a.ID, map[string]string{"X-Chat-Token": tok, "Range": rg})
		assert.True(t, status == http.StatusPartialContent && string(b) == want, "%q: %d %q", rg, status, b)
	}
}

// TestAttachmentPreconditionsBeforeRange: If-Match (412) and
// If-None-Match (304) are judged before Range (416), as RFC 9110, 13.2.2
// orders them and http.ServeContent does, also for a Range the handler
// refuses itself (a suffix of no byte, a position with a sign). (review9)
func TestAttachmentPreconditionsBeforeRange(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{})
	tok := tokenN(1)
	a := e.mustUpload(tok, "digits.txt", "text/plain", []byte("0123456789"))
	etag := `"` + a.SHA256 + `"`
	for _, rg := range []string{"bytes=100-", "bytes=-0", "bytes=+1-2"} {
		for _, c := range []struct {
			header, value string
			want          int
		}{
			{"If-Match", `"another"`, http.StatusPreconditionFailed},
			{"If-None-Match", etag, http.StatusNotModified},
		} {
			status, _, b := e.fetch(chatrelay.PathAttachments+"/"+a.ID, map[string]string{"X-Chat-Token": tok, "Range": rg, c.header: c.value})
			if status != c.want {
				t.Errorf("%s %s, Range %q: %d %s, want %d", c.header, c.value, rg, status, b, c.want)
			}
		}
	}
}

// assertDownloadRefused checks that a download's refusal is the API's
// error, as every other: JSON with success false, the code, words and
// retryable false, and none of the file's headers (its name).
func assertDownloadRefused(t *testing.T, what string, h http.Header, b []byte, code string) {
	t.Helper()
	assert.Equal(t, what+": Content-Type", h.Get("Content-Type"), "application/json")
	var body struct {
		Success   *bool  `json:"success"`
		Code      string `json:"code"`
		Error     string `json:"error"`
		Retryable *bool  `json:"retryable"`
	}
	assert.Success(t, json.Unmarshal(b, &body))
	assert.True(t, body.Success != nil && !*body.Success && body.Code == code && body.Error != "" &&
		body.Retryable != nil && !*body.Retryable, "%s: %s", what, b)
	assert.Equal(t, what+": no Content-Disposition on an error", h.Get("Content-Disposition"), "")
}

// TestAttachmentRangePositionsPastInt64: a position is 1*DIGIT (RFC 9110,
// 14.1.1), of any length. A last-pos at or past the file's end means its
// end (14.1.2), a suffix longer than the file the whole file, and a
// first-pos past the end is a range no byte satisfies, left out beside
// others. An outside probe (probe13) got 416 for "bytes=0-99999999999999999999"
// and "bytes=-99999999999999999999": net/http reads a position with
// strconv.ParseInt, which refuses one past 2^63-1, so the whole Range was
// taken for one that does not parse.
func TestAttachmentRangePositionsPastInt64(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{})
	tok := tokenN(1)
	a := e.mustUpload(tok, "digits.txt", "text/plain", []byte("0123456789"))
	const huge = "99999999999999999999" // past 2^63-1
	for rg, want := range map[string]struct{ body, contentRange string }{
		"bytes=0-" + huge:             {"0123456789", "bytes 0-9/10"},
		"bytes=8-" + huge:             {"89", "bytes 8-9/10"},
		"bytes=-" + huge:              {"0123456789", "bytes 0-9/10"},
		"bytes=" + huge + "-,8-":      {"89", "bytes 8-9/10"},
		"bytes=8-9223372036854775807": {"89", "bytes 8-9/10"},
	} {
		status, h, b := e.fetch(chatrelay.PathAttachments+"/"+a.ID, map[string]string{"X-Chat-Token": tok, "Range": rg})
		assert.True(t, status == http.StatusPartialContent && string(b) == want.body && h.Get("Content-Range") == want.contentRange,
			"%q: %d %q, Content-Range %q", rg, status, b, h.Get("Content-Range"))
	}
	for _, rg := range []string{"bytes=" + huge + "-", "bytes=" + huge + "-" + huge} {
		status, h, b := e.fetch(chatrelay.PathAttachments+"/"+a.ID, map[string]string{"X-Chat-Token": tok, "Range": rg})
		assert.Equal(t, rg+": status", status, http.StatusRequestedRangeNotSatisfiable)
		assertDownloadRefused(t, rg, h, b, "range_not_satisfiable")
	}
}
