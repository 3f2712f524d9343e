package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Cluster is a private Redis Cluster: Primaries primaries with Replicas
// replicas each, every node a Server on free loopback ports (its client
// port and its cluster bus port, cluster-port), in throwaway folders.
type Cluster struct {
	Nodes []*Server // primaries first, as redis-cli --cluster create took them
}

// ClusterOptions configures a private cluster.
type ClusterOptions struct {
	Primaries int // at least 3; defaults to 3
	Replicas  int // per primary
}

// StartCluster starts a cluster of the test's own, killed at the end of the
// test, and waits until it serves every slot. It fails the test (never
// skips it) if redis-server or redis-cli is not installed.
func StartCluster(t testing.TB, opt ClusterOptions) *Cluster {
	t.Helper()
	c, err := NewCluster(t.TempDir(), opt)
	if c != nil {
		t.Cleanup(c.Kill)
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// NewCluster starts a cluster in dir that the caller must Kill (even when
// it returns an error with a cluster: the nodes it started).
func NewCluster(dir string, opt ClusterOptions) (*Cluster, error) {
	if opt.Primaries < 3 {
		opt.Primaries = 3
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is not installed (%v): the tests of the Redis backend run a real Redis, never skipped", err)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("redis-cli is not installed (%v): it makes the test cluster", err)
	}
	c := &Cluster{}
	n := opt.Primaries * (1 + opt.Replicas)
	for i := range n {
		d := filepath.Join(dir, "node"+strconv.Itoa(i))
		if err := os.Mkdir(d, 0o700); err != nil {
			return c, err
		}
		s := &Server{bin: bin, dir: d, extra: []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			// Long while the nodes meet (see runNodeTimeout).
			"--cluster-node-timeout", strconv.Itoa(joinNodeTimeout),
			// A replica syncs at once, not after the 5 s that diskless
			// replication waits for more replicas by default.
			"--repl-diskless-sync-delay", "0",
		}}
		if err := s.start(true); err != nil {
			return c, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	args := []string{"--cluster", "create"}
	for _, s := range c.Nodes {
		args = append(args, s.Addr())
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(opt.Replicas), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return c, fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := c.waitOK(20 * time.Second); err != nil {
		return c, err
	}
	if opt.Replicas > 0 {
		if err := c.waitReplicas(opt.Primaries*opt.Replicas, 20*time.Second); err != nil {
			return c, err
		}
		for _, p := range c.Nodes[:opt.Primaries] {
			if err := p.waitAck(); err != nil {
				return c, err
			}
		}
	}
	for _, s := range c.Nodes {
		if err := configSet(s.Addr(), "cluster-node-timeout", strconv.Itoa(runNodeTimeout)); err != nil {
			return c, err
		}
	}
	return c, nil
}

// A node forgets a node it meets if their handshake takes longer than the
// node timeout (at least a second), and redis-cli --cluster create sends
// each meeting once, then waits for a join that never comes: on a machine
// busy with the other tests the nodes meet with joinNodeTimeout, and run
// with runNodeTimeout once the cluster is ok, short so that a failover
// test's replica takes over in a second or two.
const (
	joinNodeTimeout = 15000 // ms
	runNodeTimeout  = 1000  // ms
)

func configSet(addr, name, value string) error {
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer cl.Close()
	if err := cl.ConfigSet(context.Background(), name, value).Err(); err != nil {
		return fmt.Errorf("redistest: CONFIG SET %s on %s: %w", name, addr, err)
	}
	return nil
}

// waitReplicas waits until n nodes are replicas with their link to their
// primary up (the first sync done): only such a replica can take over.
func (c *Cluster) waitReplicas(n int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		up := 0
		for _, s := range c.Nodes {
			cl := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second,
				MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
			info, err := cl.Info(context.Background(), "replication").Result()
			cl.Close()
			if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up") {
				up++
			}
		}
		if up >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: %d of %d replicas in sync", up, n)
		}
		time.Sleep(50 * time.Millisecond) // the poll interval of a condition with a deadline
	}
}

// Kill ends every node.
func (c *Cluster) Kill() {
	for _, s := range c.Nodes {
		s.Kill()
	}
}

// URL is the cluster's redis+cluster:// URL, every node listed.
func (c *Cluster) URL() string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr()
	}
	return "redis+cluster://" + strings.Join(addrs, ",")
}

// Client returns a cluster client, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr()
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	t.Cleanup(func() { cc.Close() })
	return cc
}

