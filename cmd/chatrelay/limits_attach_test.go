package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/mcpserver"
)

// The walks of the attachments' limits (contract Part 5): each is a walk
// of its own (custom), since a file is uploaded before a post names it.

func init() {
	walks["message.attachments"] = walk{custom: walkAttachments}
	walks["attachment.size"] = walk{custom: walkAttachmentSize}
	walks["thread.attachments"] = walk{custom: walkThreadAttachments}
	walks["attachment.name"] = walk{custom: walkAttachmentName}
	walks["attachment.unreferenced"] = walk{custom: walkUnreferenced}
	walks["attachment.pending"] = walk{custom: walkPending}
	walks["attachment.pending_per_participant"] = walk{custom: walkParticipantPending}
	walks["attachment.pending_bytes_per_participant"] = walk{custom: walkParticipantDraftBytes}
}

// uploadFile POSTs body as a file named name to url as the owner of token.
func uploadFile(t *testing.T, base, token, name string, body []byte) (int, []byte) {
	t.Helper()
	return uploadAs(t, base, "X-Chat-Token", token, name, body)
}

// uploadAs POSTs body as a file named name to url with the credential
// header h: value.
func uploadAs(t *testing.T, base, h, value, name string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", base+chatrelay.PathAttachments, bytes.NewReader(body))
	assert.Success(t, err)
	req.Header.Set(h, value)
	req.Header.Set("X-Filename", url.PathEscape(name))
	req.Header.Set("Content-Type", "application/octet-stream")
	res, err := http.DefaultClient.Do(req)
	assert.Success(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	assert.Success(t, err)
	return res.StatusCode, b
}

// mustUploadFile uploads and returns the attachment of the 201 answer.
func mustUploadFile(t *testing.T, base, token, name string, body []byte) chatrelay.Attachment {
	t.Helper()
	status, b := uploadFile(t, base, token, name, body)
	assert.True(t, status == 201, "upload: %d %s", status, b)
	var a struct{ Attachment chatrelay.Attachment }
	assert.Success(t, json.Unmarshal(b, &a))
	return a.Attachment
}

// callTool calls a verb's MCP tool: whether it was refused, its code, and its answer.
func (w *walkEnv) callTool(t *testing.T, verb string, args map[string]any) (bool, chatrelay.Code, []byte) {
	t.Helper()
	r, err := w.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: mcpserver.ToolName(verb), Arguments: args})
	assert.Success(t, err)
	b, _ := json.Marshal(r.StructuredContent)
	var e mcpserver.ToolError
	json.Unmarshal(b, &e)
	return r.IsError, e.Code, b
}

// tempFiles writes n files of the given sizes into a new folder and returns their paths.
func tempFiles(t *testing.T, n int, size func(i int) int) []string {
	t.Helper()
	dir := t.TempDir()
	var out []string
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("f%02d.bin", i))
		assert.Success(t, os.WriteFile(p, bytes.Repeat([]byte{byte(i)}, size(i)), 0o600))
		out = append(out, p)
	}
	return out
}

func attachArgs(paths []string) []string {
	var a []string
	for _, p := range paths {
		a = append(a, "--attach", p)
	}
	return a
}

func mcpFiles(n, size int) []any {
	return times(n, func(i int) any {
		return map[string]any{"name": fmt.Sprintf("f%d.bin", i), "data": bytes.Repeat([]byte{byte(i)}, size)} // []byte: base64 in JSON
	})
}

