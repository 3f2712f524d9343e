// Package storetest runs tests against every store backend: the file
// store in a temp folder and the Redis store on a private redis-server.
//
// A test binary that uses the Redis backend shares one redis-server,
// started on first use on a free loopback port in a throwaway folder
// (no persistence), and stopped by Main when the package's tests end.
// Each Open on it takes a key prefix of its own, so tests stay
// independent and may run in parallel. The package that uses it says so
// in its TestMain:
//
//	func TestMain(m *testing.M) { storetest.Main(m) }
//
// A missing redis-server fails the tests that need it; they are never
// skipped.
package storetest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/redistest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/filestore"
	"github.com/chatrelay/chatrelay/store/redisstore"
)

// The backends' names, as Open takes them and as subtests are named.
const (
	File  = "file"
	Redis = "redis"
	// RedisCluster is a Sharded store on the test binary's shared
	// 3-primary Redis Cluster; RedisShards one on two shared single
	// Redis servers (redis://a,redis://b). Run includes them only in
	// this package's own tests (the conformance suite).
	RedisCluster = "redis-cluster"
	RedisShards  = "redis-shards"
	// RedisWait is the Redis store on a shared server with a replica,
	// opened with wait-replicas=1: every write it acknowledges waits for
	// the replica (WAIT). Its Backend's Name is Redis. Run includes it
	// only in this package's own tests too.
	RedisWait = "redis-wait"
	// FileAppendLog is the file store with its thread logs
	// (filestore.FileOptions.AppendLog; Backend.Name is File). Run
	// includes it only in this package's own tests too.
	FileAppendLog = "file-append-log"
)

// IsRedis reports whether backend is one of the Redis backends.
func IsRedis(backend string) bool { return backend != File && backend != FileAppendLog }

// alsoRun are backends Run adds to Backends: set by this package's
// TestMain only, so that other packages' tests do not start clusters.
var alsoRun []string

// Backends returns the names of every backend, file first.
func Backends() []string { return []string{File, Redis} }

// Run runs fn as one parallel subtest per backend, named after it.
func Run(t *testing.T, fn func(t *testing.T, backend string)) {
	t.Helper()
	for _, name := range append(Backends(), alsoRun...) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, name)
		})
	}
}

var shared struct {
	mu   sync.Mutex
	main bool // Main is running the tests

	srv     lazy[*Server]            // Redis's
	second  lazy[*Server]            // RedisShards' second shard
	cluster lazy[*redistest.Cluster] // RedisCluster's
	wait    lazy[*Server]            // RedisWait's primary, with its replica
}

// lazy is one of the servers the test binary shares: started on first
// use (under shared.mu) in a temp folder of its own, stopped and its
// folder removed by Main once the tests are done.
type lazy[T any] struct {
	started bool
	dir     string
	val     T
	stop    func() // what start started, even when it failed after
	err     error
}

// get returns l's server, starting it with start on first use. It fails
// the test if the server cannot run, or if the package's TestMain does not
// call Main (nothing would stop the server).
func (l *lazy[T]) get(t testing.TB, what string, start func(dir string) (T, func(), error)) T {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.main {
		t.Fatalf("storetest: the shared %s needs the package's TestMain to call storetest.Main(m)", what)
	}
	if !l.started {
		l.started = true
		l.dir, l.err = os.MkdirTemp("", "chatrelay-redis-")
		if l.err == nil {
			l.val, l.stop, l.err = start(l.dir)
		}
	}
	if l.err != nil {
		t.Fatalf("storetest: %v", l.err)
	}
	return l.val
}

// close stops what get started and removes its folder.
func (l *lazy[T]) close() {
	if l.stop != nil {
		l.stop()
	}
	if l.dir != "" {
		os.RemoveAll(l.dir)
	}
}

