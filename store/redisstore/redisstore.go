// Package redisstore is the Redis (or Valkey) backend of store.Store and
// store.Participants, with the rate and stream limiters that count across
// every chatrelay node sharing one Redis.
//
// # Keys
//
// Every key starts with Options.Prefix (default chatrelay.DefaultKeyPrefix). A thread T's
// keys carry the hash tag {T}, so on Redis Cluster they live in one slot:
//
//	<prefix>{T}:log     stream: one entry per retained message, id "<epoch>-0",
//	                    one field "j" holding the v1 message JSON, byte for
//	                    byte what chatrelay.MarshalMessage makes; never
//	                    changed once written
//	<prefix>{T}:meta    hash: "trimmed", the newest epoch retention dropped;
//	                    "rev", the newest change's epoch (written by changes
//	                    only: the thread's rev is the newer of it and the
//	                    newest message's epoch); "trimmed_rev", the newest
//	                    rev retention dropped; "v2", set once the thread
//	                    has v2 state (a v1-only thread never reads any);
//	                    "title"; and what an append needs, so that it reads
//	                    no message: "last", the newest message's epoch;
//	                    "first", at most the oldest's; "sec" and "sfx", the
//	                    newest message's second and the id suffixes taken
//	                    in it (" <suffix>" each); "n", at least the log's
//	                    length (an append reads it, XLEN, only past keep);
//	                    "unreadable", set by a reader that found a stored
//	                    message that does not parse (the entry's id):
//	                    every read and write of the thread then refuses it
//	                    (unreadable.go) until an operator repairs it.
//	                    A thread without "last" (written by an older
//	                    version) has them read from its log by its next
//	                    append. Every script that adds
//	                    to the log keeps them; one that drops messages keeps
//	                    "first" at most the oldest's (dropping only the
//	                    oldest does, by itself)
//	<prefix>{T}:ids     (no longer written: older versions kept the id
//	                    suffixes here; it expired after 10s)
//	<prefix>{T}:v2      hash: epoch -> the current v2 object of each message
//	                    with v2 state (a v2 field, or a change); a message
//	                    without has for v2 object its v1 JSON and "rev"
//	<prefix>{T}:v2e     sorted set: the epochs in v2 (score = epoch), so
//	                    retention finds the v2 state it drops
//	<prefix>{T}:revs    sorted set: epoch -> rev of each changed message
//	                    (rev > epoch), for the v2 cursor
//	<prefix>{T}:cids    hash: client_id -> epoch of the retained message
//	                    that carried it (idempotent posts)
//	<prefix>{T}:ixs     hash: interaction id -> epoch of its message
//	<prefix>{T}:grants  hash: the participants record (participants.go)
//	<prefix>{T}:audit   list: the audit events, the newest 1 000
//	<prefix>threads     sorted set: thread -> its rev; the thread count (the
//	                    507 limit), Threads' order and the feed's catch-up
//	<prefix>pending     sorted set: "<thread> <interaction id>" -> deadline,
//	                    every pending interaction (Pending)
//	<prefix>grant-index hash: the first 16 hex of a share token's digest ->
//	                    its thread (Resolve)
//	<prefix>generation  hash: the data set's random id, start and the newest
//	                    epoch known lost with an earlier one (gen.go)
//	<prefix>ticket-key  string: the ticket signing key nodes share (TicketKey)
//	<prefix>open-key    string: the secret open_thread derives a client_id's
//	                    token from (OpenSecret)
//	<prefix>feed        pub/sub channel of the change feed (not a key)
//	<prefix>{rl}:tl:T   lists of the rate windows' posts (RateLimiter)
//	<prefix>{rl}:il:IP
//	<prefix>{sl}:t:T    sorted sets of open-stream leases (StreamLimiter)
//	<prefix>{sl}:i:IP
//	<prefix>{sl}:p:T    (the thread's participants' streams)
//
// A stream fits a thread: its entry ids are the epochs, so Redis itself
// refuses an epoch that is not greater than the newest, XRANGE and
// XREVRANGE answer "epoch > since" and "the newest N", and XTRIM MINID
// applies retention in one command. Redis 6.2 or later is needed (MINID,
// ZMSCORE, exclusive XREVRANGE ranges).
//
// # Scripts
//
// Every write of a thread is one Lua script (scripts.go, run with EVALSHA;
// the post's two, the append and the rate windows', are FCALLs of a
// library of functions on a Redis with them: functions.go) over all of
// the thread's keys and the global ones it keeps. Redis runs a
// script alone, so each is atomic with every other writer of any node and
// of the host CLI:
//
//	appendScript   a new message (below)
//	changeScript   a change of a message: compare and set (below)
//	grantsScript   a write of a participants record: compare and set
//	sweepScript    retention of one thread; removes a thread (every key of
//	               it, and its entries in the global indexes) once empty
//
// and two read a thread in one step: changesScript (the v2 view with its
// marks and the generation) and messageScript (one message, for a change).
//
// A post through the HTTP server on one Redis is one script: the append
// counts it in the rate windows itself (Store.AppendLimited; elsewhere,
// and for a participant's post or one with attachments, the windows'
// script runs first). The scripts go through the batcher (batch.go): the
// ones that wait at the same moment are sent in one pipeline, so that
// Redis reads and answers them in one system call each; each still runs
// alone and answers its own caller.
//
// appendScript checks that the thread exists (MustExist) or that creating
// it stays within MaxThreads (the threads of the index and those whose
// uploads took a place, att-places: attach.go; a thread of uploads takes
// no second place); answers a client_id it finds in cids with that
// message (the caller compares the content: a replay or a conflict),
// storing nothing; for a participant's post, checks that the grants record
// is still the one the caller read and checked (else "retry"), the cap and
// the three messages waiting for hermes, and stores the grant with one more
// post; gives the message the epoch max(now, rev+1), builds its id (unique
// among the thread's messages of that second) and its ts, stores its v1
// JSON and, if it has v2 fields, its v2 object (the caller sends the part
// after the rev) and its client_id, interaction and pending entries;
// applies retention by count and age, dropping the v2 state of what it
// drops with it and keeping "trimmed" and "trimmed_rev"; updates the
// index; and PUBLISHes the message on the feed. A v1 post reads no v2
// key. A message is never pushed before it is stored nor stored
// unannounced; with AOF persistence Redis writes the script's effects to
// the log before it answers the caller or sends the message to
// subscribers.
//
// A change (Change: an answer, a cancel, an expiry, a reaction) is
// computed in Go from the message as read (chatrelay.ApplyChange, as the file
// store does); changeScript stores the new v2 object only if the message
// is still retained and its rev is still the one read, with the thread's
// next epoch as its rev, and publishes it. Otherwise another change came
// first, and Change reads again: the first answer stored wins, and any
// later one finds the interaction closed; two nodes expiring one
// interaction store one expiry.
//
// Redis Cluster: a script may only touch keys of one slot, and the
// indexes (threads, pending, grant-index, generation) are touched with
// the thread's keys. A Store is therefore one Redis, or one shard of a
// Sharded store (sharded.go): on a cluster each shard's prefix carries a
// hash tag of its own ({s<k>}), so that all of its keys, the indexes and
// the thread keys, share one slot, and the scripts run unchanged.
//
// # Feed
//
// Follow subscribes to the feed channel (SSUBSCRIBE on a Redis Cluster
// shard, whose scripts SPUBLISH: sharded.go). A change's message is "<thread>
// <the thread's rev before it> <the newest epoch or rev retention dropped>
// <JSON>", the JSON being the message's v1 JSON if it has no v2 state and
// its v2 object otherwise, so a gap is detected; "<thread> P" says that the
// thread's participants record changed. When the subscription's
// connection is lost, Follow keeps retrying; once subscribed again it
// re-reads every thread whose rev (from the index) is past what it last
// announced, and hands on each message changed since, in its current
// state, in change order, exactly once; and it tells every thread that
// has grants that its participants may have changed. It sends a Reset
// batch only where that is not enough: retention dropped changes it never
// announced, a thread went away, or the store went backwards. A Redis
// that restarted without its data is told by the generation key (gen.go):
// every thread the feed knew is reset, and Since and Changes answer Reset
// to a cursor into the lost data.
//
// # Failures
//
// A Redis that cannot be reached (refused, timed out, loading its data,
// read-only), or that does not answer a call within Options.Timeout, gives
// *chatrelay.Error with code StoreUnavailable and Retry 1s.
// Commands are not retried by the client (MaxRetries -1): an append whose
// answer was lost may have been stored, and running it twice would store it
// twice. On a cluster, a command Redis refused without running it (MOVED,
// ASK, TRYAGAIN; CLUSTERDOWN within 250 ms of its first answer) is sent
// again where it says, within the call's context (redirect.go). An append that fails is never acknowledged; one whose answer is lost
// may have been stored and is then delivered to subscribers like any other.
// With Options.WaitReplicas (the URL's wait-replicas), a write is
// acknowledged only once that many replicas hold it (replicas.go).
package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/closegroup"
	"github.com/chatrelay/chatrelay/store"
)