// Cli runs redis-cli with args (bounded to a minute) and returns its output.
func (c *Cluster) Cli(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// WaitOK waits until every running node says cluster_state:ok and every
// slot is served.
func (c *Cluster) WaitOK(t testing.TB) {
	t.Helper()
	if err := c.waitOK(20 * time.Second); err != nil {
		t.Fatal(err)
	}
}

func (c *Cluster) waitOK(within time.Duration) error {
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		ok := true
		for _, s := range c.Nodes {
			if !s.running() {
				continue
			}
			info, err := clusterInfo(s.Addr())
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
				ok, last = false, fmt.Sprintf("%s: %v %s", s.Addr(), err, info)
				break
			}
		}
		if ok {
			return nil
		}
		time.Sleep(50 * time.Millisecond) // the poll interval of a condition with a deadline
	}
	return fmt.Errorf("redistest: the cluster is not ok: %s", last)
}

func clusterInfo(addr string) (string, error) {
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer cl.Close()
	return cl.ClusterInfo(context.Background()).Result()
}

// running reports whether the node's process runs (not Killed).
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Role returns the node's role ("master" or "slave"), as ROLE says.
func (s *Server) Role(t testing.TB) string {
	t.Helper()
	r, err := s.Client(t).Do(context.Background(), "ROLE").Slice()
	if err != nil || len(r) == 0 {
		t.Fatalf("redistest: ROLE: %v", err)
	}
	role, _ := r[0].(string)
	return role
}

// node is a line of CLUSTER NODES.
type node struct {
	id, addr, master string
	primary          bool
	slots            []string
}

func (c *Cluster) nodes(t testing.TB) []node {
	t.Helper()
	var out []node
	for _, s := range c.Nodes {
		if !s.running() {
			continue
		}
		txt, err := s.Client(t).ClusterNodes(context.Background()).Result()
		if err != nil {
			continue
		}
		for _, line := range strings.Split(strings.TrimSpace(txt), "\n") {
			f := strings.Fields(line)
			if len(f) < 8 {
				continue
			}
			addr, _, _ := strings.Cut(f[1], "@")
			out = append(out, node{id: f[0], addr: addr, master: f[3],
				primary: strings.Contains(f[2], "master"), slots: f[8:]})
		}
		return out
	}
	t.Fatal("redistest: no node of the cluster answers CLUSTER NODES")
	return nil
}

// Server returns the node at addr.
func (c *Cluster) Server(t testing.TB, addr string) *Server {
	t.Helper()
	for _, s := range c.Nodes {
		if s.Addr() == addr {
			return s
		}
	}
	t.Fatalf("redistest: no node %s", addr)
	return nil
}

// ID returns the cluster id of the node at addr.
func (c *Cluster) ID(t testing.TB, addr string) string {
	t.Helper()
	for _, n := range c.nodes(t) {
		if n.addr == addr {
			return n.id
		}
	}
	t.Fatalf("redistest: no node %s", addr)
	return ""
}

// PrimaryOf returns the address of the primary that serves key's slot.
func (c *Cluster) PrimaryOf(t testing.TB, key string) string {
	t.Helper()
	cl := c.Nodes[0].Client(t)
	slot, err := cl.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("redistest: CLUSTER KEYSLOT: %v", err)
	}
	return c.PrimaryOfSlot(t, int(slot))
}

// ReplicaOf returns a replica of the primary at addr, as the replicas
// say (INFO replication: CLUSTER NODES may not show it yet).
func (c *Cluster) ReplicaOf(t testing.TB, addr string) *Server {
	t.Helper()
	_, port, _ := strings.Cut(addr, ":")
	for _, s := range c.Nodes {
		if !s.running() {
			continue
		}
		info, err := s.Client(t).Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_port:"+port+"\r\n") {
			return s
		}
	}
	t.Fatalf("redistest: the primary %s has no replica", addr)
	return nil
}

// waitAck waits until a replica of the primary s acknowledges a write
// (see waitAck): a key of one of its slots, set and deleted.
func (s *Server) waitAck() error {
	cl := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer cl.Close()
	return waitAck(context.Background(), cl, func(ctx context.Context, conn *redis.Conn) error {
		for i := range 100000 {
			key := "redistest:ack:" + strconv.Itoa(i)
			err := conn.Set(ctx, key, "1", 0).Err()
			if err != nil && strings.HasPrefix(err.Error(), "MOVED") {
				continue // another primary's slot
			}
			if err != nil {
				return err
			}
			return conn.Del(ctx, key).Err()
		}
		return fmt.Errorf("redistest: no key of %s's slots", s.Addr())
	})
}

// PrimaryOfSlot returns the address of the primary that serves slot.
func (c *Cluster) PrimaryOfSlot(t testing.TB, slot int) string {
	t.Helper()
	for _, n := range c.nodes(t) {
		if !n.primary {
			continue
		}
		for _, r := range n.slots {
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 == nil && err2 == nil && a <= slot && slot <= b {
				return n.addr
			}
		}
	}
	t.Fatalf("redistest: no primary serves slot %d", slot)
	return ""
}

