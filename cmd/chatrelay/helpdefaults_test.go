package main

import (
	"strings"
	"testing"
)

// TestHostHelpSaysTheFolderDefault: a host command that writes takes the
// retention and thread limit its data folder's server recorded
// (settings.json) unless given, so its --help must not say that it
// defaults to serve's values ("(default 500)"), which a reader would take
// for what the command applies; serve's --help keeps its own defaults.
func TestHostHelpSaysTheFolderDefault(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"reply", "ask", "check", "cancel", "react", "card", "open", "share", "device", "push", "mcp", "agent"} {
		defaults := helpDefaults(t, cmd)
		help := helpText(t, cmd)
		for _, f := range []string{"max-threads", "retention-messages", "retention-age"} {
			if def := defaults[f]; def != "" {
				t.Errorf("chatrelay %s --help: --%s says (default %s), but the command takes the folder's recorded value unless given", cmd, f, def)
			}
			if !strings.Contains(flagHelp(help, f), "the folder's server recorded") {
				t.Errorf("chatrelay %s --help: --%s does not say it defaults to what the folder's server recorded:\n%s", cmd, f, flagHelp(help, f))
			}
		}
	}
	serve := helpDefaults(t, "serve")
	for f, want := range map[string]string{"max-threads": "500", "retention-messages": "200", "retention-age": "720h0m0s"} {
		if serve[f] != want {
			t.Errorf("chatrelay serve --help: --%s says (default %q), want %q", f, serve[f], want)
		}
	}
}

// flagHelp is the lines help gives flag f: its own and its usage's.
func flagHelp(help, f string) string {
	var b strings.Builder
	in := false
	for _, l := range strings.Split(help, "\n") {
		if strings.HasPrefix(l, "  -") {
			in = strings.HasPrefix(l, "  -"+f+" ") || l == "  -"+f
		}
		if in {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
