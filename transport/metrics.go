package transport

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// ops is a Server's operational side: its own Prometheus registry (never
// the global one, so servers in parallel tests do not collide) and what
// readiness looks at. Every label value is from a small fixed set: a route
// pattern, a status, a code, an author kind, a transport. Never a thread,
// token, IP or raw path.
type ops struct {
	reg *prometheus.Registry

	streamsOpen   *prometheus.GaugeVec     // transport
	streamsOpened *prometheus.CounterVec   // transport
	appended      *prometheus.CounterVec   // author
	fed           *prometheus.CounterVec   // author
	fanout        *prometheus.HistogramVec // transport
	drops         *prometheus.CounterVec   // reason
	refused       *prometheus.CounterVec   // code
	requests      *prometheus.HistogramVec // route, status
	storeDur      *prometheus.HistogramVec // op
	storeErrs     *prometheus.CounterVec   // op, code

	// The series a post touches, looked up once: WithLabelValues hashes
	// its labels and locks the vector at every call. Read-only after
	// newOps, but requestsOf: a map replaced by a copy with one more
	// series as routes and statuses come (under requestsMu), read without
	// a lock.
	fanoutOf   map[string]prometheus.Observer // transport
	appendedOf map[string]prometheus.Counter  // authorLabel
	fedOf      map[string]prometheus.Counter  // authorLabel
	storeDurOf map[string]prometheus.Observer // op
	requestsOf atomic.Pointer[map[requestSeries]prometheus.Observer]
	requestsMu sync.Mutex

	feeds    atomic.Int32 // Run calls in progress
	draining atomic.Bool  // Drain or Shutdown was called
	lastNot  atomic.Value // string: the last reason /readyz gave for "not ready", for logging transitions
}

// The label values of the transport label.
const (
	transportSSE = "sse"
	transportWS  = "ws"
)

func newOps(st store.Store, log *slog.Logger) *ops {
	m := &ops{reg: prometheus.NewRegistry()}
	m.streamsOpen = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "chatrelay_streams_open", Help: "Open live streams, by transport (sse, ws)."}, []string{"transport"})
	m.streamsOpened = counterVec("chatrelay_streams_opened_total", "Live streams opened (subscribed and backlog read), by transport.", "transport")
	m.appended = counterVec("chatrelay_messages_appended_total", "Messages this server appended to the store, by author kind.", "author")
	m.fed = counterVec("chatrelay_feed_messages_total", "Messages the store's change feed delivered (appended by this server or another process, such as the host CLI), by author kind.", "author")
	m.fanout = histogramVec("chatrelay_fanout_delay_seconds",
		"Time from the change feed delivering a stored message (for this server's own posts: the end of the store append) to its frame being written to a live stream, per stream, by transport.",
		[]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}, "transport")
	m.drops = counterVec("chatrelay_hub_drops_total", "Live subscribers the hub dropped, by reason: slow (a slow consumer whose queue was full), reset (must resume from the store), overflow (an idle subscriber handed a catch-up larger than its queue), shutdown.", "reason")
	m.refused = counterVec("chatrelay_requests_refused_total", "Requests answered with an error code (the contract's machine code), by code.", "code")
	m.requests = histogramVec("chatrelay_http_request_duration_seconds",
		"HTTP request duration by route pattern and status. For a stream (SSE or WebSocket) it is the time to open it (headers sent or connection upgraded), not its lifetime.",
		prometheus.DefBuckets, "route", "status") // the default buckets, 5ms to 10s
	m.storeDur = histogramVec("chatrelay_store_duration_seconds",
		"Store call duration, by operation: append (write), since and threads (reads).",
		[]float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}, "op")
	m.storeErrs = counterVec("chatrelay_store_errors_total", "Store calls that failed, by operation (append, since, threads; rate_limit and stream_limit for the limiters' own calls to a shared store such as Redis, which refusals by a limit are not) and error code.", "op", "code")
	m.reg.MustRegister(m.streamsOpen, m.streamsOpened, m.appended, m.fed, m.fanout, m.drops,
		m.refused, m.requests, m.storeDur, m.storeErrs,
		&threadsCollector{st: st, log: log},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// Series that exist from the start, at 0, so a rate() or an alert has
	// a baseline before the first event.
	m.fanoutOf = map[string]prometheus.Observer{}
	for _, t := range []string{transportSSE, transportWS} {
		m.streamsOpen.WithLabelValues(t)
		m.streamsOpened.WithLabelValues(t)
		m.fanoutOf[t] = m.fanout.WithLabelValues(t)
	}
	m.appendedOf, m.fedOf = map[string]prometheus.Counter{}, map[string]prometheus.Counter{}
	for _, a := range []string{string(chatrelay.Operator), string(chatrelay.Agent), string(chatrelay.Hermes), "other"} {
		m.appendedOf[a] = m.appended.WithLabelValues(a)
		m.fedOf[a] = m.fed.WithLabelValues(a)
	}
	for _, r := range []string{"slow", "reset", "overflow", "shutdown"} {
		m.drops.WithLabelValues(r)
	}
	for c := range statusOf {
		m.refused.WithLabelValues(string(c))
	}
	m.storeDurOf = map[string]prometheus.Observer{}
	for _, op := range []string{"append", "since", "threads"} {
		m.storeDurOf[op] = m.storeDur.WithLabelValues(op)
	}
	return m
}

