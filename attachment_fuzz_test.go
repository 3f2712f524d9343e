package chatrelay_test

import (
	"bytes"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/chatrelay/chatrelay"
)

// FuzzImageSize: an upload's bytes are untrusted, and ImageSize reads the
// width and height of an image from them (its own WebP header reader, and
// image.DecodeConfig's). It never panics, a size it reads is positive, it
// reads the same size whatever the chunks the bytes arrive in, and the
// decision how a file is served (ServedType) is one of the four images
// inline or a download of application/octet-stream.
func FuzzImageSize(f *testing.F) {
	for _, s := range []string{
		"",
		"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x03\x00\x00\x00\x02\b\x02\x00\x00\x00",
		"GIF89a\x01\x00\x01\x00\x00\x00\x00;",
		"\xff\xd8\xff\xc0\x00\x11\x08\x00\x10\x00\x20\x03\x01\x22\x00\x02\x11\x01\x03\x11\x01",
		"RIFF\x1e\x00\x00\x00WEBPVP8X\n\x00\x00\x00\x00\x00\x00\x00c\x00\x001\x00\x00",
		"RIFF\x1e\x00\x00\x00WEBPVP8L\n\x00\x00\x00\x2f\xff\xff\xff\xff\x00\x00\x00\x00\x00",
		"RIFF\x1e\x00\x00\x00WEBPVP8 \n\x00\x00\x00\x00\x00\x00\x9d\x01\x2a\x00\x00\x00\x00",
		"<svg xmlns=\"http://www.w3.org/2000/svg\"/>",
		"<!DOCTYPE html><script>alert(1)</script>",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		w, h, ok := chatrelay.ImageSize(bytes.NewReader(b))
		if ok && (w <= 0 || h <= 0) {
			t.Fatalf("ImageSize(%q) = %d×%d, ok", b, w, h)
		}
		if !ok && (w != 0 || h != 0) {
			t.Fatalf("ImageSize(%q) = %d×%d, not ok", b, w, h)
		}
		w1, h1, ok1 := chatrelay.ImageSize(iotest.OneByteReader(bytes.NewReader(b)))
		if w1 != w || h1 != h || ok1 != ok {
			t.Fatalf("ImageSize(%q) = %d×%d %v, but %d×%d %v a byte at a time", b, w, h, ok, w1, h1, ok1)
		}
		ct, inline := chatrelay.ServedType(b[:min(len(b), 512)])
		switch {
		case inline && ct != "image/png" && ct != "image/jpeg" && ct != "image/gif" && ct != "image/webp":
			t.Fatalf("ServedType(%q) = %s inline", b, ct)
		case !inline && ct != "application/octet-stream":
			t.Fatalf("ServedType(%q) = %s as a download", b, ct)
		}
	})
}

// FuzzCleanMediaType: an upload's Content-Type is the uploader's word,
// kept as its attachment's type. What is kept is a bare media type
// (type/subtype, two RFC 6838 restricted-names in lower case, at most 127
// bytes: never a range such as */* or image/*) or
// application/octet-stream, and cleaning it again keeps it as it is.
func FuzzCleanMediaType(f *testing.F) {
	for _, s := range []string{"", "text/plain", "Text/Plain; charset=utf-8", "a/b/c", "image/svg+xml", "/", "a/", "/b",
		"multipart/form-data; boundary=x", "t\u00e9xt/plain", "a b/c", "application/" + strings.Repeat("x", 200), " image/png ;",
		"*/*", "image/*", "*/png", "-x/y", "text/x-c++src"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ct string) {
		got := chatrelay.CleanMediaType(ct)
		if again := chatrelay.CleanMediaType(got); again != got {
			t.Fatalf("CleanMediaType(%q) = %q, cleaned again %q", ct, got, again)
		}
		main, sub, ok := strings.Cut(got, "/")
		if !ok || main == "" || sub == "" || len(got) > 127 || got != strings.ToLower(got) ||
			strings.ContainsAny(got, " \t;\"(),:<=>?@[\\]{}*%'`|~") || !isAlnumByte(main[0]) || !isAlnumByte(sub[0]) || strings.Contains(sub, "/") {
			t.Fatalf("CleanMediaType(%q) = %q: not a bare media type", ct, got)
		}
		for _, c := range []byte(got) {
			if c <= ' ' || c >= 0x7f {
				t.Fatalf("CleanMediaType(%q) = %q: byte %#x", ct, got, c)
			}
		}
	})
}

func isAlnumByte(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
}