func walkAttachments(t *testing.T, w *walkEnv, l chatrelay.Limit) {
	var ids []string
	for i := range l.Max + 1 {
		ids = append(ids, mustUploadFile(t, w.url, w.token, "f.txt", []byte{byte(i)}).ID)
	}
	status, b := w.post(t, chatrelay.PathPost, jsonOf(map[string]any{"text": "x", "attachments": ids}))
	assert.True(t, status == 409 && strings.Contains(string(b), `"too_many_attachments"`), "HTTP past %d: %d %s", l.Max, status, b)
	status, b = w.post(t, chatrelay.PathPost, jsonOf(map[string]any{"text": "x", "attachments": ids[:l.Max]}))
	assert.True(t, status == 201, "HTTP at %d: %d %s", l.Max, status, b)

	paths := tempFiles(t, l.Max+1, func(int) int { return 1 })
	r := runCLI(t, nil, "", append([]string{"reply", w.thread, "x", "--data", w.data, "--fsync", "never"}, attachArgs(paths)...)...)
	assert.Equal(t, fmt.Sprintf("CLI past %d (%v)", l.Max, r.err), chatrelay.CodeOf(r.err), chatrelay.TooManyAttachments)
	r = runCLI(t, nil, "", append([]string{"reply", w.thread, "", "--data", w.data, "--fsync", "never"}, attachArgs(paths[:l.Max])...)...)
	assert.True(t, r.err == nil, "CLI at %d: %v", l.Max, r.err)

	refused, code, b := w.callTool(t, "send", map[string]any{"thread": w.thread, "text": "x", "attachments": mcpFiles(l.Max+1, 1)})
	assert.True(t, refused && code == chatrelay.TooManyAttachments, "MCP past %d: %s", l.Max, b)
	refused, _, b = w.callTool(t, "send_card", map[string]any{"thread": w.thread, "card": cardWith(nil), "attachments": mcpFiles(l.Max, 1)})
	assert.True(t, !refused, "MCP at %d: %s", l.Max, b)
}

func walkAttachmentSize(t *testing.T, w *walkEnv, l chatrelay.Limit) {
	status, b := uploadFile(t, w.url, w.token, "over.bin", make([]byte, l.Max+1))
	assert.True(t, status == 413 && strings.Contains(string(b), `"attachment_too_large"`), "HTTP past %d: %d %s", l.Max, status, b)
	mustUploadFile(t, w.url, w.token, "max.bin", make([]byte, l.Max))

	paths := tempFiles(t, 2, func(i int) int { return l.Max + 1 - i })
	r := runCLI(t, nil, "", "reply", w.thread, "x", "--attach", paths[0], "--data", w.data, "--fsync", "never")
	assert.Equal(t, fmt.Sprintf("CLI past %d (%v)", l.Max, r.err), chatrelay.CodeOf(r.err), chatrelay.AttachmentTooLarge)
	r = runCLI(t, nil, "", "reply", w.thread, "x", "--attach", paths[1], "--data", w.data, "--fsync", "never")
	assert.True(t, r.err == nil, "CLI at %d: %v", l.Max, r.err)

	refused, code, b := w.callTool(t, "send", map[string]any{"thread": w.thread, "text": "x", "attachments": mcpFiles(1, l.Max+1)})
	assert.True(t, refused && code == chatrelay.AttachmentTooLarge, "MCP past %d: %s", l.Max, b)
	refused, _, b = w.callTool(t, "send", map[string]any{"thread": w.thread, "text": "x", "attachments": mcpFiles(1, l.Max)})
	assert.True(t, !refused, "MCP at %d: %.200s", l.Max, b)
}

func walkThreadAttachments(t *testing.T, _ *walkEnv, l chatrelay.Limit) {
	// A thread of its own, filled to the byte over HTTP with distinct
	// files of the most bytes each; then one byte more is refused by
	// each binding.
	w := newWalkEnv(t)
	each := chatrelay.LimitAttachmentBytes.Max
	for i := range l.Max / each {
		mustUploadFile(t, w.url, w.token, "part.bin", bytes.Repeat([]byte{byte(i + 1)}, each))
	}
	if rest := l.Max % each; rest > 0 {
		mustUploadFile(t, w.url, w.token, "rest.bin", bytes.Repeat([]byte{0xff}, rest))
	}
	status, b := uploadFile(t, w.url, w.token, "one.bin", []byte{0})
	assert.True(t, status == 413 && strings.Contains(string(b), `"attachment_too_large"`), "HTTP past %d: %d %s", l.Max, status, b)
	paths := tempFiles(t, 1, func(int) int { return 1 })
	r := runCLI(t, nil, "", "reply", w.thread, "x", "--attach", paths[0], "--data", w.data, "--fsync", "never")
	assert.Equal(t, fmt.Sprintf("CLI past %d (%v)", l.Max, r.err), chatrelay.CodeOf(r.err), chatrelay.AttachmentTooLarge)
	refused, code, b := w.callTool(t, "send", map[string]any{"thread": w.thread, "text": "x", "attachments": mcpFiles(1, 1)})
	assert.True(t, refused && code == chatrelay.AttachmentTooLarge, "MCP past %d: %s", l.Max, b)
}

