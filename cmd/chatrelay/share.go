package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	qrcode "github.com/skip2/go-qrcode"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
)

// share is the host's side of share links (contract Part 3):
//
//	chatrelay share THREAD --name NAME [--role] [--kind] [--expires D] [--cap N] [--public-url URL]
//	chatrelay share list THREAD [--json]
//	chatrelay share revoke THREAD (ID | --all)
//	chatrelay share audit THREAD [--json]
//
// It writes through the same store and locks as the server: a revoke here
// ends the participant's streams on a running server within a second.
func share(ctx context.Context, e cmdEnv) error {
	fs := newFlags("share", "share THREAD --name NAME [flags] | share list THREAD [--json] | share revoke THREAD (ID | --all) | share audit THREAD [--json]", e.stderr)
	var sf storeFlags
	sf.register(fs, true)
	name := fs.String("name", "", "invite: the participant's `name` (cleaned: no line breaks, no [ ] < >, at most 64 characters)")
	role := fs.String("role", string(chatrelay.Commenter), "invite: `viewer` (reads) or commenter (reads and posts)")
	kind := fs.String("kind", string(chatrelay.Human), "invite: `human` or agent")
	expires := fs.String("expires", "7d", "invite: how long the link lives, 1h … 30d (`D`: 90m, 12h, 7d)")
	limit := fs.Int("cap", chatrelay.DefaultCap, "invite: the most messages the participant may post, 1 … 1000")
	publicURL := fs.String("public-url", "", "invite: the server's public `URL` for the link (default: what the folder's server records with serve --public-url)")
	asJSON := fs.Bool("json", false, "list, audit: one JSON object instead of a table")
	all := fs.Bool("all", false, "revoke: every active link of the thread")
	if err := parse(fs, e.args, e.getenv); err != nil {
		return err
	}
	args := fs.Args()
	verb := "invite"
	if len(args) > 0 && (args[0] == "list" || args[0] == "revoke" || args[0] == "audit") {
		verb, args = args[0], args[1:]
	}
	want := map[string]int{"invite": 1, "list": 1, "audit": 1, "revoke": 2}[verb]
	if verb == "revoke" && *all {
		want = 1
	}
	if len(args) != want {
		return usageError(fmt.Sprintf("share %s takes %s", verb, map[string]string{
			"invite": "THREAD --name NAME", "list": "THREAD", "audit": "THREAD", "revoke": "THREAD and ID (or --all)"}[verb]))
	}
	if verb != "invite" && given(fs, "name") {
		return usageError("--name is for inviting: chatrelay share THREAD --name NAME")
	}
	thread := args[0]
	if !chatrelay.ValidThread(thread) {
		return chatrelay.Errorf(chatrelay.InvalidThread, "a thread id is 16 lowercase hex characters")
	}
	st, err := sf.openHost(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	parts, ok := st.Store.(store.Participants)
	if !ok {
		return fmt.Errorf("the store %s keeps no share links", st.Where)
	}
	now := time.Now()
	switch verb {
	case "list":
		grants, err := parts.Grants(ctx, thread)
		if err != nil {
			return err
		}
		ps := make([]chatrelay.Participant, len(grants))
		for i, g := range grants {
			ps[i] = g.Participant(now)
		}
		if *asJSON {
			return printJSON(e.stdout, map[string]any{"thread": thread, "participants": ps})
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PARTICIPANT\tROLE\tKIND\tSTATE\tSENT/CAP\tEXPIRES (UTC)")
		for _, p := range ps {
			fmt.Fprintf(tw, "%s (%s)\t%s\t%s\t%s\t%d/%d\t%s\n", p.Name, p.ID, p.Role, p.Kind, p.State, p.Sent, p.Cap, utc(p.ExpiresAt))
		}
		return tw.Flush()
	case "audit":
		events, err := parts.AuditLog(ctx, thread)
		if err != nil {
			return err
		}
		if _, err := parts.Grants(ctx, thread); err != nil { // fail closed with the record
			return err
		}
		if *asJSON {
			return printJSON(e.stdout, map[string]any{"thread": thread, "events": events})
		}
		for _, ev := range events {
			line := fmt.Sprintf("%s  %-9s %s", utc(ev.At), ev.Event, ev.Participant)
			if ev.Code != "" {
				line += "  " + string(ev.Code)
			}
			if ev.IP != "" {
				line += "  from " + ev.IP
			}
			fmt.Fprintln(e.stdout, line)
		}
		return nil
	case "revoke":
		grants, err := parts.Grants(ctx, thread)
		if err != nil {
			return err
		}
		var ids []string
		if *all {
			for _, g := range grants {
				if g.StateAt(now) == chatrelay.Active {
					ids = append(ids, g.ID)
				}
			}
		} else {
			ids = []string{args[1]}
		}
		for _, id := range ids {
			before, err := parts.Grant(ctx, thread, id)
			if err != nil {
				return err
			}
			g, err := parts.Revoke(ctx, thread, id)
			if err != nil {
				return err
			}
			if before.RevokedAt == 0 {
				auditCLI(ctx, parts, thread, chatrelay.AuditRevoked, id)
			}
			fmt.Fprintf(e.stdout, "revoked %s (%s)\n", g.Name, g.ID)
		}
		if len(ids) == 0 {
			fmt.Fprintln(e.stdout, "no active link to revoke")
		}
		return nil
	}
	// invite
	d, err := parseDays(*expires)
	if err != nil {
		return usageError("--expires " + err.Error())
	}
	if *limit < chatrelay.LimitCap.Min { // 0 would read as the default
		return chatrelay.Errorf(chatrelay.InvalidCap, "--cap is %d … %d", chatrelay.LimitCap.Min, chatrelay.LimitCap.Max)
	}
	in := chatrelay.Invite{Name: *name, Role: chatrelay.Role(*role), Kind: chatrelay.Kind(*kind), ExpiresIn: d, Cap: *limit}
	if err := in.Check(); err != nil {
		return err
	}
	base := strings.TrimSuffix(*publicURL, "/")
	if base == "" {
		base = st.Settings.PublicURL
	}
	if base != "" {
		if _, err := transport.CheckPublicURL(base); err != nil {
			return usageError("--public-url " + err.Error())
		}
	}
	g, token := in.Grant(now)
	if err := parts.Invite(ctx, thread, g); err != nil {
		return err
	}
	auditCLI(ctx, parts, thread, chatrelay.AuditIssued, g.ID)
	link := base + "/p#" + token
	if base == "" {
		link = "/p#" + token // the server's address comes before it
	}
	p := g.Participant(now)
	if *asJSON {
		return printJSON(e.stdout, map[string]any{"participant": p, "token": token, "link": link})
	}
	fmt.Fprintf(e.stdout, "Invited %s (%s), %s, until %s. The token and the link are shown this once:\n\n  token  %s\n  link   %s\n",
		p.Name, p.ID, p.Role, utc(p.ExpiresAt), token, link)
	if base == "" {
		fmt.Fprintln(e.stdout, "\n(put the server's address before the link, or give --public-url)")
	}
	if isTerminal(e.stdout) && base != "" {
		if q, err := qrcode.New(link, qrcode.Medium); err == nil {
			fmt.Fprintf(e.stdout, "\n%s", q.ToSmallString(false))
		}
	}
	return nil
}

// auditCLI appends an audit event the host CLI caused (no client address).
func auditCLI(ctx context.Context, parts store.Participants, thread, event, id string) {
	parts.Audit(ctx, thread, chatrelay.AuditEvent{At: time.Now().UnixMilli(), Event: event, Participant: id})
}

// parseDays reads a duration that may count days: "7d", "36h", "90m".
func parseDays(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		var days int
		if _, err := fmt.Sscanf(n, "%d", &days); err != nil || fmt.Sprint(days) != n {
			return 0, fmt.Errorf("%q: want a duration such as 12h or 7d", s)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q: want a duration such as 12h or 7d", s)
	}
	return d, nil
}

// isTerminal reports whether w is a terminal (a QR code is drawn there).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
