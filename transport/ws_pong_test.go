package transport_test

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/transport"
)

// TestWSUnansweredPingClosesWithACode: a client that reads its frames but
// never answers the server's ping (a hostile or broken client) has its
// socket closed with the documented 1013 (too slow: back off, then
// resume), a close frame it can read, not cut with no close frame at all
// (1006 to the client: no code to act on).
func TestWSUnansweredPingClosesWithACode(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{config: func(c *transport.Config) {
		c.Heartbeat = 50 * time.Millisecond
		c.WriteTimeout = 200 * time.Millisecond
	}})
	conn, err := net.Dial("tcp", e.ts.Listener.Addr().String())
	assert.Success(t, err)
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second)) // a failsafe: the close comes in about 250 ms
	_, err = io.WriteString(conn, "GET /api/chat/ws HTTP/1.1\r\nHost: chat.test\r\nX-Chat-Token: "+tokenN(1)+
		"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	assert.Success(t, err)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	assert.Success(t, err)
	assert.Equal(t, "status", resp.StatusCode, http.StatusSwitchingProtocols)
	var pings int
	for {
		op, payload, err := readServerFrame(br)
		if err != nil {
			t.Fatalf("the socket ended without a close frame after %d pings: %v", pings, err)
		}
		switch op {
		case 0x9:
			pings++ // and never answered
		case 0x8:
			assert.True(t, len(payload) >= 2, "close frame %q has a code", payload)
			assert.Equal(t, "close code", binary.BigEndian.Uint16(payload), uint16(1013))
			assert.True(t, strings.Contains(string(payload[2:]), "resume"), "close reason %q says to resume", payload[2:])
			assert.True(t, pings > 0, "closed only after a ping")
			return
		}
	}
}

// readServerFrame reads one unmasked frame of a server: its opcode and
// payload (the test's frames are small and never fragmented).
func readServerFrame(br *bufio.Reader) (op byte, payload []byte, err error) {
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return 0, nil, err
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return 0, nil, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	payload = make([]byte, n)
	_, err = io.ReadFull(br, payload)
	return h[0] & 0x0f, payload, err
}
