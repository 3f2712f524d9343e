// Package webpush sends Web Push messages (contract Part 5): it signs each
// request with VAPID (RFC 8292: an ES256 JWT whose aud is the endpoint's
// origin) and encrypts each payload with aes128gcm (RFC 8291, over RFC
// 8188's record format), on the standard library alone (crypto/ecdh,
// crypto/hkdf, crypto/ecdsa, crypto/aes, crypto/cipher). It also guards
// what the server may reach (Guard): a push endpoint is a URL a client
// chose, so it must be https and may not resolve to a loopback, private,
// link-local, shared (CGNAT) or unspecified address, checked when the
// connection is dialled, after resolution, so that a name whose answer
// changes after the subscribe-time check (DNS rebinding) still cannot
// reach one.
//
// Why not github.com/SherClockHolmes/webpush-go (v1.4.0): it goes through
// the deprecated crypto/elliptic point functions, ignores its
// VapidExpiration option (every JWT lives 12 hours whatever it is told)
// and writes "mailto:" before a subject that already has it. What it
// does is about 150 lines here, proved against RFC 8291's published
// example (Appendix A).
//
// It knows nothing of chats: package transport decides what to send,
// to whom and when.
package webpush
