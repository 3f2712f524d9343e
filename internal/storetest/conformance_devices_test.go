package storetest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/testclock"
)

// The devices part of the conformance suite (contract Part 5): a device is
// a grant of the participants record whose role is owner, kept, resolved,
// admitted and seen the same way by every backend.

func makeDevice(t *testing.T, b *Backend, clk *testclock.Clock, thread, name string) (chatrelay.Grant, string, error) {
	t.Helper()
	in := chatrelay.DeviceRequest{Name: name}
	assert.Success(t, in.Check())
	g, token := in.Grant(clk.Now())
	return g, token, participants(t, b).Invite(context.Background(), thread, g)
}

func TestConformanceDevices(t *testing.T) {
	Run(t, func(t *testing.T, backend string) {
		for _, tc := range []struct {
			name string
			run  func(t *testing.T, b *Backend, clk *testclock.Clock)
		}{
			{"a device is kept beside the share links and resolved by its digest from another store", func(t *testing.T, b *Backend, clk *testclock.Clock) {
				ctx := context.Background()
				p := participants(t, b)
				_, _, err := makeDevice(t, b, clk, thA, "early")
				assert.Code(t, err, chatrelay.NotFound)
				appendText(t, b.Store, thA, "", "hello")
				alex, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "Alex"})
				clk.Advance(time.Second)
				phone, tok, err := makeDevice(t, b, clk, thA, "Phone")
				assert.Success(t, err)
				assert.True(t, chatrelay.ValidDeviceToken(tok) && chatrelay.ValidDeviceID(phone.ID), "token %q id %q", tok, phone.ID)

				other := participants(t, b.Another(t, Options{Now: clk.Now}))
				gs, err := other.Grants(ctx, thA)
				assert.Success(t, err)
				assert.Equal(t, "newest first, the device among the grants", []string{gs[0].ID, gs[1].ID}, []string{phone.ID, alex.ID})
				assert.True(t, gs[0].Device() && !gs[1].Device() && gs[0].Digest == chatrelay.DigestOf(tok), "the device as stored: %+v", gs[0])
				thread, g, err := other.Resolve(ctx, chatrelay.DigestOf(tok))
				assert.Success(t, err)
				assert.True(t, thread == thA && g.ID == phone.ID && g.Device(), "resolved %s %+v", thread, g)

				r, err := other.Revoke(ctx, thA, phone.ID)
				assert.Success(t, err)
				_, g, err = p.Resolve(ctx, chatrelay.DigestOf(tok))
				assert.Success(t, err)
				assert.True(t, g.StateAt(clk.Now()) == chatrelay.Revoked && g.RevokedAt == r.RevokedAt, "a revoked device resolves, revoked: %+v", g)
			}},
			{"at most 10 active devices, counted apart from the share links", func(t *testing.T, b *Backend, clk *testclock.Clock) {
				ctx := context.Background()
				p := participants(t, b)
				appendText(t, b.Store, thA, "", "hello")
				for range chatrelay.LimitActiveGrants.Max - 1 {
					invite(t, p, clk, thA, chatrelay.Invite{Name: "n"})
				}
				var first chatrelay.Grant
				for i := range chatrelay.LimitActiveDevices.Max {
					g, _, err := makeDevice(t, b, clk, thA, "d")
					assert.Success(t, err)
					if i == 0 {
						first = g
					}
				}
				before, err := p.Grants(ctx, thA)
				assert.Success(t, err)
				_, _, err = makeDevice(t, b, clk, thA, "one more")
				assert.Code(t, err, chatrelay.DeviceLimit)
				after, err := p.Grants(ctx, thA)
				assert.Success(t, err)
				assert.Equal(t, "the refused device left nothing", len(after), len(before))
				invite(t, p, clk, thA, chatrelay.Invite{Name: "the 50th share link"})
				_, err = p.Revoke(ctx, thA, first.ID)
				assert.Success(t, err)
				_, _, err = makeDevice(t, b, clk, thA, "one more")
				assert.Success(t, err)
			}},
			{"Seen: the first use once, last_seen moves forward only", func(t *testing.T, b *Backend, clk *testclock.Clock) {
				ctx := context.Background()
				p := participants(t, b)
				appendText(t, b.Store, thA, "", "hello")
				phone, _, err := makeDevice(t, b, clk, thA, "Phone")
				assert.Success(t, err)
				at := clk.Now().UnixMilli()
				first, err := p.Seen(ctx, thA, phone.ID, at)
				assert.Success(t, err)
				assert.True(t, first, "the first request is the first use")
				first, err = p.Seen(ctx, thA, phone.ID, at+60_000)
				assert.Success(t, err)
				assert.True(t, !first, "a later request is not")
				first, err = p.Seen(ctx, thA, phone.ID, at) // late: changes nothing
				assert.Success(t, err)
				assert.True(t, !first, "an older request is not")
				g, err := participants(t, b.Another(t, Options{Now: clk.Now})).Grant(ctx, thA, phone.ID)
				assert.Success(t, err)
				assert.True(t, g.Used && g.LastSeen == at+60_000, "stored %+v", g)
				assert.Equal(t, "the device object", g.DeviceObject(clk.Now()).LastSeen, at+60_000)
				first, err = p.Seen(ctx, thA, "d_ffffffff", at)
				assert.True(t, err == nil && !first, "an unknown device changes nothing: %v", err)
			}},
			{"of concurrent callers from several stores, one is the first use, one notes the expiry", func(t *testing.T, b *Backend, clk *testclock.Clock) {
				ctx := context.Background()
				appendText(t, b.Store, thA, "", "hello")
				phone, _, err := makeDevice(t, b, clk, thA, "Phone")
				assert.Success(t, err)
				alex, _ := invite(t, participants(t, b), clk, thA, chatrelay.Invite{Name: "Alex"})
				const callers = 8
				stores := make([]interface {
					Seen(context.Context, string, string, int64) (bool, error)
					MarkUsed(context.Context, string, string) (bool, error)
					NoteExpired(context.Context, string, string) (bool, error)
				}, callers)
				for i := range stores {
					stores[i] = participants(t, b.Another(t, Options{Now: clk.Now}))
				}
				for _, call := range []struct {
					name string
					fn   func(i int) (bool, error)
				}{
					{"Seen", func(i int) (bool, error) { return stores[i].Seen(ctx, thA, phone.ID, clk.Now().UnixMilli()+int64(i)) }},
					{"MarkUsed", func(i int) (bool, error) { return stores[i].MarkUsed(ctx, thA, alex.ID) }},
					{"NoteExpired", func(i int) (bool, error) { return stores[i].NoteExpired(ctx, thA, phone.ID) }},
				} {
					var firsts atomic.Int32
					var wg sync.WaitGroup
					for i := range callers {
						wg.Go(func() {
							first, err := call.fn(i)
							if err != nil {
								t.Errorf("%s: %v", call.name, err)
							}
							if first {
								firsts.Add(1)
							}
						})
					}
					wg.Wait()
					assert.Equal(t, call.name+": the callers told they were first", firsts.Load(), int32(1))
				}
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				clk := testclock.New(t0)
				tc.run(t, Open(t, backend, Options{Now: clk.Now}), clk)
			})
		}
	})
}
