// Package chatrelay is the domain of the chat relay: the vocabulary that
// every other package of the module speaks. It holds the message and its
// authors, the error codes and Error, tokens and thread ids, every limit
// and default (each written once, here), and the interfaces of the
// services that backends implement (rate and stream limiters).
//
// It imports nothing of the module. The implementations live in
// subpackages, as in benbjohnson/wtf: hub (fan-out, no I/O), store and
// store/redisstore (persistence), transport (HTTP, SSE, WebSocket), web
// (the page), tied together in cmd/
package chatrelay
