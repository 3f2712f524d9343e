package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/filestore"
)

// freshThread makes a data folder with one operator message in threadNew,
// written now (the verbs' deadlines are on the real clock).
func freshThread(t *testing.T) string {
	t.Helper()
	data := t.TempDir()
	st, err := filestore.OpenFile(data, filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	defer st.Close()
	_, err = st.Append(t.Context(), threadNew, store.NewMessage{Text: "can you deploy?"})
	assert.Success(t, err)
	return data
}

// asked decodes the JSON an ask (without --wait) prints.
func asked(t *testing.T, r cliResult) host.InteractionResult {
	t.Helper()
	assert.Success(t, r.err)
	var out host.InteractionResult
	assert.Success(t, json.Unmarshal([]byte(r.stdout), &out))
	return out
}

// TestAskWaitExitCodes: ask --wait and check --wait say the outcome in
// their exit status: 0 approved, 10 denied, 11 expired, 12 canceled; and 0
// for an answered input, printing the interaction.
func TestAskWaitExitCodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		args    []string
		answer  func(t *testing.T, data string, r host.InteractionResult)
		code    int
		state   chatrelay.State
		timeout string
	}{
		{"approved", []string{"--approval", "Deploy build 412?", "--title", "deploy"}, respondWith(chatrelay.Answer{Decision: "approve"}), 0, chatrelay.Approved, "1m"},
		{"denied", []string{"--approval", "Deploy build 412?"}, respondWith(chatrelay.Answer{Decision: "deny"}), 10, chatrelay.Denied, "1m"},
		{"answered", []string{"--input", "Which branch?", "--choice", "main=Main branch", "--choice", "release"}, respondWith(chatrelay.Answer{Value: "release"}), 0, chatrelay.Answered, "1m"},
		{"expired", []string{"--input", "Quick?", "--allow-text"}, nil, 11, chatrelay.Expired, "1s"},
		{"canceled", []string{"--approval", "Deploy?"}, func(t *testing.T, data string, r host.InteractionResult) {
			res := runCLI(t, nil, "", "cancel", r.Thread, r.Interaction.ID, "--data", data)
			assert.Success(t, res.err)
		}, 12, chatrelay.Canceled, "1m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			data := freshThread(t)
			// Flags after the operand, as the contract allows.
			args := append([]string{"ask", threadNew}, tc.args...)
			args = append(args, "--timeout", tc.timeout, "--data", data, "--fsync", "never")
			r := asked(t, runCLI(t, nil, "", args...))
			assert.Equal(t, "pending", r.Interaction.State, chatrelay.Pending)

			waited := make(chan cliResult, 1)
			go func() { waited <- runCLI(t, nil, "", "check", threadNew, r.Interaction.ID, "--wait", "--data", data) }()
			if tc.answer != nil {
				tc.answer(t, data, r)
			}
			var res cliResult
			select {
			case res = <-waited:
			case <-time.After(10 * time.Second):
				t.Fatal("check --wait did not return")
			}
			assert.Equal(t, "exit code", exitCode(res.err), tc.code)
			var out host.InteractionResult
			assert.Success(t, json.Unmarshal([]byte(res.stdout), &out))
			assert.Equal(t, "state printed", out.Interaction.State, tc.state)
		})
	}
	// ask --wait itself: approved by another process meanwhile.
	data := freshThread(t)
	done := make(chan cliResult, 1)
	go func() {
		done <- runCLI(t, nil, "", "ask", threadNew, "--approval", "Ship it?", "--wait", "--data", data, "--fsync", "never")
	}()
	st := openStore(t, data)
	var id string
	deadline := time.Now().Add(10 * time.Second)
	for id == "" {
		pending, err := st.Pending(t.Context())
		assert.Success(t, err)
		if len(pending) > 0 {
			id = pending[0].InteractionID
		}
		assert.True(t, time.Now().Before(deadline), "ask --wait asked nothing")
		time.Sleep(10 * time.Millisecond)
	}
	_, err := st.Change(t.Context(), threadNew, store.Change{Op: store.Respond, InteractionID: id, Answer: chatrelay.Answer{Decision: "deny"}, By: chatrelay.Operator})
	assert.Success(t, err)
	res := <-done
	assert.Equal(t, "ask --wait exit code", exitCode(res.err), 10)
}

