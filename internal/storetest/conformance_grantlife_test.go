package storetest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
)

// stored is what the backend holds of a thread's participants, raw: the
// file store's record file, or on Redis the grants hash and the grant
// index, as text.
func (b *Backend) stored(t *testing.T, thread string) string {
	t.Helper()
	if IsRedis(b.Name) {
		c := b.ThreadClient(t, thread)
		ctx := context.Background()
		var out strings.Builder
		p := b.KeyPrefix(thread)
		for _, key := range []string{p + "{" + thread + "}:grants", p + "grant-index"} {
			fields, err := c.HGetAll(ctx, key).Result()
			assert.Success(t, err)
			for f, v := range fields {
				out.WriteString(f + "=" + v + "\n")
			}
		}
		return out.String()
	}
	data, err := os.ReadFile(filepath.Join(b.Dir, "chat", thread+".participants.json"))
	assert.Success(t, err)
	return string(data)
}

func grantIDs(t *testing.T, p store.Participants, thread string) []string {
	t.Helper()
	gs, err := p.Grants(context.Background(), thread)
	assert.Success(t, err)
	ids := make([]string, 0, len(gs))
	for _, g := range gs {
		ids = append(ids, g.ID)
	}
	return ids
}

// TestConformanceGrantLife: a revoked or expired grant stays listed for
// 30 days after it ended, then is dropped from the participants record
// (its token is then unknown, and the next write removes it from what is
// stored), while the audit keeps its events; a thread keeps at most 100
// ended grants; and a thread makes at most 60 grants in any hour, revoked
// ones counted.
func TestConformanceGrantLife(t *testing.T) {
	Run(t, func(t *testing.T, backend string) {
		for _, tc := range []struct {
			name string
			run  func(t *testing.T, b *Backend, clk *testclock.Clock)
		}{
			{"ended grants are listed for 30 days, then dropped", func(t *testing.T, b *Backend, clk *testclock.Clock) {
				ctx := context.Background()
				appendText(t, b.Store, thA, "", "hello")
				p := participants(t, b)
				alex, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "Alex", ExpiresIn: time.Hour})
				bo, boTok := invite(t, p, clk, thA, chatrelay.Invite{Name: "Bo"})
				assert.Success(t, p.Audit(ctx, thA, chatrelay.AuditEvent{At: clk.Now().UnixMilli(), Event: chatrelay.AuditIssued, Participant: bo.ID}))
				clk.Advance(time.Minute)
				_, err := p.Revoke(ctx, thA, bo.ID)
				assert.Success(t, err)
				revoked := clk.Now()

				clk.Set(revoked.Add(29 * 24 * time.Hour))
				appendText(t, b.Store, thA, "", "still here")
				cy, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "Cy"})

				// 30 days after the revoke, to the millisecond: still listed.
				clk.Set(revoked.Add(time.Duration(chatrelay.LimitEndedListed.Max) * time.Second))
				assert.Equal(t, "listed on the 30th day", grantIDs(t, p, thA), []string{cy.ID, bo.ID, alex.ID})
				_, g, err := p.Resolve(ctx, chatrelay.DigestOf(boTok))
				assert.Success(t, err)
				assert.Equal(t, "the revoked grant resolves, revoked", g.StateAt(clk.Now()), chatrelay.Revoked)

				// Then it is gone: from the list, and its token is unknown.
				clk.Advance(time.Millisecond)
				assert.Equal(t, "listed after 30 days", grantIDs(t, p, thA), []string{cy.ID, alex.ID})
				_, _, err = p.Resolve(ctx, chatrelay.DigestOf(boTok))
				assert.Code(t, err, chatrelay.Unauthorized)
				_, _, err = participants(t, b.Another(t, Options{Now: clk.Now})).Resolve(ctx, chatrelay.DigestOf(boTok))
				assert.Code(t, err, chatrelay.Unauthorized)
				_, err = p.Grant(ctx, thA, bo.ID)
				assert.Code(t, err, chatrelay.NotFound)

				// The next write of the record drops it from what is stored.
				_, err = p.MarkUsed(ctx, thA, cy.ID)
				assert.Success(t, err)
				raw := b.stored(t, thA)
				assert.True(t, !strings.Contains(raw, bo.ID) && !strings.Contains(raw, bo.Digest[:16]), "the dropped grant is still stored:\n%s", raw)
				assert.True(t, strings.Contains(raw, alex.ID) && strings.Contains(raw, cy.Digest[:16]), "a kept grant is not stored:\n%s", raw)
				assert.Equal(t, "listed after the write", grantIDs(t, p, thA), []string{cy.ID, alex.ID})

				// The expired one goes 30 days after its expiry; the active one stays.
				clk.Set(time.UnixMilli(alex.ExpiresAt).Add(time.Duration(chatrelay.LimitEndedListed.Max)*time.Second + time.Millisecond))
				assert.Equal(t, "listed 30 days after the expiry", grantIDs(t, p, thA), []string{cy.ID})

				// The audit keeps its own history.
				evs, err := p.AuditLog(ctx, thA)
				assert.Success(t, err)
				assert.True(t, len(evs) == 1 && evs[0].Participant == bo.ID, "audit %+v", evs)
			}},
			{"at most 100 ended grants are kept, the newest ended", func(t *testing.T, b *Backend, clk *testclock.Clock) {
				appendText(t, b.Store, thA, "", "hello")
				p := participants(t, b)
				var batches [][]string
				for _, n := range []int{chatrelay.LimitActiveGrants.Max, chatrelay.LimitActiveGrants.Max, 10} {
					var ids []string
					for range n {
						g, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "n", ExpiresIn: time.Hour})
						ids = append(ids, g.ID)
					}
					batches = append(batches, ids)
					clk.Advance(time.Hour + time.Minute) // all expired, out of the invite window
				}
				ids := grantIDs(t, p, thA)
				assert.Equal(t, "grants kept", len(ids), chatrelay.LimitEndedKept.Max)
				for _, id := range append(batches[1], batches[2]...) {
					assert.True(t, strings.Contains(strings.Join(ids, " "), id), "a grant of the newer batches was dropped: %s", id)
				}
				// An active grant is never dropped to make room.
				appendText(t, b.Store, thA, "", "again")
				g, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "active"})
				ids = grantIDs(t, p, thA)
				assert.True(t, len(ids) == chatrelay.LimitEndedKept.Max+1 && ids[0] == g.ID, "with an active grant: %d, newest %s", len(ids), ids[0])
			}},
			{"at most 60 invites per thread in any hour, revoked ones counted", func(t *testing.T, b *Backend, clk *testclock.Clock) {
				ctx := context.Background()
				appendText(t, b.Store, thA, "", "hello")
				p := participants(t, b)
				var first []chatrelay.Grant
				for i := range chatrelay.LimitInvites.Max {
					if i == chatrelay.LimitActiveGrants.Max { // make room among the active ones
						for _, g := range first[:chatrelay.LimitInvites.Max-chatrelay.LimitActiveGrants.Max] {
							_, err := p.Revoke(ctx, thA, g.ID)
							assert.Success(t, err)
						}
					}
					g, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "n"})
					first = append(first, g)
					clk.Advance(time.Second)
				}
				_, err := p.Revoke(ctx, thA, first[len(first)-1].ID)
				assert.Success(t, err)
				g, _ := chatrelay.Invite{Name: "one more", Role: chatrelay.Viewer, Kind: chatrelay.Human, ExpiresIn: time.Hour, Cap: 1}.Grant(clk.Now())
				err = p.Invite(ctx, thA, g)
				assert.Code(t, err, chatrelay.RateLimited)
				he := err.(*chatrelay.Error)
				// Room again when the first invite leaves the window.
				want := time.UnixMilli(first[0].CreatedAt).Add(chatrelay.InviteWindow).Sub(clk.Now())
				assert.Equal(t, "retry", he.Retry, want)
				assert.Equal(t, "nothing stored", len(grantIDs(t, p, thA)), chatrelay.LimitInvites.Max)
				clk.Advance(he.Retry - time.Millisecond)
				assert.Code(t, p.Invite(ctx, thA, g), chatrelay.RateLimited)
				clk.Advance(time.Millisecond)
				assert.Success(t, p.Invite(ctx, thA, g))
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
