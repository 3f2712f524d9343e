package chatrelay

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"image"
	_ "image/gif" // image.DecodeConfig reads their headers
	_ "image/jpeg"
	_ "image/png"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
)

// Attachments (contract Part 5): a file uploaded first, then named by id
// in a post. The bytes are the store's (store.Attachments); the domain
// says what an attachment is, how its name is cleaned, how a v1 client
// is told of it, and how its type is decided from its bytes.

// Attachment is the attachment object: what a v2 message carries and the
// upload answers. Width and Height are an image's, read from its header
// only (never a full decode).
type Attachment struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Type   string `json:"type"` // the media type the uploader sent (its word only: never how it is served)
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // lowercase hex of the bytes' digest
	Width  int    `json:"width,omitempty"`
	Height int    `json:"height,omitempty"`
}

// AttachmentIDPattern is an attachment's id: "at_" and 12 lowercase hex.
var AttachmentIDPattern = regexp.MustCompile(`^at_[0-9a-f]{12}$`)

// NewAttachmentID returns a fresh attachment id.
func NewAttachmentID() string {
	return newID("at_", 6)
}

// CleanAttachmentName cleans an attachment's name as a participant's name
// is cleaned (CleanName) and cuts it to LimitAttachmentName; a name empty
// once cleaned is InvalidAttachment.
func CleanAttachmentName(name string) (string, error) {
	s := cleanName(name, LimitAttachmentName.Max)
	if s == "" {
		return "", Errorf(InvalidAttachment, "the file name is empty once cleaned "+cleanedAway)
	}
	return s, nil
}

// CleanMediaType returns the media type an uploader sent, as it is kept:
// its type/subtype in lower case, without parameters (unread), or
// "application/octet-stream" for anything that is not one concrete media
// type: a type and a subtype each an RFC 6838 restricted-name (a letter or
// digit, then letters, digits and !#$&-^_.+), so never a range of an
// Accept header (*/*, image/*), which no file is. It is the uploader's
// word, shown with the file; how the file is served is decided from its
// bytes (ServedType).
func CleanMediaType(ct string) string {
	t, _, _ := strings.Cut(ct, ";")
	t = strings.ToLower(strings.TrimSpace(t))
	main, sub, ok := strings.Cut(t, "/")
	if !ok || !restrictedName(main) || !restrictedName(sub) || len(t) > 127 {
		return "application/octet-stream"
	}
	return t
}

// restrictedName reports whether s is an RFC 6838 restricted-name (section
// 4.2): 1 to 127 of letters, digits and !#$&-^_.+, the first a letter or a
// digit.
func restrictedName(s string) bool {
	if s == "" || len(s) > 127 || !isAlnum(s[0]) {
		return false
	}
	for _, c := range []byte(s) {
		if !isAlnum(c) && strings.IndexByte("!#$&-^_.+", c) < 0 {
			return false
		}
	}
	return true
}

// UnusableAttachment is the refusal of a post naming id, an attachment
// id that is not an upload of the thread that no message names yet
// (unknown, another thread's, on a message already, gone, or another
// participant's draft), in the same words on every store.
func UnusableAttachment(id string) *Error {
	return Errorf(InvalidAttachment, "attachment %s is not an upload of this conversation that no message names yet (unknown here, or on a message already)", id)
}

// FormatSize is an attachment's size as the v1 line states it: bytes
// below 1 KiB ("812 B"), else KiB or MiB with one decimal, rounded down
// ("1.5 KiB", "10.0 MiB"); 1 KiB is 1 024 bytes.
func FormatSize(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%d.%d KiB", n>>10, (n%(1<<10))*10>>10)
	default:
		return fmt.Sprintf("%d.%d MiB", n>>20, (n%(1<<20))*10>>20)
	}
}

// AttachmentLine is the line a v1 message's text gets for a: "[attachment:
// NAME (SIZE)]".
func AttachmentLine(a Attachment) string {
	return "[attachment: " + a.Name + " (" + FormatSize(a.Size) + ")]"
}