// startServer starts a redis-server in dir.
func startServer(dir string) (*Server, func(), error) {
	srv, err := redistest.Start(dir, ServerOptions{})
	if err != nil {
		return nil, nil, err
	}
	return srv, srv.Kill, nil
}

var prefixSeq atomic.Int64

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// Main runs the package's tests and benchmarks, stops the shared
// redis-server if they started it, and exits. Call it from TestMain.
func Main(m *testing.M) { os.Exit(WithRedis(m).Run()) }

// WithRedis wraps m so that its Run stops the shared redis-server once the
// tests are done; for a TestMain that hands m to something else
// (goleak.VerifyTestMain(storetest.WithRedis(m))).
func WithRedis(m *testing.M) interface{ Run() int } { return runner{m} }

type runner struct{ m *testing.M }

func (r runner) Run() int {
	// go-redis logs every failed reconnection to stderr; tests that stop
	// Redis on purpose provoke many.
	redis.SetLogger(quietLogger{})
	shared.mu.Lock()
	shared.main = true
	shared.mu.Unlock()
	code := r.m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.srv.close()
	shared.second.close()
	shared.cluster.close()
	shared.wait.close()
	shared.main = false
	return code
}

// SharedServer returns the test binary's shared redis-server, starting it
// on first use. It fails the test if redis-server cannot run, or if the
// package's TestMain does not call Main (nothing would stop the server).
func SharedServer(t testing.TB) *Server {
	t.Helper()
	return shared.srv.get(t, "redis-server", startServer)
}

// Options configures a store. Zero values take the test defaults.
type Options struct {
	Retention  chatrelay.Retention
	MaxThreads int
	Now        func() time.Time // defaults to time.Now
	Log        *slog.Logger     // defaults to discarding everything
	Fsync      bool             // file: fsync as in production (tests skip it by default)
	// ResetAfter is redisstore.Options.ResetAfter (Redis only).
	ResetAfter time.Duration
	// User and Password log in to Redis as an ACL user of the test's
	// (Redis only; by default the default user).
	User, Password string
	// Webhooks are store.Options.Webhooks: the destinations whose
	// events every write queues (Backend.Outbox).
	Webhooks []string
}

// Backend is an open store of one backend, closed when the test ends.
type Backend struct {
	Name  string      // File or Redis
	Store store.Store // *filestore.File or *redisstore.Store

	Dir string // File: the data folder (documents are in Dir/chat)
	// AppendLog (File): the store appends posts to the threads' logs
	// (FileAppendLog).
	AppendLog bool

	Redis  *redisstore.Store // Redis: the store
	Server *Server           // Redis: the server it is on
	Prefix string            // Redis, RedisCluster, RedisShards: its key prefix, this test's own

	Sharded *redisstore.Sharded // RedisCluster, RedisShards: the store
	Spec    string              // RedisCluster, RedisShards: the --store spec
	Cluster *redistest.Cluster  // RedisCluster: the cluster it is on
	Servers []*Server           // RedisShards: the servers, shard by shard

	Outbox store.Outbox // the queue of webhook events, with Options.Webhooks

	query string // Redis: the URL's query (RedisWait's wait-replicas)
	close func() // closes the store once
}

// Close closes the store now, as a server's clean stop does (the file
// store saves its webhook queues' progress); the test's end does not
// close it again.
func (b *Backend) Close() {
	if b.close != nil { // a Backend made by hand
		b.close()
	}
}

// Open opens a store of the named backend for the test: the file store in
// a new temp folder, or the Redis store on the shared server under a new
// key prefix.
func Open(t testing.TB, name string, opt Options) *Backend {
	t.Helper()
	switch name {
	case File, FileAppendLog:
		return openFile(t, t.TempDir(), opt, name == FileAppendLog)
	case Redis:
		return OpenRedis(t, SharedServer(t), NewPrefix(), opt)
	case RedisWait:
		return openRedis(t, waitServer(t), NewPrefix(), opt, "?wait-replicas=1")
	case RedisCluster:
		c := SharedCluster(t)
		return OpenSharded(t, c.URL(), NewPrefix(), opt, c, nil)
	case RedisShards:
		srvs := []*Server{SharedServer(t), secondServer(t)}
		return OpenSharded(t, srvs[0].URL()+","+srvs[1].URL(), NewPrefix(), opt, nil, srvs)
	}
	t.Fatalf("storetest: no backend %q", name)
	return nil
}