// TestWaitEndsWhenRedisLosesTheInteraction: ask --wait and check --wait
// running while Redis restarts without its data end at once, exit 1 with
// not_found (the interaction is gone), instead of waiting for its
// deadline (here an hour).
func TestWaitEndsWhenRedisLosesTheInteraction(t *testing.T) {
	t.Parallel()
	for _, verb := range []string{"ask", "check"} {
		t.Run(verb, func(t *testing.T) {
			t.Parallel()
			srv := storetest.StartServer(t, storetest.ServerOptions{})
			b := storetest.OpenRedis(t, srv, storetest.NewPrefix(), storetest.Options{})
			_, err := b.Store.Append(t.Context(), threadNew, store.NewMessage{Text: "can you deploy?"})
			assert.Success(t, err)
			ask := append([]string{"ask", threadNew, "--approval", "Deploy build 412?", "--timeout", "1h"}, b.CLIArgs()...)
			args := slices.Concat(ask, []string{"--wait"})
			if verb == "check" {
				r := asked(t, runCLI(t, nil, "", ask...))
				args = slices.Concat([]string{"check", threadNew, r.Interaction.ID, "--wait"}, b.CLIArgs())
			}
			waited := make(chan cliResult, 1)
			go func() { waited <- runCLI(t, nil, "", args...) }()
			// The wait follows the store's feed: then Redis loses everything.
			c := srv.Client(t)
			assert.Eventually(t, 10*time.Second, verb+" --wait following the feed", func() bool {
				n, err := c.PubSubNumSub(t.Context(), b.Prefix+"feed").Result()
				return err == nil && n[b.Prefix+"feed"] > 0
			})
			srv.Restart(t)
			var res cliResult
			select {
			case res = <-waited:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s --wait still waits for an interaction Redis lost", verb)
			}
			assert.Equal(t, "exit code", exitCode(res.err), 1)
			assert.Equal(t, "the code", chatrelay.CodeOf(res.err), chatrelay.NotFound)
		})
	}
}

