package webpush

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// recordSize is the aes128gcm record size written in the header: one
// record holds the whole payload (RFC 8291 §4: at most 4096).
const recordSize = 4096

// MaxPayload is the most plaintext bytes Encrypt takes: one record less
// its padding delimiter and its 16-byte tag, less the header that push
// services count in their 4096 bytes (RFC 8291 §4).
const MaxPayload = recordSize - 16 - 1 - headerLen

const headerLen = 16 + 4 + 1 + 65 // salt, rs, idlen, keyid (an uncompressed P-256 point)

// ErrPayloadTooLarge is returned by Encrypt for a payload over MaxPayload.
var ErrPayloadTooLarge = errors.New("webpush: payload too large")

// Keys are a subscription's keys, as a browser's PushSubscription gives
// them: p256dh, its uncompressed P-256 public key (65 bytes), and auth,
// its 16-byte authentication secret.
type Keys struct {
	P256dh []byte
	Auth   []byte
}

// CheckKeys reports whether k has the shapes RFC 8291 needs.
func CheckKeys(k Keys) error {
	if len(k.Auth) != 16 {
		return fmt.Errorf("webpush: auth must be 16 bytes, has %d", len(k.Auth))
	}
	if _, err := ecdh.P256().NewPublicKey(k.P256dh); err != nil {
		return fmt.Errorf("webpush: p256dh is not a P-256 public key: %w", err)
	}
	return nil
}

// Encrypt encrypts plaintext for the subscription whose keys are k, as
// one aes128gcm record (RFC 8291 §3.4 and RFC 8188 §2) with a fresh
// ephemeral key pair and salt: the body of a push request. The key pair
// is not shared by the pushes of one change to several subscriptions,
// though each has its own salt: RFC 8291 §3.1 says "When sending a push
// message, the application server also generates a new ECDH key pair",
// and a push message goes to one subscription (RFC 8030 §2).
func Encrypt(plaintext []byte, k Keys) ([]byte, error) {
	as, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	var salt [16]byte
	rand.Read(salt[:])
	return encrypt(plaintext, k, as, salt[:])
}

// encrypt is Encrypt with the application server's ephemeral key and the
// salt given (RFC 8291 Appendix A's example fixes both). It parses the
// subscription's key once and makes the body in one buffer, sealed in
// place: a push's garbage is collected on the posts' time.
func encrypt(plaintext []byte, k Keys, as *ecdh.PrivateKey, salt []byte) ([]byte, error) {
	if len(plaintext) > MaxPayload {
		return nil, ErrPayloadTooLarge
	}
	if len(k.Auth) != 16 {
		return nil, fmt.Errorf("webpush: auth must be 16 bytes, has %d", len(k.Auth))
	}
	ua, err := ecdh.P256().NewPublicKey(k.P256dh) // CheckKeys, without parsing the key twice
	if err != nil {
		return nil, fmt.Errorf("webpush: p256dh is not a P-256 public key: %w", err)
	}
	secret, err := as.ECDH(ua)
	if err != nil {
		return nil, fmt.Errorf("webpush: ecdh: %w", err)
	}
	asPublic := as.PublicKey().Bytes()
	cek, nonce, err := deriveKeys(secret, k.Auth, salt, k.P256dh, asPublic)
	if err != nil {
		return nil, err
	}
	gcm, err := newGCM(cek)
	if err != nil {
		return nil, err
	}
	// salt, rs, idlen, keyid, then the record: the plaintext and its
	// delimiter (2: the last record's, no padding), sealed where it is.
	out := make([]byte, 0, headerLen+len(plaintext)+1+gcm.Overhead())
	out = append(out, salt...)
	out = binary.BigEndian.AppendUint32(out, recordSize)
	out = append(out, byte(len(asPublic)))
	out = append(out, asPublic...)
	hdr := len(out)
	out = append(append(out, plaintext...), 2)
	return gcm.Seal(out[:hdr], nonce, out[hdr:], nil), nil
}

// deriveKeys derives the content-encryption key and nonce (RFC 8291 §3.3
// and §3.4, RFC 8188 §2.2 and §2.3) from the ECDH shared secret, the
// subscription's auth secret, the salt and both public keys, with
// crypto/hkdf (its hash values are most of a push's remaining garbage; an
// HMAC of our own would save them, and is not ours to write).
func deriveKeys(secret, auth, salt, uaPublic, asPublic []byte) (cek, nonce []byte, err error) {
	info := "WebPush: info\x00" + string(uaPublic) + string(asPublic)
	ikm, err := hkdf.Key(sha256.New, secret, auth, info, 32)
	if err != nil {
		return nil, nil, err
	}
	prk, err := hkdf.Extract(sha256.New, ikm, salt)
	if err != nil {
		return nil, nil, err
	}
	if cek, err = hkdf.Expand(sha256.New, prk, "Content-Encoding: aes128gcm\x00", 16); err != nil {
		return nil, nil, err
	}
	nonce, err = hkdf.Expand(sha256.New, prk, "Content-Encoding: nonce\x00", 12)
	return cek, nonce, err
}

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}