// Options configures a Store. Zero values take the defaults.
type Options struct {
	Prefix     string              // of every key and of the feed channel; defaults to chatrelay.DefaultKeyPrefix
	Retention  chatrelay.Retention // zero fields take the defaults
	MaxThreads int                 // defaults to chatrelay.DefaultMaxThreads; every node must use the same
	Log        *slog.Logger        // defaults to slog.Default()
	// ResetAfter is how long Follow's connection may stay lost before it
	// gives every thread it knows a Reset batch, so that their streams end
	// and clients resume elsewhere (or here, once Redis is back). Shorter
	// losses are invisible: Follow catches up when it is subscribed again.
	// Defaults to 5s; negative never resets.
	ResetAfter time.Duration
	// Timeout bounds every call of the store and of its limiters (each is
	// one or a few Redis round trips), unless the caller's context ends
	// sooner: a call still waiting for Redis then fails with
	// StoreUnavailable, so a Redis that stalls makes requests fail in
	// Timeout rather than hang. Defaults to 2s.
	Timeout time.Duration
	// Webhooks are the webhook destinations (store.DestinationID) a
	// server delivers to: Open records them in Redis and makes their
	// consumer groups, and every store opened on the same Redis and
	// prefix (other nodes, the host CLI) then queues events (outbox.go).
	Webhooks []string
	// WaitReplicas, if above 0, makes every write the store acknowledges
	// wait (WAIT) until that many replicas hold it, WaitTimeout at most
	// (defaults to 1s): one that fewer hold then fails with
	// StoreUnavailable, not acknowledged (replicas.go). The URL's
	// wait-replicas and wait-timeout set them. Off by default: every
	// write then waits a replica's round trip.
	WaitReplicas int
	WaitTimeout  time.Duration
	Now          func() time.Time
	// Now defaults to time.Now. It gives epochs and retention ages, like the
	// file store's clock; nodes are expected to keep their clocks in sync
	// (an epoch is still strictly increasing within a thread if they do not).
	// The rate windows do not read it: they count on Redis's clock
	// (RateLimiter).

	evalOnly bool // run every script with EVALSHA, never the library (functions.go), as on a Redis without functions: tests
	// onGate, if set (by tests), is called with the commands of each call
	// (a command alone, or a pipeline) that reaches the store's gate
	// (answerHook), before the gate checks it.
	onGate func(cmds []redis.Cmder)
	// onRedirect, if set (by tests), is called on a cluster with the
	// commands of each round of redirections before they are sent again
	// (redirectHook).
	onRedirect func(cmds []redis.Cmder)
	// dial, if set (by tests), makes the connections of a cluster's client
	// (redis.ClusterOptions.Dialer), for faults a real Redis cannot make.
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Store is the Redis store. It is safe for concurrent use by many goroutines
// and by many processes (nodes and the host CLI) sharing one Redis.
type Store struct {
	rdb     redis.UniversalClient // a *redis.Client, or the ClusterClient of a cluster's shard (sharded.go)
	shared  bool                  // rdb is shared with other shards: their Sharded closes it, not Close
	limits  string                // the prefix of the limiters' keys ({rl}, {sl}): prefix, or a cluster's base prefix
	opt     Options
	log     *slog.Logger
	now     func() time.Time
	prefix  string
	feed    string // the pub/sub channel
	pubFeed string // the channel as the scripts take it: feed, or NUL + feed for SPUBLISH (spub)
	spub    bool   // sharded pub/sub (SPUBLISH, SSUBSCRIBE): a Redis Cluster shard
	index   string // the thread index key
	genKey  string // the generation key (gen.go)
	pending string // the pending interactions' index key
	gindex  string // the grant index key (participants.go)
	events  string // the webhook events' stream (outbox.go)
	places  string // the threads that hold uploads and no message (attach.go)
	hooks   bool   // queue webhook events (outbox.go); set by open
	outOnce sync.Once
	out     *outbox

	// shard is "k/n" when the store is shard k of n instances
	// (claimShard); written again when Redis lost its data.
	shard atomic.Pointer[string]
	// other: the store is a shard other than shard 0 (of instances or of a
	// cluster), which holds none of the node-wide keys (the ticket key…).
	other bool

	closing context.Context // done once Close is called
	close   context.CancelFunc
	members closegroup.Group // Follow calls and the goroutines the store owns
	// later counts the rate windows' undos and settlements running in
	// the background (undoLater, settleLater), which tests wait for.
	later sync.WaitGroup
	once  sync.Once

	pingEvery time.Duration // chatrelay.DefaultFeedPing; tests shorten it

	fcall  *atomic.Bool // the post's scripts are FCALLs of the library (functions.go); shared by a cluster's shards
	ownLib bool         // setup loads the library (not a cluster's shard, nor evalOnly)
	// gate, on a shard that did not answer when its Sharded store opened,
	// holds every call until the shard is set up (sharded_late.go); nil
	// otherwise.
	gate *shardGate

	calls chan *scriptCall // the scripts waiting for a sender (batch.go)
	slots chan struct{}    // one token per call out (batch.go)
	// The last second an append was in, as text (Store.secondOf).
	second atomic.Pointer[secondText]
	// The last rate windows' settings an append sent (Store.appendSettings).
	settings atomic.Pointer[settingsText]

	// What the store knows of Redis's data set (gen.go).
	seen   atomic.Int64               // the newest epoch this store read or its feed announced
	gen    atomic.Pointer[generation] // the generation this store saw last; nil before the first
	lossMu sync.Mutex                 // serialises the handling of a new generation

	// Redis answering again (hook.go).
	down   atomic.Bool   // a call failed (or a feed lost its connection) since Redis last answered
	wakeMu sync.Mutex    // guards wake
	wake   chan struct{} // closed (and replaced) when Redis answers after down
	// answers counts the calls that answered, so that a call that fails
	// marks Redis down only if none answered since it began (markDown,
	// answeredMeanwhile).
	answers atomic.Uint64

	// The feeds (follow.go).
	feedsDown atomic.Int32 // Follow calls not subscribed and caught up
	feedsMu   sync.Mutex   // guards kicks
	kicks     map[*follower]func()

	tkMu      sync.Mutex // guards ticketKey
	ticketKey []byte     // the ticket key this store last read from Redis (shared.go)

	// onLost, if set (by tests, before Follow), is called by Follow after it
	// notices that its subscription was lost, before it subscribes again.
	onLost func(ctx context.Context)
	// beforeCAS, if set (by tests, before use), is called between the read
	// and the compare-and-set script of a write that has one: "change"
	// (Change), "post" (a participant's post), "grants" (the other writes
	// of a participants record).
	beforeCAS func(op string)
}

var _ store.Store = (*Store)(nil)

// retry is how long a client should wait when Redis cannot be reached.
const retry = time.Second

// Open connects to the Redis at url (redis://[user:pass@]host:port/db or
// rediss:// for TLS; the query parameters of redis.ParseURL apply) and
// checks that it answers. It returns StoreUnavailable if it does not.
func Open(ctx context.Context, url string, opt Options) (*Store, error) {
	url, err := takeWaitParams(url, &opt)
	if err != nil {
		return nil, err
	}
	rdb, err := newClient(url)
	if err != nil {
		return nil, err
	}
	return open(ctx, rdb, opt)
}

// newClient is the client of the Redis at url, as a Store uses it.
func newClient(url string) (*redis.Client, error) {
	ro, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	// An append is not idempotent: never send it twice.
	ro.MaxRetries = -1
	// Redis before 8 does not know the maintenance notifications handshake.
	ro.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	// A context's deadline bounds the network waits of a call (Timeout,
	// and the readiness probe's own deadline); without this the client
	// would wait its ReadTimeout (5s) whatever the context says.
	ro.ContextTimeoutEnabled = true
	if ro.ClientName == "" {
		ro.ClientName = "chatrelay"
	}
	return redis.NewClient(ro), nil
}

func open(ctx context.Context, rdb redis.UniversalClient, opt Options) (*Store, error) {
	return openOn(ctx, rdb, opt, shardOf{})
}

// shardOf says how a Store is one shard of a Sharded store (sharded.go);
// the zero value is a Store of its own.
type shardOf struct {
	shared bool         // the client is shared with other shards: Close leaves it open
	other  bool         // a shard other than shard 0: no node-wide keys (Store.other)
	limits string       // the limiters' key prefix, if not the store's prefix
	spub   bool         // the feed is a sharded channel (Redis Cluster)
	fcall  *atomic.Bool // whether the store uses the library, shared by a cluster's shards (loaded once for all); nil: load it
}

func openOn(ctx context.Context, rdb redis.UniversalClient, opt Options, sh shardOf) (*Store, error) {
	s := newStore(rdb, opt, sh)
	if err := s.setup(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// newStore is the Store of rdb, set up for nothing yet: setup checks
// that Redis answers, loads the library and records the webhooks. Close
// undoes it.
func newStore(rdb redis.UniversalClient, opt Options, sh shardOf) *Store {
	if opt.Prefix == "" {
		opt.Prefix = chatrelay.DefaultKeyPrefix
	}
	opt.Retention = opt.Retention.WithDefaults()
	if opt.MaxThreads <= 0 {
		opt.MaxThreads = chatrelay.DefaultMaxThreads
	}
	if opt.ResetAfter == 0 {
		opt.ResetAfter = chatrelay.DefaultResetAfter
	}
	if opt.Timeout <= 0 {
		opt.Timeout = chatrelay.DefaultStoreTimeout
	}
	s := &Store{
		rdb:    rdb,
		shared: sh.shared,
		other:  sh.other,
		limits: cmp.Or(sh.limits, opt.Prefix),
		opt:    opt,
		log:    opt.Log,
		now:    opt.Now,
		prefix: opt.Prefix,
		feed:   opt.Prefix + "feed",
		spub:   sh.spub,
		index:  opt.Prefix + "threads",
		genKey: opt.Prefix + "generation",

		pending: opt.Prefix + "pending",
		gindex:  opt.Prefix + "grant-index",
		events:  opt.Prefix + "webhook:events",
		places:  opt.Prefix + "att-places",

		pingEvery: chatrelay.DefaultFeedPing,
		wake:      make(chan struct{}),
		kicks:     make(map[*follower]func()),
	}
	s.pubFeed = s.feed
	if s.spub {
		s.pubFeed = "\x00" + s.feed
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	// The wait hook first (the outer one): a write it sends again as a
	// pipeline with its WAIT goes through the whole chain, and passes
	// answerHook's gate there, once.
	if c, ok := rdb.(*redis.Client); ok && opt.WaitReplicas > 0 {
		c.AddHook(newWaitHook(c, opt))
	}
	rdb.AddHook(answerHook{s})
	routeClientLog(s)
	s.closing, s.close = context.WithCancel(context.Background())
	s.fcall = sh.fcall
	s.ownLib = sh.fcall == nil && !opt.evalOnly
	if s.fcall == nil {
		s.fcall = new(atomic.Bool)
	}
	s.startBatcher()
	return s
}

// setup checks that Redis answers, loads the library (unless a cluster's
// shards share it) and records the webhooks (setupHooks): what a Store
// does once, before its first call. It returns StoreUnavailable if Redis
// does not answer.
func (s *Store) setup(ctx context.Context) error {
	pctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.rdb.Ping(pctx).Err(); err != nil {
		return s.unavailable("open", err)
	}
	if err := s.notACluster(pctx); err != nil {
		return err
	}
	if s.ownLib {
		refused, err := loadLibrary(pctx, s.rdb)
		if err != nil {
			return s.unavailable("open", err)
		}
		s.fcall.Store(refused == nil)
		if refused != nil {
			s.log.Info("redis: the library of functions was refused; posts run as scripts (EVALSHA)", "err", refused)
		}
	}
	return s.setupHooks(ctx)
}

// bound limits a call to Options.Timeout (or less, if ctx ends sooner).
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opt.Timeout)
}

// Ping reports whether Redis answers within Options.Timeout (or ctx's
// deadline, if sooner): nil, or StoreUnavailable.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return s.unavailable("ping", err)
	}
	return nil
}

