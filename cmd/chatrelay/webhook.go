package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/webhook"
)

// Webhooks (contract Part 5): serve's --webhook and --webhook-secret, and
// the command "webhook test".

// hookFlags are serve's webhook flags.
type hookFlags struct {
	urls   listFlag
	secret string
	keys   [][]byte
}

func (h *hookFlags) register(fs *flag.FlagSet) {
	fs.Var(&h.urls, "webhook", "send every event (message.created, interaction.opened, interaction.closed, participant.joined, participant.revoked) to this `URL` as a signed POST (repeatable; needs --webhook-secret)")
	fs.StringVar(&h.secret, "webhook-secret", "", "the webhooks' signing `secret`, whsec_ and 24 to 64 bytes in base64 (Standard Webhooks); while rotating, the old and the new separated by a space (every event is signed with each); better given as CHATRELAY_WEBHOOK_SECRET than on the command line")
}

// check checks the flags and sets the store options that queue events.
func (h *hookFlags) check(opt *store.Options) error {
	if len(h.urls) == 0 {
		if h.secret != "" {
			return usageError("--webhook-secret without --webhook")
		}
		return nil
	}
	if h.secret == "" {
		return usageError("--webhook: no webhook secret: give --webhook-secret or CHATRELAY_WEBHOOK_SECRET")
	}
	var err error
	if h.keys, err = webhook.ParseSecrets(h.secret); err != nil {
		return usageError("--webhook-secret: " + err.Error())
	}
	seen := map[string]bool{}
	for _, u := range h.urls {
		if err := checkHookURL("--webhook", u); err != nil {
			return err
		}
		if id := store.DestinationID(u); !seen[id] {
			seen[id] = true
			opt.Webhooks = append(opt.Webhooks, id)
		}
	}
	return nil
}

// checkHookURL checks a webhook URL, given as what (a flag, or an operand).
func checkHookURL(what, u string) error {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Hostname() == "" {
		return usageError(fmt.Sprintf("%s %s: want an http:// or https:// URL", what, shownURL(u)))
	}
	if port := p.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return usageError(fmt.Sprintf("%s %s: its port %s is not one of 1 to 65535", what, shownURL(u), port))
		}
	}
	return nil
}

// shownURL is webhook URL u as an error shows it, quoted: without the
// secrets a URL may carry (its password, its query), which the store and
// the log never hold either.
func shownURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		if strings.ContainsAny(u, "@?") {
			return "(a URL that does not parse)"
		}
		return strconv.Quote(u)
	}
	if p.RawQuery != "" {
		p.RawQuery = "…"
	}
	return strconv.Quote(p.Redacted())
}

// deliverer returns the deliverer of the store's events (nil without
// --webhook), its counter registered in reg.
func (h *hookFlags) deliverer(st *store.Backend, reg prometheus.Registerer, log *slog.Logger) (*webhook.Deliverer, error) {
	if len(h.urls) == 0 {
		return nil, nil
	}
	var urls []string
	seen := map[string]bool{}
	for _, u := range h.urls {
		if !seen[u] {
			seen[u] = true
			urls = append(urls, u)
		}
	}
	return webhook.New(webhook.Config{URLs: urls, Keys: h.keys, Outbox: st.Outbox, Log: log, Registry: reg})
}

// webhookCmd runs "chatrelay webhook test URL [--secret whsec_…]" and
// "chatrelay webhook enable URL [--data DIR | --store URL]".
func webhookCmd(ctx context.Context, e cmdEnv) error {
	secret := e.fs.String("secret", "", "test: the signing `secret` (default: CHATRELAY_WEBHOOK_SECRET, as serve's --webhook-secret)")
	var sf storeFlags
	sf.register(e.fs, false)
	verb, args, err := e.parseForm(form{"test", 1, "one URL"}, form{"enable", 1, "one URL"})
	if err != nil {
		return err
	}
	u := args[0]
	if err := checkHookURL("URL", u); err != nil {
		return err
	}
	if verb == "enable" {
		return webhookEnable(ctx, e, &sf, u)
	}
	if *secret == "" {
		*secret = e.getenv("CHATRELAY_WEBHOOK_SECRET")
	}
	if *secret == "" {
		return usageError("no webhook secret: give --secret or CHATRELAY_WEBHOOK_SECRET")
	}
	keys, err := webhook.ParseSecrets(*secret)
	if err != nil {
		return usageError("--secret: " + err.Error())
	}
	id, status, err := webhook.Ping(ctx, nil, u, keys)
	if uerr := (*url.Error)(nil); errors.As(err, &uerr) {
		err = uerr.Err // without the URL, which may carry a secret
	}
	if err != nil {
		return &chatrelay.Error{Code: codeWebhookUndelivered, Message: fmt.Sprintf("ping %s to %s", id, shownURL(u)), Err: err}
	}
	fmt.Fprintf(e.stdout, "ping %s delivered: %d\n", id, status)
	return nil
}

// webhookEnable enables destination u again in the store: a 410 Gone had
// disabled it for every server of the store (store.Disabler); they send
// it its next events, no restart needed.
func webhookEnable(ctx context.Context, e cmdEnv, sf *storeFlags, u string) error {
	sf.existing = true
	st, err := sf.openHost(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	var dis store.Disabler
	if ob, ok := st.Store.(interface{ Outbox() store.Outbox }); ok {
		dis, _ = ob.Outbox().(store.Disabler)
	}
	if dis == nil {
		return fmt.Errorf("the store %s keeps no webhook destinations", st.Where)
	}
	id := store.DestinationID(u)
	was, err := dis.Disabled(ctx, id)
	if err != nil {
		return err
	}
	if !was {
		fmt.Fprintf(e.stdout, "webhook %s was not disabled\n", id)
		return nil
	}
	if err := dis.Enable(ctx, id); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "webhook %s enabled: the servers send it its next events\n", id)
	return nil
}
