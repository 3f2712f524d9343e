package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
)

// TestReportSaysNoExitStatus: an outcome in the exit status (ask and
// check --wait: 10 denied, 11 expired, 12 canceled) is the answer, not an
// error; main wrote "chatrelay: exit status 10" to standard error under
// the outcome's JSON, as if the command had failed.
func TestReportSaysNoExitStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"success", nil, ""},
		{"help", flag.ErrHelp, ""},
		{"denied", exitStatus(10), ""},
		{"an error", usageError("reply takes THREAD and TEXT"), "chatrelay: reply takes THREAD and TEXT\n"},
	} {
		var b bytes.Buffer
		report(&b, tc.err)
		assert.Equal(t, tc.name, b.String(), tc.want)
	}
}

// TestAttachRefusesADirectory: --attach naming a folder is refused before
// anything is stored, as a missing file is (exit 2, naming the flag);
// it was opened, and its read failed mid-upload as "invalid_attachment:
// the upload broke off before its end", which says nothing of the folder.
func TestAttachRefusesADirectory(t *testing.T) {
	t.Parallel()
	data := seed(t)
	dir := t.TempDir()
	r := runCLI(t, nil, "", "reply", "--data", data, "--fsync", "never", threadOld, "x", "--attach", dir)
	assert.Equal(t, "exit code", exitCode(r.err), 2)
	assert.True(t, strings.Contains(r.err.Error(), "--attach "+dir) && strings.Contains(r.err.Error(), "is a folder"), "error: %v", r.err)
	_, err := os.Stat(filepath.Join(data, "chat", threadOld+".files"))
	assert.True(t, os.IsNotExist(err), "a folder of files was made: %v", err)
}

// TestAskRefusesATimeoutOfZero: --timeout 0s is under the least timeout
// (1s) and refused as 73h is over the most (invalid_interaction, exit 1,
// nothing stored); it was read as no --timeout and asked with the default
// hour, a deadline the caller had not asked for.
func TestAskRefusesATimeoutOfZero(t *testing.T) {
	t.Parallel()
	data := seed(t)
	for _, args := range [][]string{
		{"--approval", "Deploy?", "--timeout", "0s"},
		{"--input", "Branch?", "--allow-text", "--timeout", "0"},
	} {
		r := runCLI(t, nil, "", append([]string{"ask", threadOld, "--data", data, "--fsync", "never"}, args...)...)
		assert.Code(t, r.err, chatrelay.InvalidInteraction)
		assert.Equal(t, "exit code", exitCode(r.err), 1)
		assert.Equal(t, "stdout", r.stdout, "")
	}
	r := runCLI(t, env(map[string]string{"CHATRELAY_TIMEOUT": "0s"}), "", "ask", threadOld, "--data", data, "--approval", "Deploy?")
	assert.Code(t, r.err, chatrelay.InvalidInteraction)
	r = runCLI(t, nil, "", "show", "--data", data, threadOld)
	assert.Success(t, r.err)
	assert.True(t, !strings.Contains(r.stdout, "[approval") && !strings.Contains(r.stdout, "[input"), "a refused ask stored a question:\n%s", r.stdout)
}

// TestSubscribeKeepsTheTicketOutOfItsLog: subscribe says on standard
// error why each stream ended; with --ticket, the error of a dial that
// failed held the stream's URL, ticket and all, once a retry, into the
// agent's log.
func TestSubscribeKeepsTheTicketOutOfItsLog(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.Success(t, err)
	addr := ln.Addr().String()
	ln.Close() // nothing listens: every dial fails
	const ticket = "tkt_SECRETvalue0123456789"
	ctx, cancel := context.WithTimeout(t.Context(), 1200*time.Millisecond)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err = run(ctx, []string{"subscribe", "--server", "http://" + addr, "--ticket", ticket}, env(nil), strings.NewReader(""), &stdout, &stderr)
	assert.Success(t, err)
	assert.True(t, strings.Contains(stderr.String(), "stream ended"), "no drop said: %q", stderr.String())
	assert.True(t, !strings.Contains(stderr.String(), "SECRETvalue"), "the ticket is in the log: %q", stderr.String())
}

// TestSubscribeRefusesATokenNotShapedAsOne: a --token that is no thread
// token (a share token, one cut short, one with a line break that no
// HTTP header may carry) is a usage error at once, exit 2, before any
// dial; subscribe dialled again and again, "stream ended" each time,
// until interrupted (exit 0), as if the server were down.
func TestSubscribeRefusesATokenNotShapedAsOne(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.Success(t, err)
	addr := ln.Addr().String()
	ln.Close() // nothing listens: a dial would fail
	for _, tok := range []string{"chp_" + strings.Repeat("A", 43), strings.Repeat("a", 63), strings.Repeat("a", 32) + "\n" + strings.Repeat("a", 31)} {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		var stdout, stderr bytes.Buffer
		err := run(ctx, []string{"subscribe", "--server", "http://" + addr, "--token", tok}, env(nil), strings.NewReader(""), &stdout, &stderr)
		cancel()
		assert.Equal(t, fmt.Sprintf("exit code for --token %q", tok), exitCode(err), 2)
		assert.True(t, !strings.Contains(stderr.String(), "stream ended"), "it dialled: %q", stderr.String())
	}
	// A negative --since is named as what is wrong (it said "needs
	// --server and exactly one of --token or --ticket").
	err = run(t.Context(), []string{"subscribe", "--server", "http://" + addr, "--token", strings.Repeat("a", 64), "--since", "-1"}, env(nil), strings.NewReader(""), io.Discard, io.Discard)
	assert.True(t, exitCode(err) == 2 && strings.Contains(err.Error(), "--since"), "--since -1: %v", err)
}