// Close ends every Follow, the limiters' lease renewals and the script
// batcher's senders (a script still waiting for one fails, unsent or
// cancelled), waits for them, and closes the connections. It is idempotent.
func (s *Store) Close() error {
	var err error
	s.once.Do(func() {
		s.members.Close()
		s.close()
		s.members.Wait()
		err = s.closeClient()
		unrouteClientLog(s)
	})
	return err
}

// closeClient closes the store's client unless other shards share it.
func (s *Store) closeClient() error {
	if s.shared {
		return nil
	}
	return s.rdb.Close()
}

// ErrClosed is returned by Follow and the limiters after Close.
var ErrClosed = errors.New("redisstore: closed")

func (s *Store) logKey(thread string) string    { return s.prefix + "{" + thread + "}:log" }
func (s *Store) metaKey(thread string) string   { return s.prefix + "{" + thread + "}:meta" }
func (s *Store) v2Key(thread string) string     { return s.prefix + "{" + thread + "}:v2" }
func (s *Store) grantsKey(thread string) string { return s.prefix + "{" + thread + "}:grants" }
func (s *Store) auditKey(thread string) string  { return s.prefix + "{" + thread + "}:audit" }

// threadKeys are the suffixes of a thread's keys, in the order the
// scripts take them (luaCommon's K).
var threadKeys = [...]string{"log", "meta", "ids", "v2", "v2e", "revs", "cids", "ixs", "grants", "audit", "att", "floor"}

