package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/r3labs/sse/v2"
)

// ntfy is ntfy v2 (--target ntfy), measured through its own HTTP API: a
// post is POST /<topic> with the text as the body, streams are
// GET /<topic>/sse and /<topic>/ws, and S4's polls are
// GET /<topic>/json?poll=1&since=all (every cached message of the topic:
// S4 stores 50 per topic, so that is the newest 50). A thread's topic is
// its id (16 hex digits; ntfy allows [-_A-Za-z0-9]{1,64}).
//
// Run it with its message cache (cache-file) on the filesystem measured,
// tuned as its docs tune a busy server, and with the visitor limits raised
// for loopback (run.sh does): visitor-request-limit-exempt-hosts
// 127.0.0.0/8, visitor-subscription-limit above the streams per source
// address.
type ntfy struct{}

func (*ntfy) name() string { return "ntfy" }

func (*ntfy) skip(id string) string { return noPeerEquivalent[id] }

func topicOf(th *thread) string { return th.id }

// ntfyMessage is a message of ntfy's JSON stream, SSE data and WebSocket
// frames: event is open, keepalive, message (or poll_request).
type ntfyMessage struct {
	ID      string `json:"id"`
	Time    int64  `json:"time"`
	Event   string `json:"event"`
	Topic   string `json:"topic"`
	Message string `json:"message"`
}

func (n *ntfy) post(ctx context.Context, h *apiClient, th *thread, text []byte) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.t.base+"/"+topicOf(th), bytes.NewReader(text))
	if err != nil {
		return 0, err
	}
	resp, err := h.roundTrip(req)
	if err != nil {
		return 0, err
	}
	var m ntfyMessage
	if err := json.Unmarshal(resp, &m); err != nil || m.Event != "message" || m.ID == "" {
		return 0, fmt.Errorf("publish answer without a message id: %q", resp)
	}
	return 0, nil // ntfy's ids are random strings: no position
}

func (n *ntfy) poll(ctx context.Context, h *apiClient, th *thread) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.t.base+"/"+topicOf(th)+"/json?poll=1&since=all", nil)
	if err != nil {
		return 0, err
	}
	resp, err := h.roundTrip(req)
	if err != nil {
		return 0, err
	}
	return bytes.Count(resp, []byte(`"event":"message"`)), nil
}

// ntfyEvent handles one message of a stream: open makes it ready, message
// delivers its text, keepalive and others are ignored.
func ntfyEvent(s *subscriber, h handler, b []byte) error {
	var m ntfyMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("ntfy message: %w", err)
	}
	switch m.Event {
	case "open":
		becomeReady(s, h)
	case "message":
		deliverPeer(s, h, 0, m.Message)
	}
	return nil
}

func (n *ntfy) session(ctx context.Context, t *target, s *subscriber, h handler) error {
	if s.ws {
		return wsStream(ctx, t, s, "ws://"+t.host+t.prefix+"/"+topicOf(s.thread)+"/ws", nil,
			func(b []byte) error { return ntfyEvent(s, h, b) })
	}
	var bad error
	err := sseStream(ctx, t, s, t.base+"/"+topicOf(s.thread)+"/sse", nil, func(ev *sse.Event) {
		if len(ev.Data) == 0 || bad != nil {
			return
		}
		if err := ntfyEvent(s, h, ev.Data); err != nil {
			bad = err
		}
	})
	if bad != nil {
		return bad
	}
	return err
}
