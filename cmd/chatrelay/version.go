package main

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
)

// version prints one line: the module's version ("(devel)" for a build
// from a checkout, the tag for `go install …@vX`), the VCS revision and
// its time when the build recorded them (a "+dirty" revision had
// uncommitted changes), and the Go version.
func version(ctx context.Context, e cmdEnv) error {
	if _, _, err := e.parseForm(form{"", 0, "no operands"}); err != nil {
		return err
	}
	_, err := fmt.Fprintln(e.stdout, versionLine())
	return err
}

func versionLine() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "chatrelay (unknown: built without module support)"
	}
	parts := []string{"chatrelay", info.Main.Version}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		rev = rev[:min(len(rev), 12)]
		if settings["vcs.modified"] == "true" {
			rev += "+dirty"
		}
		parts = append(parts, rev)
		if at := settings["vcs.time"]; at != "" {
			parts = append(parts, at)
		}
	}
	return strings.Join(append(parts, info.GoVersion), " ")
}
