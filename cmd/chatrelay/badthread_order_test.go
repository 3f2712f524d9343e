package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestMalformedThreadBeforeTheFolder: a malformed thread id is a
// malformed command line (invalid_thread, exit 2) whether or not the data
// folder exists; show, reply, ask, check, cancel, react and card looked
// for the folder first and answered not_found, exit 1, where share and
// device (and the same verbs on a folder that exists) answered exit 2.
func TestMalformedThreadBeforeTheFolder(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nodata")
	for _, args := range [][]string{
		{"show", "zz"},
		{"reply", "zz", "hi"},
		{"ask", "zz", "--approval", "Deploy?"},
		{"check", "zz", "ix_000000000000"},
		{"cancel", "zz", "ix_000000000000"},
		{"react", "zz", "MSG-1", "👍"},
		{"card", "zz", "-"},
	} {
		r := runCLI(t, nil, "{}", append(args, "--data", missing)...)
		assert.Code(t, r.err, chatrelay.InvalidThread)
		assert.Equal(t, args[0]+" exit code", exitCode(r.err), 2)
	}
	_, err := os.Stat(missing)
	assert.True(t, os.IsNotExist(err), "a folder was made: %v", err)
}

// TestShowV2WithoutJSONBeforeTheFolder: show --v2 without --json is a
// malformed command line (exit 2) wherever --data points; it was checked
// only once the store was open, so a missing folder answered not_found.
func TestShowV2WithoutJSONBeforeTheFolder(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nodata")
	r := runCLI(t, nil, "", "show", threadOld, "--v2", "--data", missing)
	assert.Equal(t, "exit code", exitCode(r.err), 2)
}

// TestEmptyDataIsAUsageError: --data "" (or --store file:) names no
// folder, a bad flag value (exit 2) for every command, as serve and open
// refuse it; list, show and the verbs answered not_found, exit 1, "no
// data folder : give --data".
func TestEmptyDataIsAUsageError(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"list", "--data", ""},
		{"list", "--store", "file:"},
		{"show", threadOld, "--data", ""},
		{"reply", threadOld, "hi", "--data", ""},
	} {
		r := runCLI(t, nil, "", args...)
		assert.Equal(t, strings.Join(args, " ")+" exit code", exitCode(r.err), 2)
	}
}
