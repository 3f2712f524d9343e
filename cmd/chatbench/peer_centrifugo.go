package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/r3labs/sse/v2"
)

// centrifugo is Centrifugo v6 (--target centrifugo), measured as a backend
// publishes to it and a browser reads it without its SDK: posts go to its
// server HTTP API (POST /api/publish with X-API-Key), streams are its
// unidirectional SSE (/connection/uni_sse) and WebSocket
// (/connection/uni_websocket) transports, each connecting with an HS256
// connection JWT whose `channels` claim subscribes it, server-side, to its
// thread's channel. S4's polls read the channel's history (POST
// /api/history, the newest 50, reverse), which needs history enabled in
// Centrifugo's channel options (run.sh does).
//
// Its config needs (v6 keys): client.token.hmac_secret_key (--peer-hmac-secret),
// http_api.key (--peer-api-key), uni_sse.enabled, uni_websocket.enabled, and
// for S4 channel.without_namespace.history_size and history_ttl.
type centrifugo struct {
	apiKey string
	secret []byte
}

func (*centrifugo) name() string { return "centrifugo" }

func (*centrifugo) skip(id string) string { return noPeerEquivalent[id] }

// channelOf is the Centrifugo channel of a thread: its id (16 hex digits,
// no namespace separator, not private, not user-limited).
func channelOf(th *thread) string { return th.id }

// centrifugoJWT is an HS256 connection token for user sub, valid until
// exp, subscribing the connection to channels server-side (the `channels`
// claim; Centrifugo checks each exists in its channel options).
func centrifugoJWT(secret []byte, sub string, exp time.Time, channels ...string) string {
	header := `{"alg":"HS256","typ":"JWT"}`
	claims, _ := json.Marshal(struct {
		Sub      string   `json:"sub"`
		Exp      int64    `json:"exp"`
		Iat      int64    `json:"iat"`
		Channels []string `json:"channels"`
	}{sub, exp.Unix(), time.Now().Unix(), channels})
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString(claims)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(signing))
	return signing + "." + enc.EncodeToString(mac.Sum(nil))
}

// connectRequest is the connect request a unidirectional connection sends
// (the cf_connect URL parameter, or the first WebSocket message).
func (c *centrifugo) connectRequest(s *subscriber) []byte {
	tok := centrifugoJWT(c.secret, "cb"+strconv.Itoa(s.idx), time.Now().Add(24*time.Hour), channelOf(s.thread))
	b, _ := json.Marshal(struct {
		Token string `json:"token"`
	}{tok})
	return b
}

// centrifugoReply is an answer of Centrifugo's server API: a result or an
// error, both with HTTP 200.
type centrifugoReply struct {
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Result struct {
		Offset int64 `json:"offset"`
	} `json:"result"`
}

// api calls a method of the server API and returns its answer.
func (c *centrifugo) api(ctx context.Context, h *apiClient, method string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.t.base+"/api/"+method, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header["X-Api-Key"] = []string{c.apiKey}
	req.Header["Content-Type"] = []string{"application/json"}
	return h.roundTrip(req)
}

// post publishes {"text": text} to th's channel. A 200 with an error in
// the body is an error.
func (c *centrifugo) post(ctx context.Context, h *apiClient, th *thread, text []byte) (int64, error) {
	body := append(append(append(append([]byte(`{"channel":"`), channelOf(th)...), `","data":{"text":"`...), text...), `"}}`...)
	resp, err := c.api(ctx, h, "publish", body)
	if err != nil {
		return 0, err
	}
	var r centrifugoReply
	if err := json.Unmarshal(resp, &r); err != nil {
		return 0, fmt.Errorf("publish answer: %w: %q", err, resp)
	}
	if r.Error != nil {
		return 0, fmt.Errorf("publish: Centrifugo error %d: %s", r.Error.Code, r.Error.Message)
	}
	return r.Result.Offset, nil
}

