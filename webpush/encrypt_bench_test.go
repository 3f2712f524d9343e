package webpush

import (
	"crypto/ecdh"
	"crypto/rand"
	"testing"
)

// BenchmarkEncrypt: one push's payload encryption (RFC 8291), a fresh
// ECDH key pair and salt each time, as Encrypt makes them: its time and
// its garbage, which every push costs the server.
func BenchmarkEncrypt(b *testing.B) {
	ua, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	auth := make([]byte, 16)
	rand.Read(auth)
	k := Keys{P256dh: ua.PublicKey().Bytes(), Auth: auth}
	payload := make([]byte, 600) // about an approval's payload
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encrypt(payload, k); err != nil {
			b.Fatal(err)
		}
	}
}
