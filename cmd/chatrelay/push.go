package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
	"github.com/chatrelay/chatrelay/webpush"
)

// push manages Web Push (contract Part 5) on the store directly:
// "chatrelay push rotate-key" makes a new VAPID key pair, which every
// server of the store signs with from its next push. Browsers subscribed
// with the old key must subscribe again (the page's Notify me switch).
// "chatrelay push send" sends the store's pushes until stopped
// (pushsend.go); the push and log flags are its.
func push(ctx context.Context, e cmdEnv) error {
	var sf storeFlags
	sf.register(e.fs, true)
	pf := registerPushSending(e.fs)
	var ops opsFlags
	e.fs.StringVar(&ops.logFormat, "log-format", "text", "send: log line format: text or json")
	logLevel := e.fs.String("log-level", "info", "send: debug, info, warn or error")
	verb, _, err := e.parseForm(form{"rotate-key", 0, "no operands"}, form{"send", 0, "no operands"})
	if err != nil {
		return err
	}
	if verb == "send" {
		return pushSend(ctx, e, &sf, pf, &ops, *logLevel)
	}
	st, err := sf.openHost(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	ps := store.PushOf(st.Store)
	if ps == nil {
		return fmt.Errorf("the store %s keeps no push keys", st.Where)
	}
	raw, err := ps.RotateVAPIDKey(ctx)
	if err != nil {
		return err
	}
	v, err := webpush.ParseVAPID(raw, "")
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s\n", v.PublicKey())
	fmt.Fprintln(e.stderr, "chatrelay: a new VAPID key; every browser subscribed with the old one must subscribe again")
	return nil
}

// pushFlags are serve's Web Push flags (push send's: contact and allow).
type pushFlags struct {
	on      *bool
	contact *string
	allow   listFlag
	sender  string // --push-sender: inprocess, process or external
}

// The values of serve's --push-sender.
const (
	pushSenderInProcess = "inprocess"
	pushSenderProcess   = "process"
	pushSenderExternal  = "external"
)

func registerPush(fs *flag.FlagSet) *pushFlags {
	f := registerPushSending(fs)
	f.on = fs.Bool("push", true, "Web Push: a question reaches a device with no page open (false: the push routes answer 404 "+string(chatrelay.PushDisabled)+")")
	f.sender = pushSenderInProcess
	fs.Var(oneOfFlag{&f.sender, []string{pushSenderInProcess, pushSenderProcess, pushSenderExternal}}, "push-sender", "who sends the pushes: `inprocess`, this process; process, a child \"chatrelay push send\" in Linux's SCHED_IDLE class, restarted if it exits; external, a \"chatrelay push send\" the operator runs. With process or external this process serves the push routes and sends none: its goroutines do not wait behind a push's encryption (on a loaded machine a shorter tail for posts; on a quiet one no change measured), and the pushes wait for a core no server thread wants")
	return f
}

// registerPushSending registers the flags of the pushes' sending:
// serve's and push send's.
func registerPushSending(fs *flag.FlagSet) *pushFlags {
	f := &pushFlags{}
	f.contact = fs.String("push-contact", "", "the VAPID contact push services may write to: `mailto:ops@example.com` or an https:// URL (some push services, Apple's among them, refuse pushes without one)")
	fs.Var(&f.allow, "push-allow-host", "a push endpoint `host` exempt from the private-address check (repeatable; for tests with a local push service)")
	return f
}

// config is the server's push configuration: nil with --push=false.
// With --push-sender=process or external it sends nothing (NoSend).
func (f *pushFlags) config() (*transport.PushConfig, error) {
	if f.on != nil && !*f.on {
		return nil, nil
	}
	if *f.contact != "" {
		if err := webpush.CheckSubject(*f.contact); err != nil {
			return nil, usageError("--push-contact " + err.Error())
		}
	}
	return &transport.PushConfig{Contact: *f.contact, Guard: &webpush.Guard{Allow: f.allow}, NoSend: f.sender == pushSenderProcess || f.sender == pushSenderExternal}, nil
}

// startPush makes the store's VAPID key at the server's first start (on
// Redis: the one every node shares), if push is on.
func startPush(ctx context.Context, pc *transport.PushConfig, st store.Store, log *slog.Logger) error {
	ps := store.PushOf(st)
	if pc == nil || ps == nil {
		return nil
	}
	raw, err := ps.VAPIDKey(ctx)
	if err != nil {
		return fmt.Errorf("the VAPID key: %w", err)
	}
	v, err := webpush.ParseVAPID(raw, pc.Contact)
	if err != nil {
		return err
	}
	if pc.Contact == "" {
		log.Warn("push: no --push-contact; some push services refuse pushes without one")
	}
	log.Info("push on", "vapid_public_key", v.PublicKey(), "allow_hosts", len(pc.Guard.Allow))
	return nil
}