// poll reads th's newest 50 publications from its history and returns how
// many the answer holds.
func (c *centrifugo) poll(ctx context.Context, h *apiClient, th *thread) (int, error) {
	body := append(append([]byte(`{"channel":"`), channelOf(th)...), `","limit":50,"reverse":true}`...)
	resp, err := c.api(ctx, h, "history", body)
	if err != nil {
		return 0, err
	}
	if bytes.HasPrefix(resp, []byte(`{"error"`)) {
		var r centrifugoReply
		if json.Unmarshal(resp, &r) == nil && r.Error != nil {
			return 0, fmt.Errorf("history: Centrifugo error %d: %s (is history enabled in its channel options?)", r.Error.Code, r.Error.Message)
		}
	}
	return bytes.Count(resp, []byte(`"text":"cb `)), nil
}

// centrifugoPush is a push of the unidirectional protocol: a connect, a
// publication of a channel, a disconnect; others (join, leave, the empty
// ping {}) are ignored.
type centrifugoPush struct {
	Channel string `json:"channel"`
	Connect *struct {
		Client string `json:"client"`
	} `json:"connect"`
	Pub *struct {
		Data   json.RawMessage `json:"data"`
		Offset int64           `json:"offset"`
	} `json:"pub"`
	Disconnect *struct {
		Code   int    `json:"code"`
		Reason string `json:"reason"`
	} `json:"disconnect"`
}

// centrifugoEvent is what one push means to a subscriber.
type centrifugoEvent struct {
	connect bool   // the connection is live, its server-side subscriptions made
	pub     bool   // a publication: text and offset
	text    string // the "text" of the publication's data, "" if it has none
	offset  int64
	end     error // a disconnect push: the server ends the connection
}

// parseCentrifugoPushes reads the pushes of one SSE event's data or one
// WebSocket message: one JSON push, or several separated by newlines (a
// uni_websocket with join_push_messages).
func parseCentrifugoPushes(b []byte, each func(centrifugoEvent)) error {
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var p centrifugoPush
		if err := json.Unmarshal(line, &p); err != nil {
			return fmt.Errorf("centrifugo push: %w", err)
		}
		switch {
		case p.Connect != nil:
			each(centrifugoEvent{connect: true})
		case p.Pub != nil:
			var d struct {
				Text string `json:"text"`
			}
			json.Unmarshal(p.Pub.Data, &d) // data of another shape: a foreign message
			each(centrifugoEvent{pub: true, text: d.Text, offset: p.Pub.Offset})
		case p.Disconnect != nil:
			each(centrifugoEvent{end: fmt.Errorf("%w: Centrifugo disconnect %d %s", errStreamEnded, p.Disconnect.Code, p.Disconnect.Reason)})
		}
	}
	return nil
}

// session reads one unidirectional connection of s: uni_websocket sends
// the connect request as its first message, uni_sse passes it in the
// cf_connect URL parameter (as a browser's EventSource must).
func (c *centrifugo) session(ctx context.Context, t *target, s *subscriber, h handler) error {
	var ended error
	handle := func(b []byte) error {
		err := parseCentrifugoPushes(b, func(e centrifugoEvent) {
			switch {
			case e.connect:
				becomeReady(s, h)
			case e.pub:
				deliverPeer(s, h, e.offset, e.text)
			case e.end != nil:
				ended = e.end
			}
		})
		if err != nil {
			return err
		}
		return ended
	}
	if s.ws {
		return wsStream(ctx, t, s, "ws://"+t.host+t.prefix+"/connection/uni_websocket", c.connectRequest(s), handle)
	}
	u := t.base + "/connection/uni_sse?cf_connect=" + url.QueryEscape(string(c.connectRequest(s)))
	var bad error
	err := sseStream(ctx, t, s, u, nil, func(ev *sse.Event) {
		if len(ev.Data) == 0 || bad != nil {
			return
		}
		if err := handle(ev.Data); err != nil && !errors.Is(err, errStreamEnded) {
			bad = err
		}
	})
	if bad != nil {
		return bad
	}
	if ended != nil {
		return ended
	}
	return err
}