func openStore(t *testing.T, data string) store.Store {
	t.Helper()
	st, err := filestore.OpenFile(data, filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

func respondWith(a chatrelay.Answer) func(t *testing.T, data string, r host.InteractionResult) {
	return func(t *testing.T, data string, r host.InteractionResult) {
		_, err := openStore(t, data).Change(context.Background(), r.Thread, store.Change{Op: store.Respond, InteractionID: r.Interaction.ID, Answer: a, By: chatrelay.Operator})
		assert.Success(t, err)
	}
}

// TestVerbsRefuseBadInput: a malformed command line exits 2; a limit or a
// bad card exits 1 with the contract's code in the message, and stores
// nothing.
func TestVerbsRefuseBadInput(t *testing.T) {
	t.Parallel()
	data := freshThread(t)
	card := filepath.Join(t.TempDir(), "card.json")
	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
		code  int
		words string
	}{
		{"ask without a kind", []string{"ask", threadNew}, "", 2, "exactly one of"},
		{"ask with both kinds", []string{"ask", threadNew, "--input", "a", "--approval", "b"}, "", 2, "exactly one of"},
		{"a choice on an approval", []string{"ask", threadNew, "--approval", "x", "--choice", "a"}, "", 2, "--choice"},
		{"a fractional timeout", []string{"ask", threadNew, "--approval", "x", "--timeout", "1500ms"}, "", 2, "whole seconds"},
		{"a timeout past 30 min for an input", []string{"ask", threadNew, "--input", "x", "--allow-text", "--timeout", "31m"}, "", 1, "invalid_interaction"},
		{"a title past 128 for an approval", []string{"ask", threadNew, "--approval", "x", "--title", strings.Repeat("t", 129)}, "", 1, "invalid_interaction"},
		{"duplicate choices", []string{"ask", threadNew, "--input", "x", "--choice", "a", "--choice", "a"}, "", 1, "unique"},
		{"an input with no way to answer", []string{"ask", threadNew, "--input", "x"}, "", 1, "invalid_interaction"},
		{"ask in no thread", []string{"ask", threadOld, "--approval", "x"}, "", 1, "not_found"},
		{"a malformed thread", []string{"ask", "nope", "--approval", "x"}, "", 2, "invalid_thread"},
		{"a javascript: link", []string{"card", threadNew, "-"}, `{"fallback_text":"x","blocks":[{"type":"link","url":"javascript:alert(1)","label":"x"}]}`, 1, "http or https"},
		{"a card with an unknown field", []string{"card", threadNew, "-"}, `{"fallback_text":"x","blocks":[],"html":"<b>"}`, 1, "invalid_card"},
		{"a card file that is missing", []string{"card", threadNew, card}, "", 2, "no such file"},
		// As send_card refuses them over MCP: never stored as U+FFFD.
		{"a card that is not UTF-8", []string{"card", threadNew, "-"}, "{\"fallback_text\":\"a\xffb\",\"blocks\":[]}", 1, "invalid_card: the card is not valid UTF-8"},
		{"a card with a lone surrogate escape", []string{"card", threadNew, "-"}, `{"fallback_text":"ok","blocks":[{"type":"text","text":"x\ud83d"}]}`, 1, "lone UTF-16 surrogate"},
		{"react with white space", []string{"react", threadNew, "MSG-20261023-184000-000000", "a b"}, "", 1, "invalid_emoji"},
		{"react to no message", []string{"react", threadNew, "MSG-20261023-184000-000000", "👍"}, "", 1, "not_found"},
		{"check no interaction", []string{"check", threadNew, "ix_000000000000"}, "", 1, "not_found"},
		{"reply with a bad client id", []string{"reply", threadNew, "hi", "--client-id", "a b"}, "", 1, "invalid_client_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, nil, tc.stdin, append(tc.args, "--data", data)...)
			assert.Equal(t, "exit code ("+errString(r.err)+")", exitCode(r.err), tc.code)
			assert.True(t, strings.Contains(errString(r.err), tc.words), "error %q lacks %q", errString(r.err), tc.words)
		})
	}
	r := runCLI(t, nil, "", "show", threadNew, "--json", "--data", data)
	assert.Success(t, r.err)
	var page struct{ Messages []json.RawMessage }
	assert.Success(t, json.Unmarshal([]byte(r.stdout), &page))
	assert.Equal(t, "stored", len(page.Messages), 1)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestVerbsAtWork: react, card, reply --client-id and show --v2 do what
// they say, and watch prints an update line when an interaction is
// answered.
func TestVerbsAtWork(t *testing.T) {
	t.Parallel()
	data := freshThread(t)
	ctx, cancelWatch := context.WithCancel(t.Context())
	var watched lockedBuffer
	watchDone := make(chan error, 1)
	go func() {
		watchDone <- run(ctx, []string{"watch", "--data", data, "--all", "--since", "1"}, env(nil), strings.NewReader(""), &watched, os.Stderr)
	}()

	r := runCLI(t, nil, "", "reply", threadNew, "on it", "--client-id", "deploy-1", "--data", data)
	assert.Success(t, r.err)
	again := runCLI(t, nil, "", "reply", "--client-id", "deploy-1", threadNew, "on it", "--data", data)
	assert.Success(t, again.err)
	var first, second struct {
		ID       string
		Replayed bool
	}
	assert.Success(t, json.Unmarshal([]byte(r.stdout), &first))
	assert.Success(t, json.Unmarshal([]byte(again.stdout), &second))
	assert.True(t, second.Replayed && second.ID == first.ID && !first.Replayed, "replies %s / %s", r.stdout, again.stdout)

	r = runCLI(t, nil, "", "react", threadNew, first.ID, "👍", "--data", data)
	assert.Success(t, r.err)
	assert.True(t, strings.Contains(r.stdout, `"reactions":{"👍":["hermes"]}`), "react printed %s", r.stdout)

	r = runCLI(t, nil, `{"title":"Build 412","fallback_text":"Build 412 is green.","blocks":[{"type":"text","text":"<script>x</script>"},{"type":"link","url":"https://ci.example.com/412","label":"log"}]}`,
		"card", threadNew, "-", "--data", data)
	assert.Success(t, r.err)

	ix := asked(t, runCLI(t, nil, "", "ask", threadNew, "--input", "Which branch?", "--choice", "main", "--data", data))
	_, err := openStore(t, data).Change(t.Context(), threadNew, store.Change{Op: store.Respond, InteractionID: ix.Interaction.ID, Answer: chatrelay.Answer{Value: "main"}, By: chatrelay.Operator})
	assert.Success(t, err)

	r = runCLI(t, nil, "", "show", threadNew, "--json", "--v2", "--data", data)
	assert.Success(t, r.err)
	var page host.ReadThreadResult
	assert.Success(t, json.Unmarshal([]byte(r.stdout), &page))
	assert.Equal(t, "messages", len(page.Messages), 4)
	var last chatrelay.Message
	assert.Success(t, json.Unmarshal(page.Messages[3], &last))
	assert.Equal(t, "answered", last.Interaction.State, chatrelay.Answered)
	var c chatrelay.Message
	assert.Success(t, json.Unmarshal(page.Messages[2], &c))
	assert.Equal(t, "card text", c.Text, "Build 412 is green.")

	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(watched.String(), `"update":`) {
		assert.True(t, time.Now().Before(deadline), "watch printed no update line:\n%s", watched.String())
		time.Sleep(10 * time.Millisecond)
	}
	cancelWatch()
	assert.Success(t, <-watchDone)
	var sawMessage bool
	for _, line := range strings.Split(strings.TrimSpace(watched.String()), "\n") {
		var l watchLine
		assert.Success(t, json.Unmarshal([]byte(line), &l))
		if l.Update != nil {
			var m chatrelay.Message
			assert.Success(t, json.Unmarshal(l.Update, &m))
			assert.True(t, m.Interaction != nil && m.Interaction.State == chatrelay.Answered, "update %s", l.Update)
		}
		sawMessage = sawMessage || strings.Contains(string(l.Message), "on it")
	}
	assert.True(t, sawMessage, "watch printed no message line:\n%s", watched.String())
}

// TestWatchSinceSaysAnAnswerGivenWhileAway: watch --since, without
// --all, prints the update line of a question hermes asked and the person
// answered after EPOCH, so that an agent that restarts its watch from its
// last epoch learns of an answer given while it was away. hermes's own
// question is left out, as it is live, but not the answer to it.
func TestWatchSinceSaysAnAnswerGivenWhileAway(t *testing.T) {
	t.Parallel()
	data := freshThread(t)
	before := cursorOf(t, data, threadNew)

	ix := asked(t, runCLI(t, nil, "", "ask", threadNew, "--input", "Which branch?", "--choice", "main", "--data", data))
	st := openStore(t, data)
	_, err := st.Change(t.Context(), threadNew, store.Change{Op: store.Respond, InteractionID: ix.Interaction.ID, Answer: chatrelay.Answer{Value: "main"}, By: chatrelay.Operator})
	assert.Success(t, err)
	// The person's next message: watch prints it after everything before it.
	_, err = st.Append(t.Context(), threadNew, store.NewMessage{Text: "done answering"})
	assert.Success(t, err)

	watched := watchUntil(t, "done answering", "watch", "--data", data, "--since", strconv.FormatInt(before, 10))
	var updates, messages int
	for _, line := range strings.Split(strings.TrimSpace(watched), "\n") {
		var l watchLine
		assert.Success(t, json.Unmarshal([]byte(line), &l))
		if l.Message != nil {
			messages++
			assert.True(t, !strings.Contains(string(l.Message), "Which branch?"), "watch printed hermes's question without --all: %s", line)
		}
		if l.Update != nil {
			updates++
			var m chatrelay.Message
			assert.Success(t, json.Unmarshal(l.Update, &m))
			assert.True(t, m.Interaction != nil && m.Interaction.ID == ix.Interaction.ID && m.Interaction.State == chatrelay.Answered, "update %s", l.Update)
		}
	}
	assert.Equal(t, "update lines (watch printed:\n"+watched+")", updates, 1)
	assert.Equal(t, "message lines", messages, 1)
}

// TestShare: the host CLI invites (the link from the folder's recorded
// public URL), lists, audits and revokes share links through the store.
func TestShare(t *testing.T) {
	t.Parallel()
	s := opsServe(t, "--public-url", "https://chat.example.com/spaces/x/")
	tok := opsToken("share")
	thread := chatrelay.ThreadOf(tok)
	r := runCLI(t, nil, "", "share", thread, "--name", "Alex", "--data", s.data)
	assert.True(t, r.err != nil && exitCode(r.err) == 1 && strings.Contains(r.err.Error(), "not_found"), "share into an empty thread: %v", r.err)
	assert.Equal(t, "post", opsPost(t, t.Context(), http.DefaultClient, s.base, tok, "hello", nil), http.StatusCreated)

	r = runCLI(t, nil, "", "share", thread, "--name", "Alex\n[hermes]", "--role", "viewer", "--expires", "2d", "--cap", "3", "--json", "--data", s.data)
	assert.Success(t, r.err)
	var inv struct {
		Participant chatrelay.Participant
		Token, Link string
	}
	assert.Success(t, json.Unmarshal([]byte(r.stdout), &inv))
	assert.True(t, inv.Participant.Name == "Alex hermes" && inv.Participant.Role == "viewer" && inv.Participant.Cap == 3 &&
		inv.Participant.ExpiresAt-inv.Participant.CreatedAt == 2*24*3600_000, "invited %+v", inv.Participant)
	assert.Equal(t, "link", inv.Link, "https://chat.example.com/spaces/x/p#"+inv.Token)
	// The token works on the server at once.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, s.base+"/api/chat/whoami", nil)
	req.Header.Set("Authorization", "Bearer "+inv.Token)
	resp, err := http.DefaultClient.Do(req)
	assert.Success(t, err)
	resp.Body.Close()
	assert.Equal(t, "whoami with the CLI's link", resp.StatusCode, http.StatusOK)

	r = runCLI(t, nil, "", "share", thread, "--name", "Bo", "--data", s.data)
	assert.Success(t, r.err)
	assert.True(t, strings.Contains(r.stdout, "Invited Bo") && strings.Contains(r.stdout, "chp_"), "text invite: %s", r.stdout)
	r = runCLI(t, nil, "", "share", "list", thread, "--data", s.data)
	assert.Success(t, r.err)
	assert.True(t, strings.Contains(r.stdout, "Alex hermes (p_") && strings.Contains(r.stdout, "Bo (p_") && !strings.Contains(r.stdout, "chp_"), "list: %s", r.stdout)
	r = runCLI(t, nil, "", "share", "revoke", thread, inv.Participant.ID, "--data", s.data)
	assert.True(t, r.err == nil && strings.Contains(r.stdout, "revoked Alex hermes"), "revoke: %v %s", r.err, r.stdout)
	r = runCLI(t, nil, "", "share", "revoke", "--all", thread, "--data", s.data)
	assert.True(t, r.err == nil && strings.Contains(r.stdout, "revoked Bo"), "revoke --all: %v %s", r.err, r.stdout)
	r = runCLI(t, nil, "", "share", "audit", thread, "--json", "--data", s.data)
	assert.Success(t, r.err)
	var audit struct{ Events []chatrelay.AuditEvent }
	assert.Success(t, json.Unmarshal([]byte(r.stdout), &audit))
	var evs []string
	for _, ev := range audit.Events {
		evs = append(evs, ev.Event)
	}
	assert.Equal(t, "audit", evs, []string{"issued", "first_use", "issued", "revoked", "revoked"})

	for _, args := range [][]string{
		{"share", thread, "--name", " <> "},
		{"share", thread, "--name", "x", "--role", "owner"},
		{"share", thread, "--name", "x", "--expires", "31d"},
		{"share", thread, "--name", "x", "--cap", "0"},
	} {
		r := runCLI(t, nil, "", append(args, "--data", s.data)...)
		assert.Equal(t, "exit code of "+strings.Join(args, " "), exitCode(r.err), 1)
	}
	r = runCLI(t, nil, "", "share", thread, "--name", "x", "--expires", "soon", "--data", s.data)
	assert.Equal(t, "a bad --expires", exitCode(r.err), 2)
}

// TestAskWaitInterrupted: ask --wait says on standard error which
// interaction it waits for, before it waits; Ctrl-C (SIGINT) then cancels
// the question nobody waits for any more, printing it and exiting 12;
// with --keep-on-interrupt it leaves the question pending and exits 1.
// An answer that came before the interrupt is the outcome.
func TestAskWaitInterrupted(t *testing.T) {
	t.Parallel()
	bin := chatrelayBinary(t)
	for _, tc := range []struct {
		name   string
		flags  []string
		answer bool // the person approves before the interrupt
		exit   int
		state  chatrelay.State
	}{
		{"cancels", nil, false, 12, chatrelay.Canceled},
		{"keep on interrupt", []string{"--keep-on-interrupt"}, false, 1, chatrelay.Pending},
		{"answered first", nil, true, 0, chatrelay.Approved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			data := freshThread(t)
			cmd := exec.Command(bin, slices.Concat([]string{"ask", threadNew, "--approval", "Deploy build 412?", "--timeout", "1h", "--wait", "--data", data}, tc.flags)...)
			var stdout bytes.Buffer
			cmd.Stdout = &stdout
			stderr, err := cmd.StderrPipe()
			assert.Success(t, err)
			assert.Success(t, cmd.Start())
			t.Cleanup(func() { cmd.Process.Kill() })
			line := make(chan string, 1)
			go func() {
				s, _ := bufio.NewReader(stderr).ReadString('\n')
				line <- s
				io.Copy(io.Discard, stderr)
			}()
			var first string
			select {
			case first = <-line:
			case <-time.After(10 * time.Second):
				t.Fatal("ask --wait said nothing on standard error within 10s")
			}
			id := regexp.MustCompile(`ix_[0-9a-f]{12}`).FindString(first)
			assert.True(t, id != "" && strings.Contains(first, threadNew), "the first line names no interaction and thread: %q", first)
			if tc.answer {
				respondWith(chatrelay.Answer{Decision: chatrelay.Approve})(t, data, host.InteractionResult{Thread: threadNew, Interaction: &chatrelay.Interaction{ID: id}})
				// ask --wait may see the answer first and exit 0 by itself;
				// either way the answer is the outcome.
			}
			if err := cmd.Process.Signal(os.Interrupt); err != nil && !errors.Is(err, os.ErrProcessDone) {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("ask --wait still runs 10s after the interrupt")
			}
			assert.Equal(t, "exit status", cmd.ProcessState.ExitCode(), tc.exit)
			r, err := (&host.Verbs{Store: openStore(t, data)}).CheckInteraction(t.Context(), host.InteractionInput{Thread: threadNew, InteractionID: id})
			assert.Success(t, err)
			assert.Equal(t, "the interaction's state", r.Interaction.State, tc.state)
			if tc.state != chatrelay.Pending {
				var printed host.InteractionResult
				assert.Success(t, json.Unmarshal(stdout.Bytes(), &printed))
				assert.Equal(t, "the state printed", printed.Interaction.State, tc.state)
			}
		})
	}
}