// requestSeries is a series of the request duration histogram.
type requestSeries struct {
	route  string
	status int
}

// requestDone records a request's duration in its route's and status's
// series.
func (m *ops) requestDone(route string, status int, took time.Duration) {
	k := requestSeries{route, status}
	var o prometheus.Observer
	if of := m.requestsOf.Load(); of != nil {
		o = (*of)[k]
	}
	if o == nil {
		o = m.newRequestSeries(k)
	}
	o.Observe(took.Seconds())
}

// newRequestSeries adds k's series to requestsOf. A route is a pattern of
// the mux and a status one of the few the server answers with: the map
// stays small, and its copies are few.
func (m *ops) newRequestSeries(k requestSeries) prometheus.Observer {
	m.requestsMu.Lock()
	defer m.requestsMu.Unlock()
	of := map[requestSeries]prometheus.Observer{}
	if old := m.requestsOf.Load(); old != nil {
		if o := (*old)[k]; o != nil {
			return o
		}
		maps.Copy(of, *old)
	}
	o := m.requests.WithLabelValues(k.route, strconv.Itoa(k.status))
	of[k] = o
	m.requestsOf.Store(&of)
	return o
}

// counterVec is a counter with the labels.
func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// histogramVec is a histogram with the buckets and the labels.
func histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
}

// Registry is the server's own Prometheus registry: /metrics serves it,
// and a caller may register more collectors (a store backend's, say).
func (s *Server) Registry() *prometheus.Registry { return s.ops.reg }

// metricsHandler serves the registry in the Prometheus text format
// (OpenMetrics is not offered: promhttp negotiates it only when asked to).
func (s *Server) metricsHandler() http.Handler {
	return promhttp.HandlerFor(s.ops.reg, promhttp.HandlerOpts{
		ErrorLog:      slogPrinter{s},
		ErrorHandling: promhttp.ContinueOnError,
	})
}

type slogPrinter struct{ s *Server }

func (p slogPrinter) Println(v ...any) {
	p.s.log.Warn("metrics", "err", strings.TrimSpace(fmt.Sprintln(v...)))
}

// initOps sets up metrics, wraps the store to time it and hooks the hub's
// drops. The ops routes are rows of the route table (mux.go).
func (s *Server) initOps() {
	s.ops = newOps(s.cfg.Store, s.log)
	s.store = meteredStore{Store: s.cfg.Store, m: s.ops}
	s.limiter = meteredLimiter{RateLimiter: s.limiter, m: s.ops}
	s.streams = meteredStreams{StreamLimiter: s.streams, m: s.ops}
	s.hub.OnDrop(func(why error) { s.ops.drops.WithLabelValues(closeReason(why)).Inc() })
}

// streamOpened counts an open stream of a transport; call the result when
// it ends.
func (m *ops) streamOpened(transport string) (closed func()) {
	g := m.streamsOpen.WithLabelValues(transport)
	g.Inc()
	m.streamsOpened.WithLabelValues(transport).Inc()
	return g.Dec
}

// delivered records the fan-out delay of events just written to a stream.
func (m *ops) delivered(transport string, items []item) {
	o := m.fanoutOf[transport]
	now := time.Now()
	for _, it := range items {
		if it.ev != nil && !it.ev.Stored.IsZero() {
			o.Observe(now.Sub(it.ev.Stored).Seconds())
		}
	}
}

// feedBatch counts the messages of a change-feed batch.
func (m *ops) feedBatch(b store.Batch) {
	for _, e := range b.Messages {
		m.fedOf[authorLabel(e.Author)].Inc()
	}
}

// authorLabel bounds the author label: stored documents may hold any
// author string, the label only the known kinds.
func authorLabel(a chatrelay.Author) string {
	switch a {
	case chatrelay.Operator, chatrelay.Agent, chatrelay.Hermes:
		return string(a)
	}
	return "other"
}

