package mcpserver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// readOut is a standard output its client reads: every write goes out at
// once.
type readOut struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *readOut) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *readOut) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestStdioWritesAnswersReadAfterTheStopGrace: once told to stop and its
// StopGrace over, a Stdio whose client still reads its output writes every
// answer that comes (a call carried through late, its answer ready): only
// a write that does not go out is given up. It gave up about half of them
// at once (the select between the grace's end and the free writer).
func TestStdioWritesAnswersReadAfterTheStopGrace(t *testing.T) {
	t.Parallel()
	stop, stopNow := context.WithCancel(t.Context())
	stopNow()
	in, client := io.Pipe()
	defer client.Close()
	out := &readOut{}
	conn, err := (&Stdio{In: in, Out: out, Stop: stop}).Connect(t.Context())
	assert.Success(t, err)
	defer conn.Close()
	c := conn.(*stdioConn)
	<-c.abandon // the grace is over
	const answers = 20
	for i := range answers {
		err := c.send(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"result":{}}`+"\n", i))
		assert.True(t, err == nil, "answer %d, ready after the grace, on an output that is read: %v", i, err)
	}
	assert.True(t, strings.Count(out.String(), "\n") == answers, "written: %q", out.String())
}