func walkAttachmentName(t *testing.T, w *walkEnv, l chatrelay.Limit) {
	// Never refused for its length: cleaned, then cut to it. (A file
	// name on disk is at most 255 bytes: the CLI's are ASCII.)
	for _, n := range []int{l.Max, l.Max + 1} {
		a := mustUploadFile(t, w.url, w.token, cp(n), []byte("n"))
		assert.Equal(t, fmt.Sprintf("HTTP name of %d", n), a.Name, cp(l.Max))

		p := filepath.Join(t.TempDir(), ascii(n))
		assert.Success(t, os.WriteFile(p, []byte("n"), 0o600))
		r := runCLI(t, nil, "", "reply", w.thread, "x", "--attach", p, "--data", w.data, "--fsync", "never")
		assert.Success(t, r.err)
		show := runCLI(t, nil, "", "show", w.thread, "--json", "--v2", "--data", w.data)
		assert.Success(t, show.err)
		assert.True(t, strings.Contains(show.stdout, `"name":"`+ascii(l.Max)+`"`), "CLI name of %d not cut: %.300s", n, show.stdout)

		refused, _, b := w.callTool(t, "send", map[string]any{"thread": w.thread, "text": "x",
			"attachments": []any{map[string]any{"name": cp(n), "data": []byte("n")}}})
		assert.True(t, !refused && strings.Contains(string(b), `"name":"`+cp(l.Max)+`"`), "MCP name of %d: %.300s", n, b)
	}
}

func walkUnreferenced(t *testing.T, _ *walkEnv, l chatrelay.Limit) {
	// On a clock of its own: an upload is named l.Max seconds less a
	// millisecond after it was made, and not at l.Max seconds.
	c := newClockedEnv(t)
	first := mustUploadFile(t, c.url, c.token, "a", []byte("a"))
	second := mustUploadFile(t, c.url, c.token, "b", []byte("b"))
	c.clk.Advance(time.Duration(l.Max)*time.Second - time.Millisecond)
	status, b := c.do(t, "POST", chatrelay.PathPost, jsonOf(map[string]any{"text": "x", "attachments": []string{first.ID}}))
	assert.True(t, status == 201, "a post within the hour: %d %s", status, b)
	c.clk.Advance(time.Millisecond)
	status, b = c.do(t, "POST", chatrelay.PathPost, jsonOf(map[string]any{"text": "x", "attachments": []string{second.ID}}))
	assert.True(t, status == 400 && strings.Contains(string(b), `"invalid_attachment"`), "a post at the hour: %d %s", status, b)
}

func walkPending(t *testing.T, _ *walkEnv, l chatrelay.Limit) {
	// A thread of its own, holding l.Max uploads no post names (the last
	// one taken at the limit); then one more upload is refused by each
	// binding.
	w := newWalkEnv(t)
	for range l.Max {
		mustUploadFile(t, w.url, w.token, "same.txt", []byte("same"))
	}
	status, b := uploadFile(t, w.url, w.token, "one.txt", []byte("one"))
	assert.True(t, status == 409 && strings.Contains(string(b), `"too_many_attachments"`), "HTTP past %d: %d %s", l.Max, status, b)
	paths := tempFiles(t, 1, func(int) int { return 1 })
	r := runCLI(t, nil, "", "reply", w.thread, "x", "--attach", paths[0], "--data", w.data, "--fsync", "never")
	assert.Equal(t, fmt.Sprintf("CLI past %d (%v)", l.Max, r.err), chatrelay.CodeOf(r.err), chatrelay.TooManyAttachments)
	refused, code, b := w.callTool(t, "send", map[string]any{"thread": w.thread, "text": "x", "attachments": mcpFiles(1, 1)})
	assert.True(t, refused && code == chatrelay.TooManyAttachments, "MCP past %d: %s", l.Max, b)
}