// TestCheckWaitInterrupted: an interrupt while check --wait waits says
// the interaction is still pending (check never cancels it), as ask
// --wait --keep-on-interrupt does, exit 1; it said "context canceled".
func TestCheckWaitInterrupted(t *testing.T) {
	t.Parallel()
	data := seed(t)
	r := runCLI(t, nil, "", "ask", threadOld, "--data", data, "--fsync", "never", "--approval", "Deploy?")
	assert.Success(t, r.err)
	var asked host.InteractionResult
	assert.Success(t, json.Unmarshal([]byte(r.stdout), &asked))
	id := asked.Interaction.ID
	ctx, cancel := context.WithCancel(t.Context()) // as signal.NotifyContext does at Ctrl-C
	defer cancel()
	time.AfterFunc(300*time.Millisecond, cancel)
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"check", threadOld, id, "--wait", "--data", data}, env(nil), strings.NewReader(""), &stdout, &stderr)
	assert.Equal(t, "exit code", exitCode(err), 1)
	assert.True(t, err != nil && strings.Contains(err.Error(), "interrupted") && strings.Contains(err.Error(), id) && strings.Contains(err.Error(), "still pending"),
		"the error: %v", err)
	assert.Equal(t, "stdout", stdout.String(), "")
}

// TestWaitInterruptedAfterTheAnswer: an interrupt that comes just after
// another process's answer was stored, before the wait saw it, said
// "interrupted: … is still pending" (exit 1) for check --wait and ask
// --wait --keep-on-interrupt, though the store held the approval (the
// probe from outside: 5 of 24 interrupts right after a 200). The answer
// stored is the outcome: printed, exit 0.
func TestWaitInterruptedAfterTheAnswer(t *testing.T) {
	t.Parallel()
	for _, verb := range []string{"check", "ask --keep-on-interrupt"} {
		t.Run(verb, func(t *testing.T) {
			t.Parallel()
			data := freshThread(t)
			st := openStore(t, data)
			for i := range 10 {
				prompt := fmt.Sprintf("Deploy %d?", i)
				ask := []string{"ask", threadNew, "--data", data, "--fsync", "never", "--approval", prompt, "--timeout", "1h"}
				var args []string
				if verb == "check" {
					args = []string{"check", threadNew, asked(t, runCLI(t, nil, "", ask...)).Interaction.ID, "--wait", "--data", data}
				} else {
					args = append(ask, "--wait", "--keep-on-interrupt")
				}
				ctx, cancel := context.WithCancel(t.Context()) // as signal.NotifyContext does at Ctrl-C
				done := make(chan cliResult, 1)
				go func() {
					var stdout, stderr bytes.Buffer
					err := run(ctx, args, env(nil), strings.NewReader(""), &stdout, &stderr)
					done <- cliResult{err: err, stdout: stdout.String(), stderr: stderr.String()}
				}()
				var id string
				assert.Eventually(t, 10*time.Second, "the question asked", func() bool {
					pending, err := st.Pending(t.Context())
					assert.Success(t, err)
					for _, p := range pending {
						id = p.InteractionID
					}
					return id != ""
				})
				_, err := st.Change(t.Context(), threadNew, store.Change{Op: store.Respond, InteractionID: id, Answer: chatrelay.Answer{Decision: "approve"}, By: chatrelay.Operator})
				assert.Success(t, err)
				cancel() // the person approved, then Ctrl-C
				res := <-done
				assert.Equal(t, fmt.Sprintf("round %d: exit code (%v)", i, res.err), exitCode(res.err), 0)
				assert.True(t, strings.Contains(res.stdout, `"state":"approved"`), "round %d: printed %q", i, res.stdout)
			}
		})
	}
}