// keys returns the keys every script of a thread is given: the thread's
// (threadKeys), then the thread index, the generation, the pending index
// the grant index, the webhook events' stream and the threads that hold
// uploads and no message (attach.go).
func (s *Store) keys(thread string) []string {
	return append(s.threadKeys(thread, threadKeys[:], 6), s.index, s.genKey, s.pending, s.gindex, s.events, s.places)
}

// appendThreadKeys are the suffixes of the thread's keys an append may
// touch, in the order appendScript takes them (luaAppendK).
var appendThreadKeys = [...]string{"log", "meta", "v2", "v2e", "revs", "cids", "ixs", "att", "floor"}

// appendKeys returns the keys appendScript is given: those of a thread's
// keys an append may touch (appendThreadKeys), then the thread index, the
// generation, the pending index, the webhook events' stream and the
// threads that hold uploads and no message; for a participant's post
// (participant), the thread's grants. The slice has room for the two rate
// windows a rated append adds (runAppend), so that adding them copies
// nothing.
func (s *Store) appendKeys(thread string, participant bool) []string {
	k := append(s.threadKeys(thread, appendThreadKeys[:], 5+2), s.index, s.genKey, s.pending, s.events, s.places)
	if participant {
		k = append(k, s.grantsKey(thread))
	}
	return k
}

