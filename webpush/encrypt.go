package webpush

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
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
// salt given (RFC 8291 Appendix A's example fixes both). It makes the
// body in one buffer, sealed in place, and derives the keys without
// crypto/hkdf's hash.Hash values (deriveKeys): a push's garbage, which
// the posts' latency pays for in collections, was 7.3 KB in 67
// allocations, half of it the HKDF's.
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
	cek, nonce := deriveKeys(secret, k.Auth, salt, k.P256dh, asPublic)
	gcm, err := newGCM(cek[:16])
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
	return gcm.Seal(out[:hdr], nonce[:12], out[hdr:], nil), nil
}

// deriveKeys derives the content-encryption key (cek's first 16 bytes)
// and nonce (nonce's first 12) (RFC 8291 §3.3 and §3.4, RFC 8188 §2.2
// and §2.3) from the ECDH shared secret, the subscription's auth secret,
// the salt and both public keys. Each HKDF-Expand here makes one block
// (L ≤ 32: T(1) = HMAC(PRK, info || 0x01), RFC 5869 §2.3), so HKDF is
// five HMACs, computed on the stack (hmacSHA256).
func deriveKeys(secret, auth, salt, uaPublic, asPublic []byte) (cek, nonce [32]byte) {
	prkKey := hmacSHA256(auth, secret)                                                       // HKDF-Extract(auth, ecdh_secret)
	ikm := hmacSHA256(prkKey[:], []byte("WebPush: info\x00"), uaPublic, asPublic, []byte{1}) // HKDF-Expand(PRK_key, key_info, 32)
	prk := hmacSHA256(salt, ikm[:])                                                          // HKDF-Extract(salt, IKM)
	cek = hmacSHA256(prk[:], []byte("Content-Encoding: aes128gcm\x00\x01"))
	nonce = hmacSHA256(prk[:], []byte("Content-Encoding: nonce\x00\x01"))
	return cek, nonce
}

// hmacMax is the longest message hmacSHA256 takes: deriveKeys's longest
// is key_info and its counter, 14 + 65 + 65 + 1 bytes.
const hmacMax = 160

// hmacSHA256 is HMAC-SHA256 (RFC 2104) under key (at most a block, 64
// bytes: deriveKeys's are 16 or 32) of the concatenation of msg (at most
// hmacMax bytes), with no allocation.
func hmacSHA256(key []byte, msg ...[]byte) [32]byte {
	const block = 64
	var buf [block + hmacMax]byte
	if len(key) > block {
		panic("webpush: an HMAC key longer than a block")
	}
	copy(buf[:], key)
	var pad [block]byte
	for i := range block {
		pad[i] = buf[i] ^ 0x5c
		buf[i] ^= 0x36
	}
	n := block
	for _, m := range msg {
		if len(m) > len(buf)-n {
			panic("webpush: an HMAC message longer than hmacMax")
		}
		n += copy(buf[n:], m)
	}
	inner := sha256.Sum256(buf[:n])
	copy(buf[:], pad[:])
	copy(buf[block:], inner[:])
	return sha256.Sum256(buf[:block+len(inner)])
}

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}