// OpenFileIn opens the file store on the data folder dir (a SmallDisk,
// say) for the test.
func OpenFileIn(t testing.TB, dir string, opt Options) *Backend {
	t.Helper()
	return openFile(t, dir, opt, false)
}

// NewPrefix returns a key prefix no other test of this binary uses.
func NewPrefix() string { return fmt.Sprintf("test%d:", prefixSeq.Add(1)) }

// OpenRedis opens a Redis store on srv under prefix.
func OpenRedis(t testing.TB, srv *Server, prefix string, opt Options) *Backend {
	t.Helper()
	return openRedis(t, srv, prefix, opt, "")
}

// OpenRedisWith is OpenRedis with query added to the server's URL
// ("?wait-replicas=1"); another store of the backend (Another, CLIArgs)
// takes it too.
func OpenRedisWith(t testing.TB, srv *Server, prefix string, opt Options, query string) *Backend {
	t.Helper()
	return openRedis(t, srv, prefix, opt, query)
}

func openRedis(t testing.TB, srv *Server, prefix string, opt Options, query string) *Backend {
	t.Helper()
	url := srv.URL()
	if opt.User != "" {
		url = "redis://" + opt.User + ":" + opt.Password + "@" + srv.Addr() + "/0"
	}
	url += query
	rs, err := redisstore.Open(context.Background(), url, redisstore.Options{
		Prefix: prefix, Retention: opt.Retention, MaxThreads: opt.MaxThreads,
		Log: logger(opt), Now: opt.Now, ResetAfter: opt.ResetAfter, Webhooks: opt.Webhooks,
	})
	if err != nil {
		t.Fatalf("storetest: open the Redis store: %v", err)
	}
	closeOnce := sync.OnceFunc(func() { rs.Close() })
	t.Cleanup(closeOnce)
	return &Backend{Name: Redis, Store: rs, Redis: rs, Server: srv, Prefix: prefix, Outbox: rs.Outbox(), query: query, close: closeOnce}
}

// OpenSharded opens a Sharded store of spec under prefix (c is the
// cluster of a redis+cluster spec, srvs the servers of a list).
func OpenSharded(t testing.TB, spec, prefix string, opt Options, c *redistest.Cluster, srvs []*Server) *Backend {
	t.Helper()
	sh, err := redisstore.OpenSharded(context.Background(), spec, redisstore.Options{
		Prefix: prefix, Retention: opt.Retention, MaxThreads: opt.MaxThreads,
		Log: logger(opt), Now: opt.Now, ResetAfter: opt.ResetAfter, Webhooks: opt.Webhooks,
	})
	if err != nil {
		t.Fatalf("storetest: open the sharded store %s: %v", spec, err)
	}
	closeOnce := sync.OnceFunc(func() { sh.Close() })
	t.Cleanup(closeOnce)
	name := RedisShards
	if c != nil {
		name = RedisCluster
	}
	return &Backend{Name: name, Store: sh, Sharded: sh, Spec: spec, Cluster: c, Servers: srvs, Prefix: prefix, Outbox: sh.Outbox(), close: closeOnce}
}

// SharedCluster returns the test binary's shared 3-primary Redis Cluster,
// starting it on first use (as SharedServer).
func SharedCluster(t testing.TB) *redistest.Cluster {
	t.Helper()
	return shared.cluster.get(t, "cluster", func(dir string) (*redistest.Cluster, func(), error) {
		c, err := redistest.NewCluster(dir, redistest.ClusterOptions{})
		if err != nil {
			return nil, nil, err
		}
		return c, c.Kill, nil
	})
}