// V1Text is m's text as a v1 client reads it: the stored text, then one
// line per attachment, so that a v1 client sees that something was sent.
func V1Text(m Message) string {
	if len(m.Attachments) == 0 {
		return m.Text
	}
	lines := make([]string, 0, len(m.Attachments)+1)
	if m.Text != "" {
		lines = append(lines, m.Text)
	}
	for _, a := range m.Attachments {
		lines = append(lines, AttachmentLine(a))
	}
	return strings.Join(lines, "\n")
}

// CheckAttachmentIDs checks the ids a post names: at most
// LimitAttachments (TooManyAttachments), each an attachment id, none twice
// (InvalidAttachment). Whether each is an unused upload of the thread is
// the store's to say.
func CheckAttachmentIDs(ids []string) error {
	if len(ids) > LimitAttachments.Max {
		return Errorf(TooManyAttachments, "%d attachments: a message carries at most %d", len(ids), LimitAttachments.Max)
	}
	for i, id := range ids {
		if !AttachmentIDPattern.MatchString(id) {
			return Errorf(InvalidAttachment, "attachments[%d] is not an attachment id (at_ and 12 lowercase hex)", i)
		}
		if slices.Contains(ids[:i], id) {
			return Errorf(InvalidAttachment, "attachment %s is named twice", id)
		}
	}
	return nil
}

// AttachmentIDs lists the ids of as.
func AttachmentIDs(as []Attachment) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.ID
	}
	return out
}

// ImageSize reads the width and height of a PNG, JPEG, GIF or WebP image
// from its header (image.DecodeConfig, and the WebP header here: never a
// full decode). ok is false for anything else, or a header that does not
// parse.
func ImageSize(r io.Reader) (width, height int, ok bool) {
	var head [30]byte
	n, _ := io.ReadFull(r, head[:])
	if w, h, ok := webpSize(head[:n]); ok {
		return w, h, true
	}
	c, _, err := image.DecodeConfig(io.MultiReader(bytes.NewReader(head[:n]), r))
	if err != nil || c.Width <= 0 || c.Height <= 0 {
		return 0, 0, false
	}
	return c.Width, c.Height, true
}

// webpSize reads a WebP header (RIFF, WEBP, then a VP8, VP8L or VP8X chunk).
func webpSize(b []byte) (int, int, bool) {
	if len(b) < 30 || string(b[0:4]) != "RIFF" || string(b[8:12]) != "WEBP" {
		return 0, 0, false
	}
	u24 := func(p []byte) int { return int(p[0]) | int(p[1])<<8 | int(p[2])<<16 }
	switch string(b[12:16]) {
	case "VP8 ": // lossy: a key frame's start code, then 14-bit sizes
		if b[23] != 0x9d || b[24] != 0x01 || b[25] != 0x2a {
			return 0, 0, false
		}
		w, h := int(binary.LittleEndian.Uint16(b[26:28])&0x3fff), int(binary.LittleEndian.Uint16(b[28:30])&0x3fff)
		return w, h, w > 0 && h > 0
	case "VP8L": // lossless: a signature byte, then 14-bit sizes minus one
		if b[20] != 0x2f {
			return 0, 0, false
		}
		bits := binary.LittleEndian.Uint32(b[21:25])
		return int(bits&0x3fff) + 1, int(bits>>14&0x3fff) + 1, true
	case "VP8X": // extended: 24-bit sizes minus one
		return u24(b[24:27]) + 1, u24(b[27:30]) + 1, true
	}
	return 0, 0, false
}

// ServedType decides how an attachment is served from its first bytes
// (up to 512), never from the uploader's word: a PNG, JPEG, GIF or WebP
// image inline with its type; anything else (SVG and HTML included) as
// application/octet-stream, a download.
func ServedType(head []byte) (contentType string, inline bool) {
	switch t := http.DetectContentType(head); t {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
		return t, true
	}
	return "application/octet-stream", false
}
