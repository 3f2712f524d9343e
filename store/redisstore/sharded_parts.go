package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// The Sharded store's participants, push, agents, attachments and
// webhook outbox: each on the thread's shard, or on shard 0 for the
// node-wide ones.

// --- participants ---

// Invite implements store.Participants.
func (sh *Sharded) Invite(ctx context.Context, thread string, g chatrelay.Grant) error {
	return sh.of(thread).Invite(ctx, thread, g)
}

// Grants implements store.Participants.
func (sh *Sharded) Grants(ctx context.Context, thread string) ([]chatrelay.Grant, error) {
	return sh.of(thread).Grants(ctx, thread)
}

// Grant implements store.Participants.
func (sh *Sharded) Grant(ctx context.Context, thread, id string) (chatrelay.Grant, error) {
	return sh.of(thread).Grant(ctx, thread, id)
}

// Revoke implements store.Participants.
func (sh *Sharded) Revoke(ctx context.Context, thread, id string) (chatrelay.Grant, error) {
	return sh.of(thread).Revoke(ctx, thread, id)
}

// MarkUsed implements store.Participants.
func (sh *Sharded) MarkUsed(ctx context.Context, thread, id string) (bool, error) {
	return sh.of(thread).MarkUsed(ctx, thread, id)
}

// Seen implements store.Participants.
func (sh *Sharded) Seen(ctx context.Context, thread, id string, at int64) (bool, error) {
	return sh.of(thread).Seen(ctx, thread, id, at)
}

// NoteExpired implements store.Participants.
func (sh *Sharded) NoteExpired(ctx context.Context, thread, id string) (bool, error) {
	return sh.of(thread).NoteExpired(ctx, thread, id)
}

// Audit implements store.Participants.
func (sh *Sharded) Audit(ctx context.Context, thread string, ev chatrelay.AuditEvent) error {
	return sh.of(thread).Audit(ctx, thread, ev)
}

// AuditLog implements store.Participants.
func (sh *Sharded) AuditLog(ctx context.Context, thread string) ([]chatrelay.AuditEvent, error) {
	return sh.of(thread).AuditLog(ctx, thread)
}

// Resolve implements store.Participants: every shard's grant index is
// asked at once (a token does not say its thread). A shard that cannot
// answer makes it StoreUnavailable unless another shard knows the token.
func (sh *Sharded) Resolve(ctx context.Context, digest string) (string, chatrelay.Grant, error) {
	type found struct {
		thread string
		g      chatrelay.Grant
	}
	res := make([]found, len(sh.shards))
	errs := make([]error, len(sh.shards))
	sh.each(func(k int, s *Store) error {
		res[k].thread, res[k].g, errs[k] = s.Resolve(ctx, digest)
		return nil
	})
	for k, r := range res {
		if errs[k] == nil && r.thread != "" {
			return r.thread, r.g, nil
		}
	}
	for _, err := range errs {
		if err != nil && chatrelay.CodeOf(err) != chatrelay.Unauthorized {
			return "", chatrelay.Grant{}, err
		}
	}
	return "", chatrelay.Grant{}, errs[0]
}

// --- push ---

// PushSubscribe implements store.Push.
func (sh *Sharded) PushSubscribe(ctx context.Context, thread string, sub chatrelay.PushSubscription) (chatrelay.PushSubscription, bool, error) {
	return sh.of(thread).PushSubscribe(ctx, thread, sub)
}

// PushSubscriptions implements store.Push.
func (sh *Sharded) PushSubscriptions(ctx context.Context, thread string) ([]chatrelay.PushSubscription, error) {
	return sh.of(thread).PushSubscriptions(ctx, thread)
}

// PushUnsubscribe implements store.Push.
func (sh *Sharded) PushUnsubscribe(ctx context.Context, thread, id string) (chatrelay.PushSubscription, error) {
	return sh.of(thread).PushUnsubscribe(ctx, thread, id)
}

// VAPIDKey implements store.Push: shard 0's.
func (sh *Sharded) VAPIDKey(ctx context.Context) ([]byte, error) { return sh.shards[0].VAPIDKey(ctx) }

// RotateVAPIDKey implements store.Push: shard 0's.
func (sh *Sharded) RotateVAPIDKey(ctx context.Context) ([]byte, error) {
	return sh.shards[0].RotateVAPIDKey(ctx)
}

// ClaimPush implements store.Push: on shard 0.
func (sh *Sharded) ClaimPush(ctx context.Context, id, owner string, lease time.Duration, doc []byte) (won, settled bool, err error) {
	return sh.shards[0].ClaimPush(ctx, id, owner, lease, doc)
}

// JournaledPushes implements store.Push: on shard 0.
func (sh *Sharded) JournaledPushes(ctx context.Context) ([]store.JournaledPush, error) {
	return sh.shards[0].JournaledPushes(ctx)
}

// RenewPush implements store.Push: on shard 0.
func (sh *Sharded) RenewPush(ctx context.Context, ids []string, lease time.Duration) error {
	return sh.shards[0].RenewPush(ctx, ids, lease)
}

// HandOverPushes implements store.Push: on shard 0.
func (sh *Sharded) HandOverPushes(ctx context.Context, docs [][]byte) error {
	return sh.shards[0].HandOverPushes(ctx, docs)
}