// waitServer is RedisWait's shared primary, with its replica.
func waitServer(t testing.TB) *Server {
	t.Helper()
	return shared.wait.get(t, "redis-server", func(dir string) (*Server, func(), error) {
		primary, stop, err := startServer(dir)
		if err != nil {
			return nil, nil, err
		}
		replicaDir := filepath.Join(dir, "replica")
		if err := os.Mkdir(replicaDir, 0o700); err != nil {
			return nil, stop, err
		}
		replica, err := primary.StartReplicaIn(replicaDir)
		if err != nil {
			return nil, stop, err
		}
		return primary, func() { replica.Kill(); primary.Kill() }, nil
	})
}

// secondServer is the shared second server of RedisShards.
func secondServer(t testing.TB) *Server {
	t.Helper()
	return shared.second.get(t, "redis-server", startServer)
}

func openFile(t testing.TB, dir string, opt Options, appendLog bool) *Backend {
	t.Helper()
	fs, err := filestore.OpenFile(dir, filestore.FileOptions{
		Retention: opt.Retention, MaxThreads: opt.MaxThreads, NoFsync: !opt.Fsync,
		AppendLog: appendLog, Now: opt.Now, Log: logger(opt), Webhooks: opt.Webhooks,
	})
	if err != nil {
		t.Fatalf("storetest: open the file store: %v", err)
	}
	closeOnce := sync.OnceFunc(func() { fs.Close() })
	t.Cleanup(closeOnce)
	return &Backend{Name: File, Store: fs, Dir: dir, AppendLog: appendLog, Outbox: fs.Outbox(), close: closeOnce}
}

func logger(opt Options) *slog.Logger {
	if opt.Log != nil {
		return opt.Log
	}
	return slog.New(slog.DiscardHandler)
}

// Another opens a second store on the same data: the same folder, or the
// same Redis and prefix. It is what another node or another process (the
// host CLI) sees.
func (b *Backend) Another(t testing.TB, opt Options) *Backend {
	t.Helper()
	switch b.Name {
	case File:
		return openFile(t, b.Dir, opt, b.AppendLog)
	case RedisCluster, RedisShards:
		return OpenSharded(t, b.Spec, b.Prefix, opt, b.Cluster, b.Servers)
	}
	return openRedis(t, b.Server, b.Prefix, opt, b.query)
}

// CLIArgs are the flags that point the chatrelay command at this store.
func (b *Backend) CLIArgs() []string {
	switch b.Name {
	case File:
		return []string{"--data", b.Dir}
	case RedisCluster, RedisShards:
		return []string{"--store", b.Spec, "--redis-prefix", b.Prefix}
	}
	return []string{"--store", b.Server.URL() + b.query, "--redis-prefix", b.Prefix}
}

// RateLimiter is chatrelay.RateLimiter (this package cannot import
// transport, whose tests import it).
type RateLimiter interface {
	Take(ctx context.Context, thread, ip string) (settle func(stored bool), err error)
}

// StreamLimiter is chatrelay.StreamLimiter.
type StreamLimiter interface {
	Acquire(ctx context.Context, thread, ip string, holder chatrelay.StreamHolder) (release func(), err error)
}

// SharedLimiters returns the limiters that count across every node of
// this backend: Redis's, on Redis's own clock. The file store has none
// (one node keeps its limits in memory): ok is false, and the caller uses
// transport's in-memory limiters.
func (b *Backend) SharedLimiters(perThread, perIP int, window time.Duration, streamsPerThread, streamsPerIP int) (rate RateLimiter, streams StreamLimiter, ok bool) {
	w := chatrelay.Windows{PerThread: perThread, PerIP: perIP, Window: window}
	sl := chatrelay.StreamLimits{PerThread: streamsPerThread, PerIP: streamsPerIP}
	if b.Sharded != nil {
		return b.Sharded.NewRateLimiter(w), b.Sharded.NewStreamLimiter(sl, 0), true
	}
	if b.Redis == nil {
		return nil, nil, false
	}
	return redisstore.NewRateLimiter(b.Redis, w), redisstore.NewStreamLimiter(b.Redis, sl, 0), true
}