// meteredStore times every call of the store the server makes and counts
// appended messages. Follow and Close pass through.
type meteredStore struct {
	store.Store
	m *ops
}

func (s meteredStore) done(op string, start time.Time, err error) {
	o, ok := s.m.storeDurOf[op]
	if !ok { // an op not timed at start
		o = s.m.storeDur.WithLabelValues(op)
	}
	o.Observe(time.Since(start).Seconds())
	if err != nil {
		s.m.storeErrs.WithLabelValues(op, string(chatrelay.CodeOf(err))).Inc()
	}
}

func (s meteredStore) Append(ctx context.Context, thread string, msg store.NewMessage) (store.Entry, error) {
	start := time.Now()
	e, err := s.Store.Append(ctx, thread, msg)
	s.done("append", start, err)
	if err == nil {
		s.m.appendedOf[authorLabel(e.Author)].Inc()
	}
	return e, err
}

func (s meteredStore) Since(ctx context.Context, thread string, since int64, limit int) (store.Page, error) {
	start := time.Now()
	p, err := s.Store.Since(ctx, thread, since, limit)
	s.done("since", start, err)
	return p, err
}

func (s meteredStore) Threads(ctx context.Context) ([]store.ThreadInfo, error) {
	start := time.Now()
	t, err := s.Store.Threads(ctx)
	s.done("threads", start, err)
	return t, err
}

// AppendLimited is the inner store's (limitedAppender), timed and
// counted as the two calls were: a refusal by the windows is no append,
// and a store that cannot be reached fails in the windows, the call's
// first step (op "rate_limit", as when the limiter asked alone).
func (s meteredStore) AppendLimited(ctx context.Context, lim chatrelay.RateLimiter, thread, ip string, msg store.NewMessage) (store.Entry, bool, error) {
	la, ok := s.Store.(limitedAppender)
	if !ok {
		return store.Entry{}, false, nil
	}
	start := time.Now()
	e, done, err := la.AppendLimited(ctx, lim, thread, ip, msg)
	switch code := chatrelay.CodeOf(err); {
	case !done || code == chatrelay.RateLimited:
	case code == chatrelay.StoreUnavailable:
		s.m.limiterFailed("rate_limit", err)
	default:
		s.done("append", start, err)
		if err == nil {
			s.m.appendedOf[authorLabel(e.Author)].Inc()
		}
	}
	return e, done, err
}

// meteredLimiter counts the rate limiter's failures (a shared limiter
// asks Redis first thing on every post) as store errors of op
// "rate_limit". A refusal by the limit itself is not an error here.
type meteredLimiter struct {
	chatrelay.RateLimiter
	m *ops
}

func (l meteredLimiter) Take(ctx context.Context, thread, ip string) (func(bool), error) {
	settle, err := l.RateLimiter.Take(ctx, thread, ip)
	l.m.limiterFailed("rate_limit", err)
	return settle, err
}

// meteredStreams counts the stream limiter's failures (the first call of
// every stream) as store errors of op "stream_limit".
type meteredStreams struct {
	chatrelay.StreamLimiter
	m *ops
}

func (l meteredStreams) Acquire(ctx context.Context, thread, ip string, holder chatrelay.StreamHolder) (func(), error) {
	release, err := l.StreamLimiter.Acquire(ctx, thread, ip, holder)
	l.m.limiterFailed("stream_limit", err)
	return release, err
}

// limiterFailed counts err as a store error of op unless it is nil or a
// refusal by the limit.
func (m *ops) limiterFailed(op string, err error) {
	switch c := chatrelay.CodeOf(err); c {
	case "", chatrelay.RateLimited, chatrelay.TooManyStreams:
	default:
		m.storeErrs.WithLabelValues(op, string(c)).Inc()
	}
}

// threadsCollector reports the number of stored threads at each scrape,
// asking the store itself (not through meteredStore, so scrapes do not
// move the store metrics). A store error leaves the metric out of that
// scrape and is logged.
type threadsCollector struct {
	st  store.Store
	log *slog.Logger
}

var threadsDesc = prometheus.NewDesc("chatrelay_threads", "Threads in the store.", nil, nil)

func (c *threadsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- threadsDesc }

func (c *threadsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ts, err := c.st.Threads(ctx)
	if err != nil {
		c.log.Warn("metrics: count threads", "err", err)
		return
	}
	ch <- prometheus.MustNewConstMetric(threadsDesc, prometheus.GaugeValue, float64(len(ts)))
}
