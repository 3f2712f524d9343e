package chatrelay_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
)

// TestDefaultsWrittenOnce: every default and limit of defaults.go is
// written there only. Elsewhere in the module's code (tests and the load
// tool, which sets its own scenario sizes, aside) the values appear only
// by name: a flag's default, an option's zero value, a message's words.
// The test greps for the values' literal forms. (limits.go is the table
// of the contract's other limits, some of which are equal in value.)
func TestDefaultsWrittenOnce(t *testing.T) {
	forbidden := []*regexp.Regexp{
		// the durations
		regexp.MustCompile(`\b720\s*\*\s*time\.Hour\b|"720h"`),
		regexp.MustCompile(`\b10\s*\*\s*time\.Minute\b`),
		regexp.MustCompile(`\b15\s*\*\s*time\.Minute\b`),
		regexp.MustCompile(`\b20\s*\*\s*time\.Second\b`),
		// the contract's limits
		regexp.MustCompile(`\b(4000|4 000|32768|32 768)\b`),
		// a flag whose default is a literal number (0 and 1 aside)
		regexp.MustCompile(`\b(Int|IntVar|Int64|Int64Var)\((&\w+(\.\w+)*, )?"[a-z-]+", [2-9]\d*,`),
		regexp.MustCompile(`\b(Duration|DurationVar)\((&\w+(\.\w+)*, )?"[a-z-]+", [1-9][\d]*\s*\*\s*time\.`),
		// the HTTP servers' timeouts, the stores' defaults
		regexp.MustCompile(`\b(ReadHeader|Read|Write|Idle)Timeout:\s*\d`),
		regexp.MustCompile(`\b(2|5|15|30)\s*\*\s*time\.Second\b.*\b(Rescan|ResetAfter|Timeout|lease|[Pp]ing\w*)\b|\b(Rescan|ResetAfter|Timeout|[Ll]ease|[Pp]ing\w*)\s*=\s*(2|5|15|30)\s*\*\s*time\.Second\b`),
		// a string flag or option whose default is a literal
		regexp.MustCompile(`\b(String|StringVar)\((&\w+(\.\w+)*, )?"(data|addr|redis-prefix)", "`),
		regexp.MustCompile(`Prefix\s*=\s*"chatrelay:"`),
	}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || path == "cmd/chatbench" || path == "internal" || d.Name() == "testdata") {
			// internal/ is test support (its waits are the tests' own, not
			// the server's defaults); cmd/chatbench is the load tool
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || path == "defaults.go" || path == "limits.go" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			code, _, _ := strings.Cut(line, "//")
			for _, re := range forbidden {
				if m := re.FindString(code); m != "" {
					t.Errorf("%s:%d writes a default again (%q): name it from defaults.go", path, i+1, m)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestStreamRefusalCountsTheOwnersStreams: the refusal's words agree
// with the owner's reserve: "1 stream is" at 4 per thread or fewer (it
// read "1 are kept for the owner"), "5 streams are" at the default 20.
func TestStreamRefusalCountsTheOwnersStreams(t *testing.T) {
	for _, c := range []struct {
		perThread int
		want      string
	}{
		{4, "participants together 3 of them: 1 stream is kept for the owner"},
		{1, "participants together 0 of them: 1 stream is kept for the owner"},
		{20, "participants together 15 of them: 5 streams are kept for the owner"},
	} {
		msg := chatrelay.StreamLimits{PerThread: c.perThread, PerIP: 10}.Refusal().Message
		if !strings.Contains(msg, c.want) {
			t.Errorf("%d per thread: %q, want it to say %q", c.perThread, msg, c.want)
		}
	}
}
