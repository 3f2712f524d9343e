package transport

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"time"

	"github.com/chatrelay/chatrelay"
)

// The schema and the limits, as artifacts (contract Part 4): GET
// /api/schema.json, the JSON Schema bundle, and GET /api/limits.json,
// every limit with its unit and this server's rate windows, stream limits
// and retention. No token is needed. Each is rendered once, when the
// server is made, and served with a strong ETag: a client revalidates
// with If-None-Match and gets 304.

// artifactMaxAge is how long a client may use an artifact without
// revalidating it.
const artifactMaxAge = "public, max-age=300"

// artifact serves a rendered document with its ETag.
func artifact(body []byte, contentType string) http.HandlerFunc {
	sum := sha256.Sum256(body)
	etag := `"` + hex.EncodeToString(sum[:16]) + `"`
	return func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", contentType)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", artifactMaxAge)
		h.Set("ETag", etag)
		// ServeContent answers If-None-Match (304), HEAD and ranges.
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
	}
}

// schemaArtifact serves the bundle (application/schema+json, its media
// type).
func schemaArtifact() http.HandlerFunc {
	return artifact(chatrelay.Schema(), "application/schema+json")
}

// limitsArtifact serves the limits with this server's windows, stream
// limits and retention.
func (s *Server) limitsArtifact() http.HandlerFunc {
	b := chatrelay.LimitsArtifact(s.cfg.Windows, s.cfg.StreamLimits, s.cfg.Retention)
	if s.cfg.MaxAttachmentBytes != int64(chatrelay.LimitAttachmentBytes.Max) {
		b = withMaxAttachment(b, s.cfg.MaxAttachmentBytes)
	}
	return artifact(b, "application/json")
}

// withMaxAttachment is the limits artifact b stating max as the limit of
// one attachment (--max-attachment-bytes), rendered as b is.
func withMaxAttachment(b []byte, max int64) []byte {
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if dec.Decode(&doc) != nil {
		return b
	}
	limits, _ := doc["limits"].(map[string]any)
	l, _ := limits[chatrelay.LimitAttachmentBytes.Name].(map[string]any)
	if l == nil {
		return b
	}
	l["max"] = max
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if enc.Encode(doc) != nil {
		return b
	}
	return out.Bytes()
}
