package chatrelay_test

import (
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestCleanNameCutSplitsNoSecret: a name is cut to its most code points
// when it is stored (an attachment's to 200, a participant's to 64), and
// redacted when a participant reads it. An outside probe uploaded
// "xxx… ghp_<36>" with the token across the cut: the stored name kept
// "ghp_" and the token's first characters, which no longer have the
// token's shape, so a participant read half of a GitHub token (of a
// share token, of an AWS key id, of a thread token, of a JWT) unredacted.
// A word the cut would split, when it holds a secret, is cut before it
// instead; any other word is cut as before.
func TestCleanNameCutSplitsNoSecret(t *testing.T) {
	t.Parallel()
	secrets := []string{
		"ghp_" + strings.Repeat("Ab1", 12),
		"AKIA" + "ABCDEFGHIJKLMNOP",
		"chp_" + strings.Repeat("Q", 43),
		strings.Repeat("a1", 32),
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijklmnopqrstuvwxyz012345",
		"https://user:hunter2hunter2@example.com/x",
		"(github_pat_" + strings.Repeat("B2", 30) + ")",
	}
	for _, c := range nameCleaners {
		for _, secret := range secrets {
			r := chatrelay.Redact(secret)
			hidden := 0 // where the secret's redaction starts
			for secret[hidden] == r[hidden] {
				hidden++
			}
			for kept := 1; kept < len(secret) && kept < c.max-1; kept++ {
				before := strings.Repeat("x", c.max-kept-1)
				want := strings.TrimSpace(before + " " + secret[:min(kept, hidden)])
				got, err := c.clean(before + " " + secret + " after")
				assert.Success(t, err)
				assert.Equal(t, c.what+" cut inside "+secret, got, want)
				glued := strings.Repeat("x", c.max-kept-1) + "-" // one word
				got, err = c.clean(glued + secret)
				assert.Success(t, err)
				assert.Equal(t, c.what+" cut inside "+secret+", in one word", got, glued+secret[:min(kept, hidden)])
			}
		}
		word := strings.Repeat("y", 40)
		got, err := c.clean(strings.Repeat("x", c.max-11) + " " + word)
		assert.Success(t, err)
		assert.Equal(t, c.what+" cut inside an ordinary word", got, strings.Repeat("x", c.max-11)+" "+word[:10])
	}
}

// TestCleanNameCutSplitsNoBearer: a bearer credential's shape spans two
// words ("Bearer <token>", 16 characters or more). A name cut inside the
// token kept "Bearer " and fewer than 16 of its characters, which no
// longer have the shape, so a participant read them unredacted: the
// word-by-word look at the cut saw no secret in the token alone. The
// name is cut before the token instead.
func TestCleanNameCutSplitsNoBearer(t *testing.T) {
	t.Parallel()
	token := "abcdefghijklmnopqrstuvwxyz0123456789"
	for _, c := range nameCleaners {
		for _, bearer := range []string{"Bearer", "bearer", "BEARER"} {
			for kept := 1; kept < len(token); kept++ {
				before := strings.Repeat("x", c.max-len(bearer)-kept-2)
				got, err := c.clean(before + " " + bearer + " " + token + " after")
				assert.Success(t, err)
				assert.Equal(t, c.what+" cut inside a bearer token", got, before+" "+bearer)
				if red := chatrelay.Redact(got); strings.Contains(red, bearer+" "+token[:1]) {
					t.Errorf("%s: a participant reads %q", c.what, red)
				}
			}
		}
	}
}

// nameCleaners are the two names cut to a limit: an attachment's and a
// participant's.
var nameCleaners = []struct {
	what  string
	max   int
	clean func(string) (string, error)
}{
	{"an attachment's name", chatrelay.LimitAttachmentName.Max, chatrelay.CleanAttachmentName},
	{"a participant's name", chatrelay.LimitName.Max, chatrelay.CleanName},
}
