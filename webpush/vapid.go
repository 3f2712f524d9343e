package webpush

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"strings"
	"time"
)

// MaxJWTLife is the longest a VAPID JWT may live (RFC 8292 §2: exp no
// more than 24 hours from the request). JWTLife is what Sign gives one.
const (
	MaxJWTLife = 24 * time.Hour
	JWTLife    = 12 * time.Hour
)

// VAPID is the server's VAPID key pair (RFC 8292, P-256) and its
// contact (the JWT's sub: "mailto:…" or "https://…"). It is safe for
// concurrent use.
type VAPID struct {
	key     *ecdsa.PrivateKey
	public  string // base64url of the uncompressed public point: the k parameter
	Subject string
}

// NewVAPIDKey makes a fresh key pair and returns its private key, raw
// (SEC 1: the 32-byte big-endian scalar), as a store keeps it.
func NewVAPIDKey() []byte {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	b, _ := k.Bytes()
	return b
}

// ParseVAPID reads a raw private key (NewVAPIDKey's form).
func ParseVAPID(raw []byte, subject string) (*VAPID, error) {
	k, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), raw)
	if err != nil {
		return nil, fmt.Errorf("webpush: VAPID key: %w", err)
	}
	pub, err := k.PublicKey.Bytes()
	if err != nil {
		return nil, fmt.Errorf("webpush: VAPID key: %w", err)
	}
	return &VAPID{key: k, public: base64.RawURLEncoding.EncodeToString(pub), Subject: subject}, nil
}

// PublicKey is the public key as a browser's PushManager.subscribe takes
// it (applicationServerKey): base64url, no padding, of the uncompressed
// P-256 point.
func (v *VAPID) PublicKey() string { return v.public }

// CheckSubject reports whether s may be a VAPID contact: a mailto: or an
// https: URI (RFC 8292 §2.1).
func CheckSubject(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("push contact %q: %v", s, err)
	case u.Scheme == "mailto" && strings.Contains(u.Opaque, "@"):
		return nil
	case u.Scheme == "https" && u.Host != "":
		return nil
	}
	return fmt.Errorf("push contact %q: want mailto:someone@example.com or an https:// URL", s)
}

// Authorization is the Authorization header of a push request to
// endpoint: "vapid t=<JWT>, k=<public key>" (RFC 8292 §3), the JWT's aud
// being the endpoint's origin and its exp now + JWTLife.
func (v *VAPID) Authorization(endpoint *url.URL, now time.Time) (string, error) {
	claims := map[string]any{"aud": Origin(endpoint), "exp": now.Add(JWTLife).Unix()}
	if v.Subject != "" {
		claims["sub"] = v.Subject
	}
	body, _ := json.Marshal(claims)
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString([]byte(`{"typ":"JWT","alg":"ES256"}`)) + "." + enc.EncodeToString(body)
	digest := sha256.Sum256([]byte(signing))
	der, err := ecdsa.SignASN1(rand.Reader, v.key, digest[:])
	if err != nil {
		return "", fmt.Errorf("webpush: sign: %w", err)
	}
	sig, err := rawSignature(der)
	if err != nil {
		return "", err
	}
	return "vapid t=" + signing + "." + enc.EncodeToString(sig) + ", k=" + v.public, nil
}

// rawSignature turns an ASN.1 ECDSA signature into JWS's r || s, 32
// bytes each (RFC 7518 §3.4).
func rawSignature(der []byte) ([]byte, error) {
	var rs struct{ R, S *big.Int }
	if rest, err := asn1.Unmarshal(der, &rs); err != nil || len(rest) > 0 {
		return nil, errors.New("webpush: a signature that is not ASN.1")
	}
	out := make([]byte, 64)
	rs.R.FillBytes(out[:32])
	rs.S.FillBytes(out[32:])
	return out, nil
}

// Origin is the origin of u (scheme://host[:port], the port only if it
// is not the scheme's default): a VAPID JWT's aud.
func Origin(u *url.URL) string {
	host := strings.ToLower(u.Hostname())
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if p := u.Port(); p != "" && !(u.Scheme == "https" && p == "443") && !(u.Scheme == "http" && p == "80") {
		host += ":" + p
	}
	return strings.ToLower(u.Scheme) + "://" + host
}
