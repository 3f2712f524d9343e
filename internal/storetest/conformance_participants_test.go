package storetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
)

// The participants part of the conformance suite (contract Part 3).

func participants(t *testing.T, b *Backend) store.Participants {
	t.Helper()
	p, ok := b.Store.(store.Participants)
	if !ok {
		t.Fatalf("the %s store keeps no participants", b.Name)
	}
	return p
}

func invite(t *testing.T, p store.Participants, clk *testclock.Clock, thread string, in chatrelay.Invite) (chatrelay.Grant, string) {
	t.Helper()
	assert.Success(t, in.Check())
	g, token := in.Grant(clk.Now())
	assert.Success(t, p.Invite(context.Background(), thread, g))
	return g, token
}

func TestConformanceParticipants(t *testing.T) {
	Run(t, func(t *testing.T, backend string) {
		for _, tc := range []struct {
			name string
			run  func(t *testing.T, b *Backend, clk *testclock.Clock)
		}{
			{"grants: invite, list newest first, resolve by digest from another store, revoke", func(t *testing.T, b *Backend, clk *testclock.Clock) {
				ctx := context.Background()
				p := participants(t, b)
				assert.Code(t, p.Invite(ctx, thA, chatrelay.Grant{ID: "p_00000000", Digest: chatrelay.DigestOf("x"), ExpiresAt: 1}), chatrelay.NotFound)
				appendText(t, b.Store, thA, "", "hello")
				alex, tokA := invite(t, p, clk, thA, chatrelay.Invite{Name: "Alex", Role: chatrelay.Commenter})
				clk.Advance(time.Second)
				bo, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "Bo", Role: chatrelay.Viewer, Kind: chatrelay.AgentKind})
				gs, err := p.Grants(ctx, thA)
				assert.Success(t, err)
				assert.Equal(t, "newest first", []string{gs[0].ID, gs[1].ID}, []string{bo.ID, alex.ID})
				assert.True(t, chatrelay.ValidShareToken(tokA), "token %q", tokA)
				assert.True(t, gs[1].Digest == chatrelay.DigestOf(tokA) && gs[1].Digest != tokA, "the digest is kept, never the token")

				other := participants(t, b.Another(t, Options{Now: clk.Now}))
				thread, g, err := other.Resolve(ctx, chatrelay.DigestOf(tokA))
				assert.Success(t, err)
				assert.True(t, thread == thA && g.ID == alex.ID, "resolved %s %s", thread, g.ID)
				_, _, err = other.Resolve(ctx, chatrelay.DigestOf("chp_"+"A"))
				assert.Code(t, err, chatrelay.Unauthorized)

				r, err := p.Revoke(ctx, thA, alex.ID)
				assert.Success(t, err)
				assert.Equal(t, "state", r.StateAt(clk.Now()), chatrelay.Revoked)
				again, err := p.Revoke(ctx, thA, alex.ID)
				assert.Success(t, err)
				assert.Equal(t, "revoking again changes nothing", again.RevokedAt, r.RevokedAt)
				_, g, err = other.Resolve(ctx, chatrelay.DigestOf(tokA))
				assert.Success(t, err)
				assert.Equal(t, "a revoked grant resolves, revoked", g.StateAt(clk.Now()), chatrelay.Revoked)
				_, err = p.Revoke(ctx, thA, "p_ffffffff")
				assert.Code(t, err, chatrelay.NotFound)
				clk.Advance(chatrelay.DefaultExpiresIn)
				_, g, err = p.Resolve(ctx, gs[0].Digest)
				assert.Success(t, err)
				assert.Equal(t, "expired", g.StateAt(clk.Now()), chatrelay.Lapsed)
			}},
			{"at most 50 active grants; revoked ones make room", func(t *testing.T, b *Backend, clk *testclock.Clock) {
				appendText(t, b.Store, thA, "", "hello")
				p := participants(t, b)
				var first chatrelay.Grant
				for i := range chatrelay.LimitActiveGrants.Max {
					g, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "n"})
					if i == 0 {
						first = g
					}
				}
				g, _ := chatrelay.Invite{Name: "one more", Role: chatrelay.Viewer, Kind: chatrelay.Human, ExpiresIn: time.Hour, Cap: 1}.Grant(clk.Now())
				assert.Code(t, p.Invite(context.Background(), thA, g), chatrelay.ParticipantLimit)
				_, err := p.Revoke(context.Background(), thA, first.ID)
				assert.Success(t, err)
				assert.Success(t, p.Invite(context.Background(), thA, g))
			}},
			{"a commenter's posts: attributed, three waiting for hermes at most, within the cap", func(t *testing.T, b *Backend, clk *testclock.Clock) {
				ctx := context.Background()
				appendText(t, b.Store, thA, "", "hello")
				p := participants(t, b)
				g, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "Alex", Cap: 5})
				post := func(text, clientID string) (store.Entry, error) {
					return b.Store.Append(ctx, thA, store.NewMessage{Author: g.Author(), AuthorName: g.Name, Text: text, Participant: g.ID, ClientID: clientID})
				}
				e, err := post("one", "c1")
				assert.Success(t, err)
				assert.Equal(t, "author", e.Author, chatrelay.Author("p:"+g.ID))
				assert.Equal(t, "author_name", e.AuthorName, "Alex")
				_, err = post("one", "c1") // a replay counts nowhere
				assert.Success(t, err)
				_, err = post("two", "")
				assert.Success(t, err)
				_, err = post("three", "")
				assert.Success(t, err)
				_, err = post("four", "")
				assert.Code(t, err, chatrelay.TooManyMessages)
				appendText(t, b.Store, thA, chatrelay.Hermes, "answered")
				_, err = post("four", "")
				assert.Success(t, err)
				_, err = post("five", "")
				assert.Success(t, err)
				_, err = post("six", "")
				assert.Code(t, err, chatrelay.CapReached)
				got, err := p.Grant(ctx, thA, g.ID)
				assert.Success(t, err)
				assert.Equal(t, "sent", got.Sent, 5)
				_, err = p.Revoke(ctx, thA, g.ID)
				assert.Success(t, err)
				_, err = b.Store.Append(ctx, thA, store.NewMessage{Author: g.Author(), Text: "after", Participant: g.ID})
				assert.Code(t, err, chatrelay.TokenRevoked)
			}},
			{"first use is noted once; the audit keeps events oldest first", func(t *testing.T, b *Backend, clk *testclock.Clock) {
				ctx := context.Background()
				appendText(t, b.Store, thA, "", "hello")
				p := participants(t, b)
				g, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "Alex"})
				first, err := p.MarkUsed(ctx, thA, g.ID)
				assert.Success(t, err)
				again, err := p.MarkUsed(ctx, thA, g.ID)
				assert.Success(t, err)
				assert.True(t, first && !again, "first use %v, again %v", first, again)
				for i := range 3 {
					assert.Success(t, p.Audit(ctx, thA, chatrelay.AuditEvent{At: int64(i + 1), Event: chatrelay.AuditRefused, Participant: g.ID, Code: chatrelay.TokenRevoked, IP: "192.0.2.1"}))
				}
				evs, err := p.AuditLog(ctx, thA)
				assert.Success(t, err)
				assert.Equal(t, "events", len(evs), 3)
				assert.Equal(t, "oldest first", evs[0].At, int64(1))
				evs, err = p.AuditLog(ctx, thB)
				assert.Success(t, err)
				assert.Equal(t, "no events", len(evs), 0)
			}},
			{"past its bound the audit drops refusals first", func(t *testing.T, b *Backend, clk *testclock.Clock) {
				// A share link's refused requests (a viewer's posts, a
				// revoked link's) once pushed the owner's lifecycle events
				// out of the newest LimitAuditKept.
				ctx := context.Background()
				appendText(t, b.Store, thA, "", "hello")
				p := participants(t, b)
				alex, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "Alex", Role: chatrelay.Viewer})
				bo, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "Bo"})
				var all []chatrelay.AuditEvent // as appended
				add := func(ev chatrelay.AuditEvent) {
					ev.At = int64(len(all) + 1)
					assert.Success(t, p.Audit(ctx, thA, ev))
					all = append(all, ev)
				}
				add(chatrelay.AuditEvent{Event: chatrelay.AuditIssued, Participant: alex.ID})
				add(chatrelay.AuditEvent{Event: chatrelay.AuditIssued, Participant: bo.ID})
				add(chatrelay.AuditEvent{Event: chatrelay.AuditFirstUse, Participant: alex.ID, IP: "192.0.2.7"})
				add(chatrelay.AuditEvent{Event: chatrelay.AuditRevoked, Participant: bo.ID})
				kept := chatrelay.LimitAuditKept.Max
				refusals := 2*kept + 50 // past twice the bound: the stores trim what they hold
				for i := range refusals {
					if i == kept/2 { // a lifecycle event among the refusals
						add(chatrelay.AuditEvent{Event: "device_issued", Device: "d_00000001"})
					}
					add(chatrelay.AuditEvent{Event: chatrelay.AuditRefused, Participant: alex.ID, Code: chatrelay.NotPermitted, IP: "192.0.2.8"})
				}
				// want is the events that are not refusals, and the newest
				// refusals up to the bound, in their order.
				want := func() []chatrelay.AuditEvent {
					others := 0
					for _, ev := range all {
						if ev.Event != chatrelay.AuditRefused {
							others++
						}
					}
					skip := len(all) - kept // the oldest refusals, then the oldest others
					var w []chatrelay.AuditEvent
					for _, ev := range all {
						if skip > 0 && (ev.Event == chatrelay.AuditRefused || others > kept) {
							if ev.Event != chatrelay.AuditRefused {
								others--
							}
							skip--
							continue
						}
						w = append(w, ev)
					}
					return w
				}
				check := func(what string) {
					t.Helper()
					for _, q := range []store.Participants{p, participants(t, b.Another(t, Options{Now: clk.Now}))} {
						evs, err := q.AuditLog(ctx, thA)
						assert.Success(t, err)
						assert.True(t, len(evs) <= kept, "%s: %d events kept", what, len(evs))
						assert.True(t, slices.IsSortedFunc(evs, func(a, b chatrelay.AuditEvent) int { return int(a.At - b.At) }), "%s: not oldest first", what)
						if !slices.Equal(evs, want()) { // a summary: the whole would be 1 000 events
							t.Fatalf("%s: the audit is %s, want %s", what, auditSummary(evs), auditSummary(want()))
						}
					}
				}
				check("after a flood of refusals")
				evs, _ := p.AuditLog(ctx, thA)
				assert.Equal(t, "the lifecycle events", []string{evs[0].Event, evs[1].Event, evs[2].Event + " " + evs[2].IP, evs[3].Event},
					[]string{"issued", "issued", "first_use 192.0.2.7", "revoked"})
				assert.Equal(t, "the newest refusal", evs[len(evs)-1].At, all[len(all)-1].At)

				// Only once no refusal is left do the oldest other events go.
				for range kept {
					add(chatrelay.AuditEvent{Event: chatrelay.AuditIssued, Participant: bo.ID})
				}
				check("after more events than the bound")
			}},
			{"a record that does not parse fails closed and is never written over", func(t *testing.T, b *Backend, clk *testclock.Clock) {
				ctx := context.Background()
				appendText(t, b.Store, thA, "", "hello")
				p := participants(t, b)
				g, tok := invite(t, p, clk, thA, chatrelay.Invite{Name: "Alex"})
				raw := b.CorruptParticipants(t, thA, g.ID)
				bad := raw()
				_, _, err := participants(t, b.Another(t, Options{Now: clk.Now})).Resolve(ctx, chatrelay.DigestOf(tok))
				assert.Code(t, err, chatrelay.Unauthorized)
				_, err = p.Grants(ctx, thA)
				assert.Code(t, err, chatrelay.ParticipantsUnreadable)
				g2, _ := chatrelay.Invite{Name: "Bo", Role: chatrelay.Viewer, Kind: chatrelay.Human, ExpiresIn: time.Hour, Cap: 1}.Grant(clk.Now())
				assert.Code(t, p.Invite(ctx, thA, g2), chatrelay.ParticipantsUnreadable)
				_, err = p.Revoke(ctx, thA, g.ID)
				assert.Code(t, err, chatrelay.ParticipantsUnreadable)
				_, err = b.Store.Append(ctx, thA, store.NewMessage{Author: g.Author(), Text: "x", Participant: g.ID})
				assert.Code(t, err, chatrelay.ParticipantsUnreadable)
				appendText(t, b.Store, thA, chatrelay.Hermes, "the owner and hermes keep working")
				assert.Equal(t, "the record's bytes", string(raw()), string(bad))
			}},
			{"the sweep that removes a thread removes its grants and audit", func(t *testing.T, b *Backend, clk *testclock.Clock) {
				ctx := context.Background()
				appendText(t, b.Store, thA, "", "hello")
				p := participants(t, b)
				g, tok := invite(t, p, clk, thA, chatrelay.Invite{Name: "Alex"})
				assert.Success(t, p.Audit(ctx, thA, chatrelay.AuditEvent{At: 1, Event: chatrelay.AuditIssued, Participant: g.ID}))
				clk.Advance(chatrelay.DefaultRetainAge + time.Hour)
				_, err := b.Store.Sweep(ctx)
				assert.Success(t, err)
				_, _, err = p.Resolve(ctx, chatrelay.DigestOf(tok))
				assert.Code(t, err, chatrelay.Unauthorized)
				gs, err := p.Grants(ctx, thA)
				assert.Success(t, err)
				assert.Equal(t, "grants", len(gs), 0)
				evs, err := p.AuditLog(ctx, thA)
				assert.Success(t, err)
				assert.Equal(t, "audit", len(evs), 0)
				if b.Name == File {
					left, _ := filepath.Glob(filepath.Join(b.Dir, "chat", thA+"*"))
					assert.True(t, !slices.ContainsFunc(left, func(p string) bool {
						return filepath.Ext(p) != ".lock"
					}), "files left: %v", left)
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

// auditSummary is a short account of an audit: its length, its events
// that are not refusals (at:event), and the range of its refusals.
func auditSummary(evs []chatrelay.AuditEvent) string {
	var others []string
	var refused []int64
	for _, ev := range evs {
		if ev.Event == chatrelay.AuditRefused {
			refused = append(refused, ev.At)
		} else {
			others = append(others, fmt.Sprintf("%d:%s", ev.At, ev.Event))
		}
	}
	if len(others) > 8 {
		others = append(others[:4:4], "…", others[len(others)-1])
	}
	s := fmt.Sprintf("%d events, %d others %v, %d refusals", len(evs), len(evs)-len(refused), others, len(refused))
	if len(refused) > 0 {
		s += fmt.Sprintf(" (at %d … %d)", refused[0], refused[len(refused)-1])
	}
	return s
}

// TestParticipantFilesArePrivate: the file store's participants record and
// audit are mode 0600.
func TestParticipantFilesArePrivate(t *testing.T) {
	clk := testclock.New(t0)
	b := Open(t, File, Options{Now: clk.Now})
	appendText(t, b.Store, thA, "", "hello")
	p := participants(t, b)
	g, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "Alex"})
	assert.Success(t, p.Audit(context.Background(), thA, chatrelay.AuditEvent{At: 1, Event: chatrelay.AuditIssued, Participant: g.ID}))
	for _, name := range []string{thA + ".participants.json", thA + ".audit.jsonl"} {
		fi, err := os.Stat(filepath.Join(b.Dir, "chat", name))
		assert.Success(t, err)
		assert.Equal(t, name+" mode", fi.Mode().Perm(), os.FileMode(0o600))
	}
}
