package chatrelay

import "time"

// The contract's limits (Part 1, frozen).
const (
	// MaxText is the longest message text, counted in Unicode code points.
	MaxText = 4000
	// MaxBody is the largest request body read, in bytes.
	MaxBody = 32768
	// PollPage is how many of the newest messages a read without a cursor
	// returns (a poll or a stream without since).
	PollPage = 50
	// MaxMCPBody is the largest MCP request body read (serve --mcp): a
	// tool call's arguments, a card's included.
	MaxMCPBody = 1 << 20
)

// Defaults of the server, the store and the CLI. Each is written here
// once; flags, options and zero values all take it from here.
const (
	DefaultRatePerThread = 20               // accepted posts per thread per window
	DefaultRatePerIP     = 40               // accepted posts per client address per window
	DefaultRateWindow    = 10 * time.Minute // the sliding rate window

	DefaultStreamsPerThread = 20  // open SSE and WebSocket streams per thread
	DefaultStreamsPerIP     = 200 // open streams per client address
	// StreamsOwnerShare: a thread's owner keeps 1/StreamsOwnerShare of its
	// streams (rounded up) that its participants may not take
	// (StreamLimits.OwnerReserve).
	StreamsOwnerShare = 4

	DefaultRetainMessages = 200             // newest messages kept per thread
	DefaultRetainAge      = 720 * time.Hour // none older than this (30 days)
	DefaultMaxThreads     = 500             // threads the store holds; one more is 507

	// RemoveAfter is how long past a thread's newest change (a reaction,
	// an answer) the sweep's removal of a thread whose messages have all
	// expired keeps that change as the thread's floor
	// (Retention.RemoveAfter: the retention age, if shorter). A thread
	// made again starts above its floor, at its next writer's clock
	// otherwise, and that clock must not be behind the newest change, a
	// cursor clients hold: the hour covers nodes whose clocks disagree,
	// and a clock stepped back (an NTP correction), by less.
	RemoveAfter = time.Hour

	DefaultTicketTTL    = 15 * time.Minute // a stream ticket's life
	DefaultHeartbeat    = 20 * time.Second // SSE ping comment and WebSocket ping interval
	DefaultWriteTimeout = 10 * time.Second // one stream write
	DefaultSweepEvery   = time.Hour        // retention sweep interval
	DefaultLockTimeout  = 10 * time.Second // the wait for another process's lock
	// DefaultDeviceSeen is how stale a device's last_seen may grow: a
	// request of the device records its time when the one recorded is
	// older (a write of the participants record, not one per request).
	DefaultDeviceSeen = 10 * time.Minute

	// The HTTP servers' timeouts (serve's listener; the private metrics
	// listener writes for longer: a CPU profile takes 30 s by default).
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultHTTPWriteTimeout  = 30 * time.Second // streams clear it and set DefaultWriteTimeout per write
	DefaultOpsWriteTimeout   = 90 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	// DefaultTransferTime is how long an attachment's upload may take to
	// arrive, or its download to leave (past DefaultReadTimeout and
	// DefaultHTTPWriteTimeout: a 10 MiB file over 1 Mbit/s takes 80 s).
	DefaultTransferTime    = 10 * time.Minute
	DefaultShutdownTimeout = 5 * time.Second // SIGINT/SIGTERM: every stream ended within it

	DefaultData = "./data" // the data folder (--data)
	DefaultAddr = "127.0.0.1:8080"

	// The stores.
	DefaultRescan       = 2 * time.Second  // the file store's folder rescan, the safety net of its watch
	DefaultKeyPrefix    = "chatrelay:"     // of every key of a shared store (Redis) and of its feed channel
	DefaultStoreTimeout = 2 * time.Second  // every call to a shared store (Redis)
	DefaultResetAfter   = 5 * time.Second  // a shared store's feed lost this long resets its threads
	DefaultFeedPing     = 15 * time.Second // a silent feed pings its server this often
	DefaultStreamLease  = 30 * time.Second // a stream's lease in a shared store, unless renewed

	// MCP over HTTP (serve --mcp): open sessions per node and per agent
	// key, and how long a session may sit with no request before it ends.
	DefaultMCPSessions       = 500
	DefaultMCPSessionsPerKey = 20
	DefaultMCPSessionIdle    = 30 * time.Minute
	// DefaultMCPCallsPerKey bounds the tool calls of one agent key in
	// flight on a node, its sessions together: its reads and waits, which
	// the rate windows do not count.
	DefaultMCPCallsPerKey = 16
	// Web Push (contract Part 5).
	DefaultPushWorkers  = 4                // goroutines that send pushes
	DefaultPushQueue    = 1024             // changes waiting for them; one more is read again from the store once there is room
	DefaultPushAttempts = 5                // attempts of one push (a 429, a 5xx or no answer tries again)
	DefaultPushWindow   = 10 * time.Minute // every attempt of one push within it
	DefaultPushReplyTTL = 24 * time.Hour   // how long a push service keeps a reply for an offline device
	DefaultPushClaim    = 15 * time.Minute // a settled push's claim in a shared store (no node sends it again)
	DefaultPushLease    = 30 * time.Second // a push's claim while its node sends it, renewed: once it lapses, another node sends it
)

// Webhooks (contract Part 5, "Events out: webhooks"): the delivery's
// schedule and bounds.
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

// Retention says which messages a thread keeps.
type Retention struct {
	Messages int           // newest N messages per thread; defaults to DefaultRetainMessages
	Age      time.Duration // none older than this; defaults to DefaultRetainAge
}

// RemoveAfter is how long past a removed thread's newest change its floor
// lasts: RemoveAfter, or the retention age if shorter (a store that keeps
// minutes keeps nothing of a thread an hour).
func (r Retention) RemoveAfter() time.Duration {
	return min(RemoveAfter, r.WithDefaults().Age)
}

// WithDefaults fills the zero fields of r.
func (r Retention) WithDefaults() Retention {
	orDefault(&r.Messages, DefaultRetainMessages)
	orDefault(&r.Age, DefaultRetainAge)
	return r
}

// orDefault sets *v to def when it is zero or less: the rule of every
// WithDefaults (a zero field takes the default; so does a negative one).
func orDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}