// TestStdinReadEndsAtAnInterrupt: reply - and card - read standard input
// until its end; main takes SIGINT and SIGTERM into the context, so an
// interrupt while nothing comes (a terminal, a stuck pipe) did not end
// them: they waited for the end of the input, then sent what came.
func TestStdinReadEndsAtAnInterrupt(t *testing.T) {
	t.Parallel()
	data := seed(t)
	for _, args := range [][]string{{"reply", threadOld, "-"}, {"card", threadOld, "-"}} {
		pr, pw := io.Pipe() // nothing is written, nothing ends it
		defer pw.Close()
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(200*time.Millisecond, cancel)
		done := make(chan error, 1)
		var stdout, stderr bytes.Buffer
		go func() {
			done <- run(ctx, append(args, "--data", data, "--fsync", "never"), env(nil), pr, &stdout, &stderr)
		}()
		select {
		case err := <-done:
			assert.Equal(t, args[0]+": exit code", exitCode(err), 1)
			assert.True(t, strings.Contains(err.Error(), "interrupted"), "%s: the error: %v", args[0], err)
		case <-time.After(5 * time.Second):
			t.Fatalf("%s - still reads standard input 5s after the interrupt", args[0])
		}
		cancel()
	}
}

// TestAttachFromAPipeEndsAtAnInterrupt: reply --attach streams a pipe
// (--attach <(make-report)); an interrupt while the pipe still has no end
// did not stop the read, and once the pipe ended the reply was sent, as if
// no one had pressed Ctrl-C. It ends now, and nothing is sent.
func TestAttachFromAPipeEndsAtAnInterrupt(t *testing.T) {
	t.Parallel()
	data := seed(t)
	fifo := filepath.Join(t.TempDir(), "report")
	assert.Success(t, syscall.Mkfifo(fifo, 0o600))
	w := make(chan *os.File, 1)
	go func() { // the writer: opens the pipe, writes a line, never closes it (till the test ends)
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err == nil {
			f.WriteString("partial\n")
		}
		w <- f
	}()
	t.Cleanup(func() {
		if f := <-w; f != nil {
			f.Close()
		}
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	time.AfterFunc(300*time.Millisecond, cancel)
	done := make(chan error, 1)
	var stdout, stderr bytes.Buffer
	go func() {
		done <- run(ctx, []string{"reply", threadOld, "the report", "--attach", fifo, "--data", data, "--fsync", "never"}, env(nil), strings.NewReader(""), &stdout, &stderr)
	}()
	select {
	case err := <-done:
		assert.Equal(t, "exit code", exitCode(err), 1)
		assert.True(t, strings.Contains(err.Error(), "interrupted"), "the error: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("reply --attach still reads the pipe 5s after the interrupt")
	}
	r := runCLI(t, nil, "", "show", "--data", data, threadOld)
	assert.True(t, !strings.Contains(r.stdout, "the report"), "the reply was sent:\n%s", r.stdout)
}

// TestAMissingDataFolderIsSaid: a command that reads or answers a thread
// on a data folder that does not exist (a typo in --data) says so, exit
// 1, and makes no folder; list printed an empty table and every command
// made DIR/chat, so the typo looked like a store with no threads.
func TestAMissingDataFolderIsSaid(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"list"},
		{"show", threadOld},
		{"reply", threadOld, "hi"},
		{"check", threadOld, "ix_000000000000"},
		{"share", "list", threadOld},
		{"device", "list", threadOld},
	} {
		data := filepath.Join(t.TempDir(), "typo")
		r := runCLI(t, nil, "", append(args, "--data", data)...)
		assert.Equal(t, args[0]+": exit code", exitCode(r.err), 1)
		assert.True(t, r.err != nil && strings.Contains(r.err.Error(), "no data folder "+data), "%s: the error: %v", args[0], r.err)
		_, err := os.Stat(data)
		assert.True(t, os.IsNotExist(err), "%s made the folder: %v", args[0], err)
	}
	data := filepath.Join(t.TempDir(), "new")
	r := runCLI(t, nil, "", "open", "--title", "first", "--data", data, "--fsync", "never")
	assert.Success(t, r.err) // open starts a store where there is none
}

// TestNamesNotUTF8Refused: a name on the command line that is not valid
// UTF-8 (a share link's, a device's, an agent key's) is refused
// invalid_name and stores nothing, as the API refuses such a name: it was
// taken with each bad byte made a space ("a\xffb" stored as "a b"), a name
// the user never wrote.
func TestNamesNotUTF8Refused(t *testing.T) {
	t.Parallel()
	data := seed(t)
	for _, args := range [][]string{
		{"share", threadOld, "--name", "a\xffb"},
		{"device", threadOld, "--name", "a\xffb"},
		{"agent", "add", "a\xffb"},
	} {
		r := runCLI(t, nil, "", append(args, "--data", data)...)
		assert.Equal(t, fmt.Sprintf("%q: code (%v)", args, r.err), chatrelay.CodeOf(r.err), chatrelay.InvalidName)
	}
	for _, args := range [][]string{{"share", "list", threadOld, "--json"}, {"device", "list", threadOld, "--json"}, {"agent", "list", "--json"}} {
		r := runCLI(t, nil, "", append(args, "--data", data)...)
		assert.Success(t, r.err)
		assert.True(t, !strings.Contains(r.stdout, `"a b"`), "%q lists a refused name: %s", args, r.stdout)
	}
}
