package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
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
	var f shareFlags
	f.register(e.fs)
	if err := e.parse(); err != nil {
		return err
	}
	verb, args, err := shareArgs(e.fs, *f.all)
	if err != nil {
		return err
	}
	thread := args[0]
	st, people, err := openParticipants(ctx, &f.store, thread, "share links")
	if err != nil {
		return err
	}
	defer st.Close()
	switch verb {
	case "list":
		return shareList(ctx, e, people, thread, *f.asJSON)
	case "audit":
		return shareAudit(ctx, e, people, thread, *f.asJSON)
	case "revoke":
		return shareRevoke(ctx, e, people, thread, args[1:])
	}
	return shareInvite(ctx, e, people, thread, f, st.Settings.PublicURL)
}

// shareFlags are the flags of chatrelay share.
type shareFlags struct {
	store              storeFlags
	name, role, kind   *string
	expires, publicURL *string
	limit              *int
	asJSON, all        *bool
}

func (f *shareFlags) register(fs *flag.FlagSet) {
	f.store.register(fs, true)
	f.store.existing = true // a link is into a thread that has a message
	f.name = fs.String("name", "", fmt.Sprintf("invite: the participant's `name` (cleaned: no line breaks, no [ ] < >, at most %d characters)", chatrelay.LimitName.Max))
	f.role = fs.String("role", string(chatrelay.Commenter), "invite: `viewer` (reads) or commenter (reads and posts)")
	f.kind = fs.String("kind", string(chatrelay.Human), "invite: `human` or agent")
	f.expires = fs.String("expires", formatDays(chatrelay.DefaultExpiresIn), "invite: how long the link lives, "+spanOf(chatrelay.LimitExpiresIn)+" (`D`: 90m, 12h, 7d)")
	f.limit = fs.Int("cap", chatrelay.DefaultCap, fmt.Sprintf("invite: the most messages the participant may post, %d … %d", chatrelay.LimitCap.Min, chatrelay.LimitCap.Max))
	f.publicURL = fs.String("public-url", "", "invite: the server's public `URL` for the link (default: what the folder's server records with serve --public-url)")
	f.asJSON = fs.Bool("json", false, "invite, list, audit: one JSON object instead of text")
	f.all = fs.Bool("all", false, "revoke: every active link of the thread")
}

// shareArgs reads the verb ("" to invite) and checks its arguments:
// args[0] is the thread. With --all, revoke takes the thread alone.
func shareArgs(fs *flag.FlagSet, all bool) (verb string, args []string, err error) {
	revoke := form{"revoke", 2, "THREAD and ID (or --all)"}
	if all {
		revoke.n = 1
	}
	verb, args, err = readForm("share", fs.Args(), []form{{"", 1, "THREAD --name NAME"}, {"list", 1, "THREAD"}, {"audit", 1, "THREAD"}, revoke})
	if err == nil && verb != "" && given(fs, "name") {
		return "", nil, usageError("--name is for inviting: chatrelay share THREAD --name NAME")
	}
	return verb, args, err
}

// shareList prints the thread's participants.
func shareList(ctx context.Context, e cmdEnv, people *host.Participants, thread string, asJSON bool) error {
	ps, err := people.List(ctx, thread)
	return printThreadList(e, thread, "participants", asJSON, ps, err, func(w io.Writer, ps []chatrelay.Participant) error {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PARTICIPANT\tROLE\tKIND\tSTATE\tSENT/CAP\tEXPIRES (UTC)")
		for _, p := range ps {
			fmt.Fprintf(tw, "%s (%s)\t%s\t%s\t%s\t%d/%d\t%s\n", oneLine(p.Name), p.ID, p.Role, p.Kind, p.State, p.Sent, p.Cap, utc(p.ExpiresAt))
		}
		return tw.Flush()
	})
}

