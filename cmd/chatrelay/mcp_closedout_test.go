package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestMCPClosedStdoutEndsCleanly: `chatrelay mcp` whose client closed its
// end of the process's standard output (it reads no more) ends the
// session at its first answer with exit status 1 and one line on standard
// error; it was killed by SIGPIPE (Go's default for a write to fd 1 whose
// reader is gone), an exit by signal that a client or a supervisor reads
// as a crash. Whatever the client's standard input still does.
func TestMCPClosedStdoutEndsCleanly(t *testing.T) {
	t.Parallel()
	bin := chatrelayBinary(t)
	for _, inputOpen := range []bool{false, true} {
		data := seed(t)
		r, w, err := os.Pipe()
		assert.Success(t, err)
		cmd := exec.CommandContext(t.Context(), bin, "mcp", "--data", data, "--fsync", "never")
		cmd.Env = append(os.Environ(), "CHATRELAY_DATA=", "CHATRELAY_STORE=")
		cmd.Stdout = w
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		in, err := cmd.StdinPipe()
		assert.Success(t, err)
		assert.Success(t, cmd.Start())
		w.Close()
		r.Close() // the client reads no more: the pipe has no reader
		_, err = io.WriteString(in, mcpInit+"\n")
		assert.Success(t, err)
		if !inputOpen {
			in.Close()
		}
		err = cmd.Wait() // the session ends at its first answer, input open or not
		in.Close()
		var ee *exec.ExitError
		assert.True(t, errors.As(err, &ee), "input open %v: chatrelay mcp: %v; stderr: %s", inputOpen, err, stderr.String())
		ws := ee.Sys().(syscall.WaitStatus)
		assert.True(t, !ws.Signaled(), "input open %v: chatrelay mcp was killed by %v; stderr: %s", inputOpen, ws.Signal(), stderr.String())
		assert.Equal(t, "exit status", ws.ExitStatus(), 1)
		assert.True(t, strings.Count(stderr.String(), "\n") == 1 && strings.Contains(stderr.String(), "standard output") && strings.Contains(stderr.String(), "broken pipe"),
			"input open %v: standard error %q: want one line naming standard output and why", inputOpen, stderr.String())
	}
}

// TestMCPAnswersInFullOnAnOpenStdout: a real `chatrelay mcp` process whose
// client reads its standard output to the end gets every answer whole,
// each one a line of JSON, and the process exits 0 once its input ends.
func TestMCPAnswersInFullOnAnOpenStdout(t *testing.T) {
	t.Parallel()
	data := seed(t)
	big := strings.Repeat("long line of text ", 200) // answers past a pipe's buffer, together
	lines := []string{mcpInit, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`}
	for i := 3; i < 23; i++ {
		lines = append(lines, `{"jsonrpc":"2.0","id":`+strconv.Itoa(i)+`,"method":"tools/call","params":{"name":"chatrelay_send","arguments":{"thread":"`+threadOld+`","text":"`+big+`"}}}`)
	}
	cmd := exec.CommandContext(t.Context(), chatrelayBinary(t), "mcp", "--data", data, "--fsync", "never")
	cmd.Env = append(os.Environ(), "CHATRELAY_DATA=", "CHATRELAY_STORE=")
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	assert.Success(t, err)
	assert.Success(t, cmd.Start())
	answered := map[string]bool{}
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var a mcpLine
		assert.True(t, json.Unmarshal(sc.Bytes(), &a) == nil, "a line that is no JSON: %q", sc.Text())
		if a.Method == "" {
			assert.True(t, a.Error == nil && a.Result != nil && !a.Result.IsError, "the call %s: %s", a.ID, sc.Text())
			answered[string(a.ID)] = true
		}
	}
	assert.Success(t, sc.Err())
	assert.True(t, cmd.Wait() == nil, "chatrelay mcp: exit %v; stderr: %s", cmd.ProcessState, stderr.String())
	assert.Equal(t, "answers", len(answered), len(lines)) // every call (initialize, tools/list, 20 sends); the notification has none
}
