package chatrelay

import "time"

// Webhooks (contract Part 5, "Events out: webhooks"): the delivery's
// schedule and bounds, each written here once.
var (
	// WebhookSchedule is the wait before each retry of an event whose
	// attempt failed (anything but a 2xx within WebhookTimeout); after the
	// last one the event is dropped and counted.
	WebhookSchedule = []time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute,
		10 * time.Minute, time.Hour, 3 * time.Hour}
)

const (
	WebhookTimeout = 10 * time.Second // one attempt: a 2xx within it, or it failed
	// WebhookLease is how long an event handed to a deliverer is kept from
	// every other one (of any node) before it settles it: longer than an
	// attempt, so that only a deliverer that went away loses it.
	WebhookLease   = 30 * time.Second
	WebhookWorkers = 8 // attempts in flight per server, all destinations together
)