// Failover has a replica of the primary at addr take over with CLUSTER
// FAILOVER (the coordinated manual failover: the replica has every write
// the primary acknowledged before it takes over), and waits until it is
// a primary and the cluster is ok. It returns the new primary's address.
func (c *Cluster) Failover(t testing.TB, addr string) string {
	t.Helper()
	id := c.ID(t, addr)
	deadline := time.Now().Add(20 * time.Second)
	var replica string
	for replica == "" {
		// A replica the primary knows, in sync (ROLE on the primary lists
		// its replicas once they are attached).
		r, err := c.Server(t, addr).Client(t).Do(context.Background(), "ROLE").Slice()
		if err == nil && len(r) == 3 {
			if reps, ok := r[2].([]any); ok && len(reps) > 0 {
				if rep, ok := reps[0].([]any); ok && len(rep) >= 2 {
					replica = fmt.Sprintf("%v:%v", rep[0], rep[1])
				}
			}
		}
		if replica == "" {
			if time.Now().After(deadline) {
				t.Fatalf("redistest: the primary %s (%s) has no replica: %v", addr, id, r)
			}
			time.Sleep(50 * time.Millisecond) // the poll interval of a condition with a deadline
		}
	}
	s := c.Server(t, replica)
	if err := s.Client(t).Do(context.Background(), "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Fatalf("redistest: CLUSTER FAILOVER on %s: %v", replica, err)
	}
	for s.Role(t) != "master" {
		if time.Now().After(deadline) {
			t.Fatalf("redistest: %s did not take over from %s", replica, addr)
		}
		time.Sleep(20 * time.Millisecond) // the poll interval of a condition with a deadline
	}
	c.WaitOK(t)
	return replica
}

// MoveSlot migrates slot, keys and all, from the primary that serves it to
// the primary at to, as redis-cli --cluster reshard does for each slot:
// IMPORTING on the target, MIGRATING on the source, MIGRATE of its keys
// in batches, then SETSLOT NODE everywhere.
func (c *Cluster) MoveSlot(t testing.TB, slot int, to string) {
	t.Helper()
	ctx := context.Background()
	from := c.PrimaryOfSlot(t, slot)
	if from == to {
		t.Fatalf("redistest: slot %d is on %s already", slot, to)
	}
	fromID, toID := c.ID(t, from), c.ID(t, to)
	src, dst := c.Server(t, from).Client(t), c.Server(t, to).Client(t)
	must := func(err error, what string) {
		if err != nil {
			t.Fatalf("redistest: move slot %d: %s: %v", slot, what, err)
		}
	}
	must(dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err(), "IMPORTING")
	must(src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err(), "MIGRATING")
	host, port, _ := strings.Cut(to, ":")
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		must(err, "GETKEYSINSLOT")
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "REPLACE", "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		must(src.Do(ctx, args...).Err(), "MIGRATE")
	}
	// The target first, then the source, then the other primaries.
	order := []string{to, from}
	for _, n := range c.nodes(t) {
		if n.primary && n.addr != to && n.addr != from {
			order = append(order, n.addr)
		}
	}
	for _, addr := range order {
		must(c.Server(t, addr).Client(t).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err(), "SETSLOT NODE on "+addr)
	}
	c.WaitOK(t)
}

// WaitReplicated waits until every replica of the primary at addr has
// received every write the primary has (its offset in INFO replication is
// the primary's), so that a failover of it loses nothing written so far:
// Redis replicates asynchronously, and a primary killed right after a
// write may take that write, and under load its last second's, with it.
func (c *Cluster) WaitReplicated(t testing.TB, addr string) {
	t.Helper()
	cl := c.Server(t, addr).Client(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := cl.Info(context.Background(), "replication").Result()
		if err == nil && replicasCaughtUp(info) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: the replicas of %s did not catch up within 10s: %v\n%s", addr, err, info)
		}
		time.Sleep(20 * time.Millisecond) // the poll interval of a condition with a deadline
	}
}

// replicasCaughtUp reads INFO replication: at least one replica, each at
// the primary's offset.
func replicasCaughtUp(info string) bool {
	var primary string
	var offsets []string
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
			primary = v
		}
		if strings.HasPrefix(line, "slave") && strings.Contains(line, "offset=") {
			for _, f := range strings.Split(line, ",") {
				if v, ok := strings.CutPrefix(f, "offset="); ok {
					offsets = append(offsets, v)
				}
			}
		}
	}
	if primary == "" || len(offsets) == 0 {
		return false
	}
	for _, o := range offsets {
		if o != primary {
			return false
		}
	}
	return true
}