// TestWatchEndsOnASignal: an interrupt or SIGTERM ends watch with exit
// status 0, as docs/cli.md says, after the lines it printed.
func TestWatchEndsOnASignal(t *testing.T) {
	t.Parallel()
	bin := chatrelayBinary(t)
	for _, sig := range []os.Signal{os.Interrupt, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			data := freshThread(t)
			cmd := exec.Command(bin, "watch", "--since", "1", "--data", data)
			stdout, err := cmd.StdoutPipe()
			assert.Success(t, err)
			assert.Success(t, cmd.Start())
			t.Cleanup(func() { cmd.Process.Kill() })
			line := make(chan string, 1)
			go func() {
				s, _ := bufio.NewReader(stdout).ReadString('\n')
				line <- s
				io.Copy(io.Discard, stdout)
			}()
			select {
			case s := <-line:
				assert.True(t, strings.Contains(s, "can you deploy?"), "watch printed %q", s)
			case <-time.After(10 * time.Second):
				t.Fatal("watch --since 1 printed nothing within 10s")
			}
			assert.Success(t, cmd.Process.Signal(sig))
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("watch still runs 10s after the signal")
			}
			assert.Equal(t, "exit status", cmd.ProcessState.ExitCode(), 0)
		})
	}
}

// TestWatchSinceSaysWhatRetentionDropped: a watch --since that resumes
// past messages retention dropped meanwhile prints the thread's reset line
// before what it kept, as subscribe does, so that an agent resuming from
// its last epoch knows it missed messages it can no longer read.
func TestWatchSinceSaysWhatRetentionDropped(t *testing.T) {
	t.Parallel()
	data := freshThread(t)
	before := cursorOf(t, data, threadNew)
	// While the watch is away, five replies in a thread that keeps three:
	// the first two after the cursor are gone.
	for i := range 5 {
		assert.Success(t, runCLI(t, nil, "", "reply", threadNew, fmt.Sprintf("away %d", i), "--retention-messages", "3", "--data", data).err)
	}

	watched := watchUntil(t, "away 4", "watch", "--all", "--data", data, "--since", strconv.FormatInt(before, 10))
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(watched), "\n") {
		var l watchLine
		assert.Success(t, json.Unmarshal([]byte(line), &l))
		switch {
		case l.Reset:
			assert.Equal(t, "reset line's thread", l.Thread, threadNew)
			got = append(got, "reset")
		case l.Message != nil:
			var m chatrelay.Message
			assert.Success(t, json.Unmarshal(l.Message, &m))
			got = append(got, m.Text)
		}
	}
	assert.Equal(t, "watch printed", strings.Join(got, "|"), "reset|away 2|away 3|away 4")
}

// cursorOf is the thread's cursor as `show --json` gives it: a watch
// --since from it prints what is stored after now.
func cursorOf(t *testing.T, data, thread string) int64 {
	t.Helper()
	r := runCLI(t, nil, "", "show", thread, "--json", "--data", data)
	assert.Success(t, r.err)
	var shown struct{ Cursor int64 }
	assert.Success(t, json.Unmarshal([]byte(r.stdout), &shown))
	return shown.Cursor
}

// watchUntil runs `chatrelay args…` (a watch) until it has printed want,
// 10 s at most, then interrupts it, and returns what it printed: it must
// end without an error.
func watchUntil(t *testing.T, want string, args ...string) string {
	t.Helper()
	ctx, cancelWatch := context.WithCancel(t.Context())
	var watched lockedBuffer
	watchDone := make(chan error, 1)
	go func() {
		watchDone <- run(ctx, args, env(nil), strings.NewReader(""), &watched, os.Stderr)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(watched.String(), want) {
		assert.True(t, time.Now().Before(deadline), "watch did not print %q:\n%s", want, watched.String())
		time.Sleep(10 * time.Millisecond) // the poll interval of a condition with a deadline
	}
	cancelWatch()
	assert.Success(t, <-watchDone)
	return watched.String()
}
