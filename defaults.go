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

	DefaultTicketTTL    = 15 * time.Minute // a stream ticket's life
	DefaultHeartbeat    = 20 * time.Second // SSE ping comment and WebSocket ping interval
	DefaultWriteTimeout = 10 * time.Second // one stream write
	DefaultSweepEvery   = time.Hour        // retention sweep interval
	DefaultLockTimeout  = 10 * time.Second // the wait for another process's lock

	// The HTTP servers' timeouts (serve's listener; the private metrics
	// listener writes for longer: a CPU profile takes 30 s by default).
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultHTTPWriteTimeout  = 30 * time.Second // streams clear it and set DefaultWriteTimeout per write
	DefaultOpsWriteTimeout   = 90 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultShutdownTimeout   = 5 * time.Second // SIGINT/SIGTERM: every stream ended within it

	DefaultData = "./data" // the data folder (--data)
	DefaultAddr = "127.0.0.1:8080"

	// The stores.
	DefaultRescan       = 2 * time.Second  // the file store's folder rescan, the safety net of its watch
	DefaultKeyPrefix    = "chatrelay:"     // of every key of a shared store (Redis) and of its feed channel
	DefaultStoreTimeout = 2 * time.Second  // every call to a shared store (Redis)
	DefaultResetAfter   = 5 * time.Second  // a shared store's feed lost this long resets its threads
	DefaultFeedPing     = 15 * time.Second // a silent feed pings its server this often
	DefaultStreamLease  = 30 * time.Second // a stream's lease in a shared store, unless renewed

	// Web Push (contract Part 5).
	DefaultPushWorkers  = 4                // goroutines that send pushes
	DefaultPushQueue    = 1024             // changes waiting for them; one more is not pushed (counted "dropped")
	DefaultPushAttempts = 5                // attempts of one push (a 429, a 5xx or no answer tries again)
	DefaultPushWindow   = 10 * time.Minute // every attempt of one push within it
	DefaultPushReplyTTL = 24 * time.Hour   // how long a push service keeps a reply for an offline device
	DefaultPushClaim    = 15 * time.Minute // a push's claim in a shared store (one node sends it)
)

// Retention says which messages a thread keeps.
type Retention struct {
	Messages int           // newest N messages per thread; defaults to DefaultRetainMessages
	Age      time.Duration // none older than this; defaults to DefaultRetainAge
}

// WithDefaults fills the zero fields of r.
func (r Retention) WithDefaults() Retention {
	if r.Messages <= 0 {
		r.Messages = DefaultRetainMessages
	}
	if r.Age <= 0 {
		r.Age = DefaultRetainAge
	}
	return r
}