// shareAudit prints the thread's audit trail.
func shareAudit(ctx context.Context, e cmdEnv, people *host.Participants, thread string, asJSON bool) error {
	events, err := people.AuditLog(ctx, thread)
	return printThreadList(e, thread, "events", asJSON, events, err, func(w io.Writer, events []chatrelay.AuditEvent) error {
		for _, ev := range events {
			line := fmt.Sprintf("%s  %-9s %s", utc(ev.At), ev.Event, ev.Participant+ev.Device) // a participant's or a device's
			if ev.Code != "" {
				line += "  " + string(ev.Code)
			}
			if ev.IP != "" {
				line += "  from " + ev.IP
			}
			fmt.Fprintln(w, line)
		}
		return nil
	})
}

// shareRevoke revokes the participant ids[0], or with no id every active
// one, and prints each it revoked.
func shareRevoke(ctx context.Context, e cmdEnv, people *host.Participants, thread string, ids []string) error {
	var revoked []chatrelay.Participant
	var err error
	if len(ids) == 0 {
		revoked, err = people.RevokeAll(ctx, thread, host.Caller{})
	} else {
		var p chatrelay.Participant
		if p, err = people.Revoke(ctx, thread, ids[0], host.Caller{}); err == nil {
			revoked = append(revoked, p)
		}
	}
	for _, p := range revoked {
		fmt.Fprintf(e.stdout, "revoked %s (%s)\n", oneLine(p.Name), p.ID)
	}
	if err != nil {
		return err
	}
	if len(revoked) == 0 {
		fmt.Fprintln(e.stdout, "no active link to revoke")
	}
	return nil
}

// shareInvite invites a participant and prints its token and link, shown
// this once. The link's base is --public-url, else recorded (what the
// folder's server records).
func shareInvite(ctx context.Context, e cmdEnv, people *host.Participants, thread string, f shareFlags, recorded string) error {
	d, err := parseDays(*f.expires)
	if err != nil {
		return usageError("--expires " + err.Error())
	}
	if d == 0 { // 0 would read as the default
		return chatrelay.Errorf(chatrelay.InvalidExpiry, "--expires is %s", spanOf(chatrelay.LimitExpiresIn))
	}
	if *f.limit < chatrelay.LimitCap.Min { // 0 would read as the default
		return chatrelay.Errorf(chatrelay.InvalidCap, "--cap is %d … %d", chatrelay.LimitCap.Min, chatrelay.LimitCap.Max)
	}
	in := chatrelay.Invite{Name: *f.name, Role: chatrelay.Role(*f.role), Kind: chatrelay.Kind(*f.kind), ExpiresIn: d, Cap: *f.limit}
	if err := in.Check(); err != nil {
		return err
	}
	base, err := linkBase(*f.publicURL, recorded)
	if err != nil {
		return err
	}
	inv, err := people.Invite(ctx, thread, in, base, host.Caller{})
	if err != nil {
		return err
	}
	p := inv.Participant
	if *f.asJSON {
		printJSON(e.stdout, map[string]any{"participant": p, "token": inv.Token, "link": inv.Link})
	} else {
		fmt.Fprintf(e.stdout, "Invited %s (%s), %s, until %s. The token and the link are shown this once:\n\n  token  %s\n  link   %s\n",
			oneLine(p.Name), p.ID, p.Role, utc(p.ExpiresAt), inv.Token, inv.Link)
		printLinkEnd(e.stdout, base, inv.Link)
	}
	return unseenLink(e.stdout, "share", thread, p.ID)
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

// formatDays writes d as parseDays reads it: whole days as "7d", else
// whole hours as "12h", else as time.Duration writes it.
func formatDays(d time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case d > 0 && d%day == 0:
		return fmt.Sprintf("%dd", d/day)
	case d > 0 && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	}
	return d.String()
}

// spanOf writes the range of a limit of seconds as the flags take it:
// "1h … 30d".
func spanOf(l chatrelay.Limit) string {
	lo, hi := l.Duration()
	return formatDays(lo) + " … " + formatDays(hi)
}

// isTerminal reports whether w is a terminal (a QR code is drawn there).
func isTerminal(w io.Writer) bool {
	if u, ok := w.(interface{ Unwrap() io.Writer }); ok {
		w = u.Unwrap()
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