// threadKeys returns the thread's keys of the suffixes given, with room
// for extra more. They are slices of one string: an append allocates two
// values for them, not ten.
func (s *Store) threadKeys(thread string, suffixes []string, extra int) []string {
	base := len(s.prefix) + len(thread) + 3 // <prefix>{T}:
	var b strings.Builder
	b.Grow(len(suffixes) * (base + 6))
	var endsOf [len(threadKeys)]int
	ends := endsOf[:len(suffixes)]
	for i, suffix := range suffixes {
		b.WriteString(s.prefix)
		b.WriteByte('{')
		b.WriteString(thread)
		b.WriteString("}:")
		b.WriteString(suffix)
		ends[i] = b.Len()
	}
	all := b.String()
	k := make([]string, len(suffixes), len(suffixes)+extra)
	start := 0
	for i, end := range ends {
		k[i] = all[start:end]
		start = end
	}
	return k
}

// unreachable is the error of a store call that Redis did not serve
// (why): 503 store_unavailable, retryable after a second.
func unreachable(why error) *chatrelay.Error {
	return &chatrelay.Error{Code: chatrelay.StoreUnavailable, Message: "the store cannot be reached", Retry: retry, Err: why}
}

// unavailable wraps a Redis failure: StoreUnavailable for anything that
// says Redis cannot serve now, Internal for an answer this code did not
// expect (a bug, or a Redis too old for a command). The failure marks
// Redis down unless its command's answerHook found that another call
// answered since the command began (answeredMeanwhile).
func (s *Store) unavailable(op string, err error) error { return s.failed(op, err, nil) }

