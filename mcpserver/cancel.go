package mcpserver

import (
	"bytes"
	"net/http"

	"github.com/chatrelay/chatrelay"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// MCP's rule for a canceled call holds over HTTP as on stdio (Stdio): once
// the client has sent notifications/cancelled for a call in flight, the
// call gets no answer at all. The SDK writes one anyway, a JSON-RPC error
// of code 0 ("context canceled") on the call's POST stream, which the
// TypeScript SDK's client reports as "Received a response for an unknown
// message ID" (its onerror) each time an agent aborts a call or its
// request timeout ends a wait.
//
// So a POST of a session notes its calls (calling), a POST that cancels
// one marks it before the SDK reads the cancel (and so before the call
// ends), and the calls' POST drops the answer of a marked call; its stream
// then ends with no answer, as the SDK closes it once the call returned.

// calling notes the calls in the POST body data of the session sid, and
// marks those that a notifications/cancelled in it names. Forget the
// returned calls once the POST is answered.
func (as *agentServer) calling(sid string, data []byte) *postCalls {
	mine := map[jsonrpc.ID]*bool{}
	as.mu.Lock()
	defer as.mu.Unlock()
	for _, msg := range messages(data) {
		r, ok := msg.(*jsonrpc.Request)
		if !ok {
			continue
		}
		if r.IsCall() {
			if as.pending == nil {
				as.pending = map[string]map[jsonrpc.ID]*bool{}
			}
			if as.pending[sid] == nil {
				as.pending[sid] = map[jsonrpc.ID]*bool{}
			}
			if _, dup := as.pending[sid][r.ID]; !dup { // a duplicate id in flight is refused by the SDK
				mark := new(bool)
				as.pending[sid][r.ID] = mark
				mine[r.ID] = mark
			}
			continue
		}
		if r.Method != "notifications/cancelled" {
			continue
		}
		var p struct {
			RequestID any `json:"requestId"`
		}
		if chatrelay.UnmarshalExactCase(r.Params, &p) != nil { // as the SDK reads it
			continue
		}
		if id, err := jsonrpc.MakeID(p.RequestID); err == nil {
			if mark := as.pending[sid][id]; mark != nil {
				*mark = true
			}
		}
	}
	return &postCalls{as: as, sid: sid, mine: mine}
}

// postCalls are the calls of one POST of a session.
type postCalls struct {
	as   *agentServer
	sid  string
	mine map[jsonrpc.ID]*bool // as in as.pending, guarded by as.mu
}

// canceled says whether the client canceled one of the calls: any (an
// invalid id) or the call id.
func (p *postCalls) canceled(id jsonrpc.ID) bool {
	if len(p.mine) == 0 {
		return false
	}
	p.as.mu.Lock()
	defer p.as.mu.Unlock()
	if !id.IsValid() {
		for _, mark := range p.mine {
			if *mark {
				return true
			}
		}
		return false
	}
	mark := p.mine[id]
	return mark != nil && *mark
}

// forget forgets the calls.
func (p *postCalls) forget() {
	p.as.mu.Lock()
	defer p.as.mu.Unlock()
	for id, mark := range p.mine {
		if p.as.pending[p.sid][id] == mark {
			delete(p.as.pending[p.sid], id)
		}
	}
	if len(p.as.pending[p.sid]) == 0 {
		delete(p.as.pending, p.sid)
	}
}

// dropCanceled is the response writer of a POST with calls: it drops the
// answer to a call the client canceled. The SDK writes each event of the
// stream in one Write (an SSE event; as JSON, the one answer).
type dropCanceled struct {
	http.ResponseWriter
	calls *postCalls
}

func (w *dropCanceled) Write(b []byte) (int, error) {
	if w.answersCanceled(b) {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// answersCanceled says whether b, an SSE event or a JSON message, is the
// answer to a call of this POST that the client canceled.
func (w *dropCanceled) answersCanceled(b []byte) bool {
	if !w.calls.canceled(jsonrpc.ID{}) {
		return false // the common case: no answer decoded
	}
	data := b
	if i := bytes.Index(b, []byte("data: ")); i >= 0 && (i == 0 || b[i-1] == '\n') {
		data = bytes.TrimRight(b[i+len("data: "):], "\n")
	}
	if len(data) == 0 || data[0] != '{' {
		return false
	}
	msg, err := jsonrpc.DecodeMessage(data)
	if err != nil {
		return false
	}
	r, ok := msg.(*jsonrpc.Response)
	return ok && r.ID.IsValid() && w.calls.canceled(r.ID)
}

// Unwrap lets the SDK flush its events (http.ResponseController).
func (w *dropCanceled) Unwrap() http.ResponseWriter { return w.ResponseWriter }