// Threads lists the threads the store holds, for tests that check that a
// refused request stored nothing.
func (b *Backend) Threads(t testing.TB) []string {
	t.Helper()
	infos, err := b.Store.Threads(context.Background())
	if err != nil {
		t.Fatalf("storetest: Threads: %v", err)
	}
	var out []string
	for _, i := range infos {
		out = append(out, i.Thread)
	}
	return out
}

// Client returns a plain Redis client on the backend's server, closed
// when the test ends, for tests that look at or change Redis itself.
func (b *Backend) Client(t testing.TB) *redis.Client {
	t.Helper()
	return b.Server.Client(t)
}

// KeyPrefix is the prefix of thread's keys and of the indexes beside
// them: Prefix on one Redis, the thread's shard's on a sharded store.
func (b *Backend) KeyPrefix(thread string) string {
	if b.Sharded != nil {
		return b.Sharded.Prefix(thread)
	}
	return b.Prefix
}

// ThreadClient returns a client of the Redis that holds thread's keys,
// closed when the test ends.
func (b *Backend) ThreadClient(t testing.TB, thread string) redis.UniversalClient {
	t.Helper()
	switch b.Name {
	case RedisCluster:
		return b.Cluster.Client(t)
	case RedisShards:
		return b.Servers[b.Sharded.ShardOf(thread)].Client(t)
	}
	return b.Client(t)
}

// Keys lists the keys under the backend's prefix.
func (b *Backend) Keys(t testing.TB) []string {
	t.Helper()
	if b.Redis == nil {
		t.Fatal("storetest: Keys is for the Redis backend")
	}
	var out []string
	iter := b.Client(t).Scan(context.Background(), 0, b.Prefix+"*", 1000).Iterator()
	for iter.Next(context.Background()) {
		out = append(out, strings.TrimPrefix(iter.Val(), b.Prefix))
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("storetest: SCAN: %v", err)
	}
	return out
}

// CorruptParticipants writes over the thread's participants record with
// one whose grant grantID lacks its digest and expiry, as a damaged disk,
// a hand edit or a write by something else would leave it: the file
// store's record file, or on Redis the grant's value in the thread's
// grants hash. It returns a function that reads the record's raw bytes
// (to check that nothing writes over it).
func (b *Backend) CorruptParticipants(t testing.TB, thread, grantID string) (raw func() []byte) {
	t.Helper()
	grant := `{"id":"` + grantID + `","name":"Alex"}`
	if IsRedis(b.Name) {
		c := b.ThreadClient(t, thread)
		key := b.KeyPrefix(thread) + "{" + thread + "}:grants"
		ctx := context.Background()
		if err := c.HSet(ctx, key, grantID, grant).Err(); err != nil {
			t.Fatalf("storetest: corrupt the grants hash: %v", err)
		}
		return func() []byte {
			fields, err := c.HGetAll(ctx, key).Result()
			if err != nil {
				t.Fatalf("storetest: read the grants hash: %v", err)
			}
			names := make([]string, 0, len(fields))
			for f := range fields {
				names = append(names, f)
			}
			slices.Sort(names)
			var out []byte
			for _, f := range names {
				out = append(append(append(append(out, f...), '='), fields[f]...), '\n')
			}
			return out
		}
	}
	path := filepath.Join(b.Dir, "chat", thread+".participants.json")
	bad := []byte(`{"version":1,"thread":"` + thread + `","grants":[` + grant + `]}`)
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	return func() []byte {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
}