// TakePushes implements store.Push: on shard 0.
func (sh *Sharded) TakePushes(ctx context.Context) ([][]byte, error) {
	return sh.shards[0].TakePushes(ctx)
}

// SettlePush implements store.Push: on shard 0.
func (sh *Sharded) SettlePush(ctx context.Context, id string, keep time.Duration) error {
	return sh.shards[0].SettlePush(ctx, id, keep)
}

// --- agents (shard 0) ---

// AddAgent implements store.Agents.
func (sh *Sharded) AddAgent(ctx context.Context, k chatrelay.AgentKey) error {
	return sh.shards[0].AddAgent(ctx, k)
}

// AgentKeys implements store.Agents.
func (sh *Sharded) AgentKeys(ctx context.Context) ([]chatrelay.AgentKey, error) {
	return sh.shards[0].AgentKeys(ctx)
}

// RevokeAgent implements store.Agents.
func (sh *Sharded) RevokeAgent(ctx context.Context, id string) (chatrelay.AgentKey, error) {
	return sh.shards[0].RevokeAgent(ctx, id)
}

// ResolveAgent implements store.Agents.
func (sh *Sharded) ResolveAgent(ctx context.Context, digest string) (chatrelay.AgentKey, error) {
	return sh.shards[0].ResolveAgent(ctx, digest)
}

// --- attachments ---

// PutAttachment implements store.Attachments on the thread's shard: an
// upload that would start its thread takes its place in the thread limit
// of all shards together (Store.putAttachment).
func (sh *Sharded) PutAttachment(ctx context.Context, thread string, up store.Upload) (chatrelay.Attachment, error) {
	if len(sh.shards) == 1 {
		return sh.shards[0].PutAttachment(ctx, thread, up)
	}
	return sh.of(thread).putAttachment(ctx, thread, up, sh)
}

// OpenAttachment implements store.Attachments.
func (sh *Sharded) OpenAttachment(ctx context.Context, thread, id, reader string) (chatrelay.Attachment, io.ReadSeekCloser, error) {
	return sh.of(thread).OpenAttachment(ctx, thread, id, reader)
}

// --- webhooks ---

// Outbox returns the queue of webhook events of every shard.
func (sh *Sharded) Outbox() store.Outbox {
	sh.outOnce.Do(func() {
		o := &shardedOutbox{}
		for _, s := range sh.shards {
			o.parts = append(o.parts, s.Outbox())
		}
		sh.out = o
	})
	return sh.out
}

// shardedOutbox takes events from every shard's queue, starting with the
// one after where the last Take started, so that no shard waits behind
// another. An event's id is "evt_s<k>-" and the shard's stream entry id.
type shardedOutbox struct {
	parts []store.Outbox
	next  atomic.Uint32
}

// shardToken is a Due's handle: its shard and that shard's handle.
type shardToken struct {
	k     int
	inner any
}

// Take implements store.Outbox.
func (o *shardedOutbox) Take(ctx context.Context, dest string, now time.Time, max int) ([]store.Due, error) {
	var out []store.Due
	var errs error
	start := int(o.next.Add(1))
	for i := range o.parts {
		if len(out) >= max {
			break
		}
		k := (start + i) % len(o.parts)
		got, err := o.parts[k].Take(ctx, dest, now, max-len(out))
		errs = errors.Join(errs, err)
		for _, d := range got {
			// A shard's event id is its stream entry's id, which another
			// shard may give too: the shard makes it unique (webhook-id).
			d.ID = "evt_s" + strconv.Itoa(k) + "-" + strings.TrimPrefix(d.ID, "evt_")
			out = append(out, d.WithToken(shardToken{k, d.Token()}))
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	return nil, errs
}

// Done implements store.Outbox.
func (o *shardedOutbox) Done(ctx context.Context, dest string, d store.Due) error {
	t, ok := d.Token().(shardToken)
	if !ok {
		return fmt.Errorf("redisstore: a webhook event of another queue")
	}
	return o.parts[t.k].Done(ctx, dest, d.WithToken(t.inner))
}

// Retry implements store.Outbox.
func (o *shardedOutbox) Retry(ctx context.Context, dest string, d store.Due, at time.Time) error {
	t, ok := d.Token().(shardToken)
	if !ok {
		return fmt.Errorf("redisstore: a webhook event of another queue")
	}
	return o.parts[t.k].Retry(ctx, dest, d.WithToken(t.inner), at)
}

// The record of the destinations gone (store.Disabler) is a node-wide
// singleton: on shard 0.

var _ store.Disabler = (*shardedOutbox)(nil)

// Disable implements store.Disabler.
func (o *shardedOutbox) Disable(ctx context.Context, dest string) error {
	return o.parts[0].(store.Disabler).Disable(ctx, dest)
}

// Disabled implements store.Disabler.
func (o *shardedOutbox) Disabled(ctx context.Context, dest string) (bool, error) {
	return o.parts[0].(store.Disabler).Disabled(ctx, dest)
}

// Enable implements store.Disabler.
func (o *shardedOutbox) Enable(ctx context.Context, dest string) error {
	return o.parts[0].(store.Disabler).Enable(ctx, dest)
}