// failed is unavailable for a call that began when s.answers was *since
// (nil: the failure's own command says, answeredMeanwhile), which marks
// Redis down only if no call answered since then (markDown): a check's,
// which a gate may refuse before any command is sent.
func (s *Store) failed(op string, err error, since *uint64) error {
	var he *chatrelay.Error
	if errors.As(err, &he) {
		return err
	}
	if isInternal(err) {
		s.log.Error("redis store", "op", op, "err", err)
		return &chatrelay.Error{Code: chatrelay.Internal, Message: "internal error", Err: fmt.Errorf("redis %s: %w", op, err)}
	}
	if !errors.Is(err, context.Canceled) {
		// A canceled call is its caller's giving up (a client that left,
		// an MCP wait its client ended), no word of Redis's.
		var am answeredMeanwhile
		switch {
		case errors.As(err, &am): // older news than an answer: not down
		case since == nil:
			s.down.Store(true)
		default:
			s.markDown(*since)
		}
		s.reloadSlots()
		s.log.Warn("redis store unavailable", "op", op, "err", err)
	}
	return unreachable(fmt.Errorf("redis %s: %w", op, err))
}

// notACluster refuses a node of a Redis Cluster given as one Redis
// (redis://node, alone or in a list of instances): the node serves a third
// of the slots or less, and answers MOVED for the keys of the others, so
// that a store opened on it would find most threads missing or
// unreachable. Nothing is written before it: it comes right after the
// first PING. A Redis that refuses INFO (an ACL) is taken as no cluster.
func (s *Store) notACluster(ctx context.Context) error {
	c, ok := s.rdb.(*redis.Client)
	if !ok {
		return nil // a cluster's client (redis+cluster://)
	}
	info, err := c.Info(ctx, "cluster").Result()
	if err != nil {
		if isReply(err) {
			return nil
		}
		return s.unavailable("open", err)
	}
	if !strings.Contains(info, "cluster_enabled:1") {
		return nil
	}
	scheme := "redis+cluster"
	if c.Options().TLSConfig != nil {
		scheme = "rediss+cluster"
	}
	addr := c.Options().Addr
	return store.ConfigErrorf("store: the Redis at %s is a node of a Redis Cluster (cluster_enabled): give the cluster as %s://%s (any of its nodes, more make the first connection sturdier)", addr, scheme, addr)
}

// isReply reports whether err is an error reply of Redis: Redis
// answered, and what it was sent did not run, or a script stopped.
func isReply(err error) bool {
	var re redis.Error
	var ne net.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil) && !errors.As(err, &ne)
}

// scriptRefused reports whether err says a script did not run to its
// end: an error reply of Redis to it, not one to the WAIT after it (a
// notReplicatedError: the script ran on the primary).
func scriptRefused(err error) bool {
	var nr *notReplicatedError
	return isReply(err) && !errors.As(err, &nr)
}

// isInternal reports whether err is an error reply of Redis that does not
// mean "try again later": a script error or an unknown command.
func isInternal(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) || errors.Is(err, redis.Nil) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return false
	}
	msg := re.Error()
	for _, p := range []string{"LOADING", "BUSY", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN",
		"OOM", "NOREPLICAS", "MISCONF", "MOVED", "ASK", "NOAUTH", "WRONGPASS", "NOPERM", "ERR max number of clients"} {
		if strings.HasPrefix(msg, p) {
			return false
		}
	}
	return strings.HasPrefix(msg, "ERR") || strings.HasPrefix(msg, "WRONGTYPE") || strings.HasPrefix(msg, "NOSCRIPT")
}