// commenterOf invites a commenter into w's thread over HTTP and returns
// its share link's token.
func commenterOf(t *testing.T, w *walkEnv, name string) string {
	t.Helper()
	status, b := w.post(t, "/api/chat/participants", jsonOf(map[string]any{"name": name, "role": "commenter"}))
	assert.True(t, status == 201, "invite: %d %s", status, b)
	var in struct{ Token string }
	assert.Success(t, json.Unmarshal(b, &in))
	return "Bearer " + in.Token
}

func walkParticipantPending(t *testing.T, _ *walkEnv, l chatrelay.Limit) {
	// A thread of its own, where the owner holds drafts (which a
	// commenter may not read) up to the thread's most less l.Max: each
	// commenter takes l.Max drafts, then one more is refused, whatever the
	// owner's or the other's hold; and the owner takes the rest of its own
	// most beside theirs, then one more is refused.
	w := newWalkEnv(t)
	for i := range chatrelay.LimitAttachmentPending.Max - l.Max {
		mustUploadFile(t, w.url, w.token, "owner.txt", []byte(fmt.Sprint("owner ", i)))
	}
	for _, who := range []string{"alex", "bo"} {
		auth := commenterOf(t, w, who)
		for i := range l.Max {
			status, b := uploadAs(t, w.url, "Authorization", auth, "mine.txt", []byte(fmt.Sprint(who, i)))
			assert.True(t, status == 201, "%s's draft %d: %d %s", who, i+1, status, b)
		}
		status, b := uploadAs(t, w.url, "Authorization", auth, "one more.txt", []byte("one more"))
		assert.True(t, status == 409 && strings.Contains(string(b), `"too_many_attachments"`), "%s past %d: %d %s", who, l.Max, status, b)
	}
	for i := range l.Max {
		status, b := uploadFile(t, w.url, w.token, "owner.txt", []byte(fmt.Sprint("owner's rest ", i)))
		assert.True(t, status == 201, "the owner's draft %d beside the commenters': %d %s", chatrelay.LimitAttachmentPending.Max-l.Max+i+1, status, b)
	}
	status, b := uploadFile(t, w.url, w.token, "owner's one more.txt", []byte("one more"))
	assert.True(t, status == 409 && strings.Contains(string(b), `"too_many_attachments"`), "the owner past its most: %d %s", status, b)
}

func walkParticipantDraftBytes(t *testing.T, _ *walkEnv, l chatrelay.Limit) {
	// A thread of its own, where the owner holds a large draft: a
	// commenter's drafts take l.Max bytes to the byte, then one more byte
	// is refused; naming them in a post makes room again.
	w := newWalkEnv(t)
	mustUploadFile(t, w.url, w.token, "owner.bin", bytes.Repeat([]byte{1}, chatrelay.LimitAttachmentBytes.Max))
	auth := commenterOf(t, w, "alex")
	var ids []string
	for left, i := l.Max, 0; left > 0; i++ {
		n := min(left, chatrelay.LimitAttachmentBytes.Max)
		status, b := uploadAs(t, w.url, "Authorization", auth, "part.bin", bytes.Repeat([]byte{byte(2 + i)}, n))
		assert.True(t, status == 201, "draft %d: %d %s", i+1, status, b)
		var a struct{ Attachment chatrelay.Attachment }
		assert.Success(t, json.Unmarshal(b, &a))
		ids = append(ids, a.Attachment.ID)
		left -= n
	}
	status, b := uploadAs(t, w.url, "Authorization", auth, "one more.bin", []byte{0})
	assert.True(t, status == 413 && strings.Contains(string(b), `"attachment_too_large"`), "past %d bytes: %d %s", l.Max, status, b)
	req, err := http.NewRequest("POST", w.url+"/api/chat/post", strings.NewReader(jsonOf(map[string]any{"text": "", "attachments": ids[:1]})))
	assert.Success(t, err)
	req.Header.Set("Authorization", auth)
	res, err := http.DefaultClient.Do(req)
	assert.Success(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.True(t, res.StatusCode == 201, "post: %d %s", res.StatusCode, body)
	status, b = uploadAs(t, w.url, "Authorization", auth, "one more.bin", []byte{0})
	assert.True(t, status == 201, "after the post: %d %s", status, b)
}
