package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
)

// The attachments part of the conformance suite (contract Part 5).

func upload(st store.Store, thread, name string, body []byte) (chatrelay.Attachment, error) {
	// Max: a file may be as large as a thread's limit here (the file's own is a server's).
	return st.(store.Attachments).PutAttachment(context.Background(), thread, store.Upload{Name: name, Type: "text/plain", Body: bytes.NewReader(body), Max: int64(chatrelay.LimitThreadAttachments.Max)})
}

// assertUnusable: err is a post's refusal of id, an attachment id that is
// not an unused upload of the thread, in the same words on every store
// (the file store said "no upload … in this conversation" or "… is on a
// message already", Redis "… is not an unused upload of this
// conversation", for the same post).
func assertUnusable(t *testing.T, err error, id string) {
	t.Helper()
	assert.Code(t, err, chatrelay.InvalidAttachment)
	assert.Equal(t, "the refusal's words", err.(*chatrelay.Error).Message, chatrelay.UnusableAttachment(id).Message)
}

func mustUpload(t *testing.T, st store.Store, thread, name string, body []byte) chatrelay.Attachment {
	t.Helper()
	a, err := upload(st, thread, name, body)
	assert.Success(t, err)
	return a
}

// download reads an attachment's bytes whole (NotFound: nil and the error).
func download(t *testing.T, st store.Store, thread, id string) ([]byte, error) {
	t.Helper()
	_, f, err := st.(store.Attachments).OpenAttachment(context.Background(), thread, id, "")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	assert.Success(t, err)
	return b, nil
}

func postWith(st store.Store, thread, text string, ids ...string) (store.Entry, error) {
	return st.Append(context.Background(), thread, store.NewMessage{Text: text, Attachments: ids})
}

// readFunc is a reader of no bytes that runs fn when it is read.
type readFunc func()

func (f readFunc) Read([]byte) (int, error) { f(); return 0, io.EOF }

func digest(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// pngOf is a w×h PNG.
func pngOf(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	img.Set(0, 0, color.RGBA{255, 0, 0, 255})
	var b bytes.Buffer
	assert.Success(t, png.Encode(&b, img))
	return b.Bytes()
}

func TestConformanceAttachments(t *testing.T) {
	Run(t, func(t *testing.T, backend string) {
		for _, tc := range []struct {
			name string
			opt  Options
			run  func(t *testing.T, b *Backend, clk *testclock.Clock)
		}{
			{"an upload is stored as sent, named by a post, carried by its v2 object and told in its v1 text", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				body := []byte("log line 1\nlog line 2\n")
				a := mustUpload(t, b.Store, thA, "build\n<log>.txt", body)
				assert.True(t, chatrelay.AttachmentIDPattern.MatchString(a.ID), "id %q", a.ID)
				assert.Equal(t, "name, cleaned", a.Name, "build log.txt")
				assert.Equal(t, "size", a.Size, int64(len(body)))
				assert.Equal(t, "sha256", a.SHA256, digest(body))
				got, err := download(t, b.Store, thA, a.ID)
				assert.Success(t, err)
				assert.Equal(t, "bytes", string(got), string(body))

				e, err := postWith(b.Store, thA, "", a.ID)
				assert.Success(t, err)
				assert.Equal(t, "attachments", len(e.Attachments), 1)
				p, err := b.Store.Changes(context.Background(), thA, 0, 0)
				assert.Success(t, err)
				assert.True(t, bytes.Contains(p.Messages[0].JSON2, []byte(`"attachments":[{"id":"`+a.ID+`","name":"build log.txt","type":"text/plain","size":22,"sha256":"`+a.SHA256+`"}]`)), "v2 object %s", p.Messages[0].JSON2)
				v1 := since(t, b.Store, thA, 0, chatrelay.PollPage)
				assert.True(t, bytes.Contains(v1.Messages[0].JSON, []byte(`"text":"[attachment: build log.txt (22 B)]"`)), "v1 object %s", v1.Messages[0].JSON)
				assert.True(t, !bytes.Contains(v1.Messages[0].JSON, []byte(`"attachments"`)), "v1 object carries a v2 field: %s", v1.Messages[0].JSON)
			}},
			{"an upload's type is kept only if it names one concrete media type: a wildcard or a malformed one is application/octet-stream", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				// A probe's upload with Content-Type */* was stored and
				// answered "type":"*/*": a range of types (an Accept
				// header's), which no file is.
				for _, c := range []struct{ sent, kept string }{
					{"*/*", "application/octet-stream"},
					{"image/*", "application/octet-stream"},
					{"*/png", "application/octet-stream"},
					{"-x/y", "application/octet-stream"},
					{"text/.plain", "application/octet-stream"},
					{"text/plain/x", "application/octet-stream"},
					{"", "application/octet-stream"},
					{"Image/PNG; charset=x", "image/png"},
					{"application/vnd.api+json", "application/vnd.api+json"},
					{"text/x-c++src", "text/x-c++src"},
				} {
					st := b.Store.(store.Attachments)
					a, err := st.PutAttachment(context.Background(), thA, store.Upload{Name: "f", Type: c.sent, Body: strings.NewReader("x"), Max: 10})
					assert.Success(t, err)
					assert.Equal(t, fmt.Sprintf("type answered for %q", c.sent), a.Type, c.kept)
					stored, f, err := st.OpenAttachment(context.Background(), thA, a.ID, "")
					assert.Success(t, err)
					f.Close()
					assert.Equal(t, fmt.Sprintf("type stored for %q", c.sent), stored.Type, c.kept)
				}
			}},
			{"a change keeps a message's v2 text as posted: the attachments' lines are its v1 text's only", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				// An outside probe reacted to a message with a file on
				// Redis: its v2 text then carried the v1 line
				// "[attachment: NAME (SIZE)]" beside its attachments (the
				// page showed the file twice), and a participant saw that
				// line cut by redaction.
				a := mustUpload(t, b.Store, thA, "token=abc.diff", []byte("diff"))
				e, err := postWith(b.Store, thA, "see attached", a.ID)
				assert.Success(t, err)
				for _, emoji := range []string{"👍", "👀"} {
					r, err := change(b.Store, thA, store.Change{Op: store.React, MessageID: e.ID, Emoji: emoji, By: chatrelay.Operator})
					assert.Success(t, err)
					assert.Equal(t, "the change's answer: text after "+emoji, r.Text, "see attached")
					assert.True(t, bytes.Contains(r.JSON2, []byte(`"text":"see attached","rev":`)), "the change's v2 object after %s: %s", emoji, r.JSON2)
				}
				p, err := b.Store.Changes(context.Background(), thA, 0, 0)
				assert.Success(t, err)
				got := p.Messages[len(p.Messages)-1]
				assert.True(t, bytes.Contains(got.JSON2, []byte(`"text":"see attached","rev":`)) && bytes.Contains(got.JSON2, []byte(`"attachments":[{"id":"`+a.ID)), "v2 object read back: %s", got.JSON2)
				v1 := since(t, b.Store, thA, 0, chatrelay.PollPage)
				assert.True(t, bytes.Contains(v1.Messages[len(v1.Messages)-1].JSON, []byte(`"text":"see attached\n[attachment: token=abc.diff (4 B)]"}`)), "v1 object %s", v1.Messages[len(v1.Messages)-1].JSON)
			}},
			{"an empty file is an attachment of 0 bytes", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				a := mustUpload(t, b.Store, thA, "empty", nil)
				assert.Equal(t, "size", a.Size, int64(0))
				assert.Equal(t, "sha256", a.SHA256, digest(nil))
				got, err := download(t, b.Store, thA, a.ID)
				assert.Success(t, err)
				assert.Equal(t, "bytes", len(got), 0)
				_, err = postWith(b.Store, thA, "", a.ID)
				assert.Success(t, err)
				assertNothingStaged(t, b, thA, 1)
			}},
			{"an image's size is read from its header", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				a := mustUpload(t, b.Store, thA, "shot.png", pngOf(t, 7, 3))
				assert.Equal(t, "width×height", [2]int{a.Width, a.Height}, [2]int{7, 3})
			}},
			{"an id is named once, in its own thread only; unknown ids are refused", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				a := mustUpload(t, b.Store, thA, "a.txt", []byte("a"))
				_, err := postWith(b.Store, thB, "elsewhere", a.ID)
				assertUnusable(t, err, a.ID)
				_, err = download(t, b.Store, thB, a.ID)
				assert.Code(t, err, chatrelay.NotFound)
				_, err = postWith(b.Store, thA, "", "at_000000000000")
				assertUnusable(t, err, "at_000000000000")
				for _, ref := range [][2]string{{thA, "at_000000000000"}, {thA, "../" + a.ID}, {"../" + thA, a.ID}, {"", a.ID}} {
					_, err = download(t, b.Store, ref[0], ref[1])
					assert.Code(t, err, chatrelay.NotFound) // unknown or malformed, alike
				}
				_, err = postWith(b.Store, thA, "first", a.ID)
				assert.Success(t, err)
				_, err = postWith(b.Store, thA, "again", a.ID)
				assertUnusable(t, err, a.ID)
				p := since(t, b.Store, thA, 0, 0)
				assert.Equal(t, "messages stored", len(p.Messages), 1)
			}},
			{"a post naming a used upload and an unknown one names the first of the two in the post's order, on every store", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				a := mustUpload(t, b.Store, thA, "a.txt", []byte("a"))
				_, err := postWith(b.Store, thA, "first", a.ID)
				assert.Success(t, err)
				const unknown = "at_000000000000"
				for _, ids := range [][]string{{a.ID, unknown}, {unknown, a.ID}} {
					_, err = postWith(b.Store, thA, "both", ids...)
					assert.Code(t, err, chatrelay.InvalidAttachment)
					msg := err.(*chatrelay.Error).Message
					assert.True(t, strings.Contains(msg, ids[0]) && !strings.Contains(msg, ids[1]), "a post naming %v: %q, want the first of them named", ids, msg)
				}
				p := since(t, b.Store, thA, 0, 0)
				assert.Equal(t, "messages stored", len(p.Messages), 1)
			}},
			{"10 attachments on a message are taken, 11 refused", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				var ids []string
				for i := range 11 {
					ids = append(ids, mustUpload(t, b.Store, thA, "f.txt", []byte{byte(i)}).ID)
				}
				_, err := postWith(b.Store, thA, "too many", ids...)
				assert.Code(t, err, chatrelay.TooManyAttachments)
				e, err := postWith(b.Store, thA, "ten", ids[:10]...)
				assert.Success(t, err)
				assert.Equal(t, "attachments", len(e.Attachments), 10)
			}},
			{"a file of the most bytes is taken, one byte more refused and nothing kept", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				st := b.Store.(store.Attachments)
				_, err := st.PutAttachment(context.Background(), thA, store.Upload{Name: "max", Body: bytes.NewReader(make([]byte, 1000)), Max: 1000})
				assert.Success(t, err)
				_, err = st.PutAttachment(context.Background(), thA, store.Upload{Name: "over", Body: bytes.NewReader(make([]byte, 1001)), Max: 1000})
				assert.Code(t, err, chatrelay.AttachmentTooLarge)
				assertNothingStaged(t, b, thA, 1)
			}},
			{"identical bytes are stored once per thread and count once toward its limit", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				big := bytes.Repeat([]byte{1}, chatrelay.LimitThreadAttachments.Max/2+1)
				a1 := mustUpload(t, b.Store, thA, "one", big)
				a2 := mustUpload(t, b.Store, thA, "two", big) // the same bytes: no more room taken
				assert.True(t, a1.ID != a2.ID, "two uploads, two ids")
				assertNothingStaged(t, b, thA, 1)
				other := bytes.Repeat([]byte{2}, chatrelay.LimitThreadAttachments.Max/2+1)
				_, err := upload(b.Store, thA, "three", other)
				assert.Code(t, err, chatrelay.AttachmentTooLarge)
				assertNothingStaged(t, b, thA, 1)
				rest := bytes.Repeat([]byte{3}, chatrelay.LimitThreadAttachments.Max-len(big)) // to the byte
				mustUpload(t, b.Store, thA, "rest", rest)
			}},
			{"a participant's upload counts toward the thread's limit the bytes it may not read as new", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				// An outside probe: identical bytes count once, so a
				// commenter that filled the thread's 100 MiB to the byte
				// had an upload of a guessed file taken (201) when the
				// owner's draft, which it may not read (404), held those
				// very bytes, and refused (413) otherwise: the answer told
				// it what the draft holds. Bytes it may not read count as
				// new for it: the same 413 whatever the draft holds.
				const p = "p_0000000a"
				put := func(by, name string, body []byte) (chatrelay.Attachment, error) {
					return b.Store.(store.Attachments).PutAttachment(context.Background(), thA, store.Upload{Name: name, Type: "text/plain",
						Body: bytes.NewReader(body), Max: int64(chatrelay.LimitThreadAttachments.Max), By: by})
				}
				draft := []byte("the owner's draft")
				d := mustUpload(t, b.Store, thA, "draft.txt", draft)
				fill := mustUpload(t, b.Store, thA, "fill", bytes.Repeat([]byte{4}, chatrelay.LimitThreadAttachments.Max-len(draft))) // to the byte
				_, err := postWith(b.Store, thA, "the fill, shown", fill.ID)
				assert.Success(t, err)
				// For p the thread holds the fill alone (the draft is
				// nothing to it): room for len(draft) new bytes, whatever
				// they are.
				_, err = put(p, "guess.txt", draft)
				assert.Success(t, err)
				_, err = put(p, "other guess.txt", []byte("the owner's drafT"))
				assert.Code(t, err, chatrelay.AttachmentTooLarge)
				_, err = put(p, "again.txt", draft) // its own now: counted once
				assert.Success(t, err)
				assertNothingStaged(t, b, thA, 2)
				_, err = put("", "copy.txt", draft) // the owner's own draft holds them: counted once
				assert.Success(t, err)
				_, err = put("", "small", []byte{5})
				assert.Code(t, err, chatrelay.AttachmentTooLarge)
				_, err = postWith(b.Store, thA, "the draft, shown", d.ID)
				assert.Success(t, err)
				_, err = put(p, "seen.txt", draft) // a message names it: counted once
				assert.Success(t, err)
				_, err = put("p_0000000b", "seen by another.txt", draft) // one with no draft, the thread full: counted once
				assert.Success(t, err)
				_, err = put("p_0000000b", "new to it.txt", []byte("the owner's drafT"))
				assert.Code(t, err, chatrelay.AttachmentTooLarge)
				assertNothingStaged(t, b, thA, 2)
			}},
			{"a participant's uploads are taken or refused as if no other held drafts: the same count, the same bytes", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				// An outside probe: a commenter uploading until refused
				// learned from the 409/413 how many drafts the owner (or
				// another participant) held, and their size, which it may
				// not read. Each uploader is judged on its own drafts and
				// the named files alone.
				appendText(t, b.Store, thA, "", "hello")
				appendText(t, b.Store, thB, "", "hello")
				p := participants(t, b)
				maxDrafts := chatrelay.LimitParticipantPending.Max
				// walk uploads drafts as g until refused: how many it took.
				walk := func(th string, g chatrelay.Grant) int {
					put := grantUpload(b, th, g)
					for n := 0; n <= chatrelay.LimitAttachmentPending.Max; n++ {
						if _, err := put(fmt.Sprintf("d%d", n), []byte(fmt.Sprintf("%s %d", g.ID, n))); err != nil {
							assert.Code(t, err, chatrelay.TooManyAttachments)
							return n
						}
					}
					t.Fatalf("%s took more than %d drafts", g.ID, chatrelay.LimitAttachmentPending.Max)
					return 0
				}
				// thA: the owner holds drafts, one short of the thread's
				// most; thB: none.
				ownerDrafts := chatrelay.LimitAttachmentPending.Max - 1 - maxDrafts
				for i := range ownerDrafts {
					mustUpload(t, b.Store, thA, fmt.Sprintf("o%d", i), []byte(fmt.Sprintf("owner %d", i)))
				}
				alexA, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "Alex", Role: chatrelay.Commenter})
				alexB, _ := invite(t, p, clk, thB, chatrelay.Invite{Name: "Alex", Role: chatrelay.Commenter})
				beside, alone := walk(thA, alexA), walk(thB, alexB)
				assert.Equal(t, "alex's drafts beside the owner's, as alone", beside, alone)
				assert.Equal(t, "alex's drafts", alone, maxDrafts)
				boA, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "Bo", Role: chatrelay.Commenter})
				assert.Equal(t, "bo's drafts beside alex's and the owner's", walk(thA, boA), maxDrafts)
				// The owner is judged on its own drafts alike: beside
				// alex's and bo's, it takes its most, and not one more.
				for i := ownerDrafts; i < chatrelay.LimitAttachmentPending.Max; i++ {
					mustUpload(t, b.Store, thA, fmt.Sprintf("o%d", i), []byte(fmt.Sprintf("owner %d", i)))
				}
				_, err := upload(b.Store, thA, "owner's one more", []byte("one more"))
				assert.Code(t, err, chatrelay.TooManyAttachments)

				// Bytes: the thread holds posted bytes to 15 MiB short of
				// its most; the owner holds 10 MiB of drafts in thC, none
				// in thD. A participant may take the 15 MiB to the byte in
				// both, and not one more.
				const mib = 1 << 20
				for _, th := range []string{thC, thD} {
					posted := mustUpload(t, b.Store, th, "posted", bytes.Repeat([]byte{1}, chatrelay.LimitThreadAttachments.Max-15*mib))
					_, err := postWith(b.Store, th, "posted", posted.ID)
					assert.Success(t, err)
				}
				for i := range 5 {
					mustUpload(t, b.Store, thC, fmt.Sprintf("o%d", i), bytes.Repeat([]byte{byte(10 + i)}, 2*mib))
				}
				for _, th := range []string{thC, thD} {
					cy, _ := invite(t, p, clk, th, chatrelay.Invite{Name: "Cy", Role: chatrelay.Commenter})
					put := grantUpload(b, th, cy)
					_, err := put("ten", bytes.Repeat([]byte{2}, 10*mib))
					assert.Success(t, err)
					_, err = put("five", bytes.Repeat([]byte{3}, 5*mib)) // to the byte
					assert.Success(t, err)
					_, err = put("one more", []byte{4})
					assert.Code(t, err, chatrelay.AttachmentTooLarge)
				}
				// The owner's bytes alike: in thC the posted files and its
				// 10 MiB of drafts leave it 5 MiB, cy's 15 counting for it
				// as nothing.
				_, err = upload(b.Store, thC, "owner's five", bytes.Repeat([]byte{6}, 5*mib)) // to the byte
				assert.Success(t, err)
				_, err = upload(b.Store, thC, "owner's byte", []byte{5})
				assert.Code(t, err, chatrelay.AttachmentTooLarge)
			}},
			{"a participant's drafts hold at most attachment.pending_bytes_per_participant", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				appendText(t, b.Store, thA, "", "hello")
				p := participants(t, b)
				alex, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "Alex", Role: chatrelay.Commenter})
				put := grantUpload(b, thA, alex)
				half := chatrelay.LimitParticipantDraftBytes.Max / 2
				a1, err := put("one", bytes.Repeat([]byte{1}, half))
				assert.Success(t, err)
				_, err = put("two", bytes.Repeat([]byte{2}, chatrelay.LimitParticipantDraftBytes.Max-half)) // to the byte
				assert.Success(t, err)
				_, err = put("one more", []byte{3})
				assert.Code(t, err, chatrelay.AttachmentTooLarge)
				cp, err := put("a copy", bytes.Repeat([]byte{1}, half)) // its own bytes: counted once
				assert.Success(t, err)
				assertNothingStaged(t, b, thA, 2)
				_, err = b.Store.Append(context.Background(), thA, store.NewMessage{Author: alex.Author(), Text: "see", Participant: alex.ID, Attachments: []string{a1.ID, cp.ID}})
				assert.Success(t, err)
				_, err = put("one more", []byte{3}) // posted: no longer a draft's bytes
				assert.Success(t, err)
			}},
			{"the owner's uploads are judged on its own drafts: participants' drafts do not hold them back", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				// Ten commenters holding their most drafts each held the
				// owner's uploads back (409) for up to the drafts' hour:
				// the owner was judged on every draft of the thread.
				appendText(t, b.Store, thA, "", "hello")
				p := participants(t, b)
				for i := range 10 {
					g, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: fmt.Sprintf("Commenter %d", i), Role: chatrelay.Commenter})
					put := grantUpload(b, thA, g)
					for n := range chatrelay.LimitParticipantPending.Max {
						_, err := put(fmt.Sprintf("d%d", n), []byte(fmt.Sprintf("%s %d", g.ID, n)))
						assert.Success(t, err)
					}
				}
				// The owner's drafts, a device's among them, to its most.
				phone, _, err := makeDevice(t, b, clk, thA, "phone")
				assert.Success(t, err)
				_, err = grantUpload(b, thA, phone)("from the phone", []byte("from the phone"))
				assert.Success(t, err)
				for i := 1; i < chatrelay.LimitAttachmentPending.Max; i++ {
					_, err := upload(b.Store, thA, fmt.Sprintf("o%d", i), []byte(fmt.Sprintf("owner %d", i)))
					assert.Success(t, err)
				}
				_, err = upload(b.Store, thA, "one more", []byte("one more"))
				assert.Code(t, err, chatrelay.TooManyAttachments)
				_, err = grantUpload(b, thA, phone)("one more", []byte("one more"))
				assert.Code(t, err, chatrelay.TooManyAttachments)
				assertNothingStaged(t, b, thA, 10*chatrelay.LimitParticipantPending.Max+chatrelay.LimitAttachmentPending.Max)
			}},
			{"the owner's uploads are judged on the named files' bytes and its own drafts': participants' drafts count as nothing", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				// The named files leave 15 MiB of the thread's most; a
				// commenter's drafts take them. The owner was refused (413)
				// one byte: the whole thread counted for it.
				const mib = 1 << 20
				posted := mustUpload(t, b.Store, thA, "posted", bytes.Repeat([]byte{1}, chatrelay.LimitThreadAttachments.Max-15*mib))
				_, err := postWith(b.Store, thA, "posted", posted.ID)
				assert.Success(t, err)
				p := participants(t, b)
				cy, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "Cy", Role: chatrelay.Commenter})
				put := grantUpload(b, thA, cy)
				five := bytes.Repeat([]byte{2}, 5*mib)
				_, err = put("five", five)
				assert.Success(t, err)
				_, err = put("ten", bytes.Repeat([]byte{3}, 10*mib)) // to the byte, for cy
				assert.Success(t, err)
				_, err = put("one more", []byte{4})
				assert.Code(t, err, chatrelay.AttachmentTooLarge)
				// A copy of cy's draft is stored once (the thread holds those
				// bytes), yet counts for the owner as new: they stay the
				// owner's when cy's draft goes. A second copy is its own:
				// counted once.
				_, err = upload(b.Store, thA, "copy of cy's five", five)
				assert.Success(t, err)
				_, err = upload(b.Store, thA, "again", five)
				assert.Success(t, err)
				assertNothingStaged(t, b, thA, 3)
				_, err = upload(b.Store, thA, "ten of the owner's", bytes.Repeat([]byte{5}, 10*mib)) // to the byte, for the owner
				assert.Success(t, err)
				_, err = upload(b.Store, thA, "one more", []byte{6})
				assert.Code(t, err, chatrelay.AttachmentTooLarge)
				assertNothingStaged(t, b, thA, 4)
				// cy's revoke frees nothing for the owner: its drafts were
				// nothing to it, and the copy is the owner's.
				_, err = p.Revoke(context.Background(), thA, cy.ID)
				assert.Success(t, err)
				assertNothingStaged(t, b, thA, 3)
				_, err = upload(b.Store, thA, "one more", []byte{6})
				assert.Code(t, err, chatrelay.AttachmentTooLarge)
			}},
			{"an upload no post names is deleted after an hour; one a post names stays", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				kept := mustUpload(t, b.Store, thA, "kept", []byte("kept"))
				lost := mustUpload(t, b.Store, thA, "lost", []byte("lost"))
				_, err := postWith(b.Store, thA, "with", kept.ID)
				assert.Success(t, err)
				clk.Advance(time.Hour - time.Millisecond)
				_, err = b.Store.Sweep(context.Background())
				assert.Success(t, err)
				_, err = download(t, b.Store, thA, lost.ID)
				assert.Success(t, err)
				clk.Advance(time.Millisecond)
				_, err = postWith(b.Store, thA, "too late", lost.ID)
				assert.Code(t, err, chatrelay.InvalidAttachment)
				_, err = b.Store.Append(context.Background(), thA, store.NewMessage{Text: "too late", ClientID: "late:1", Attachments: []string{lost.ID}})
				assert.Code(t, err, chatrelay.InvalidAttachment) // with a client_id of no message, alike
				_, err = b.Store.Sweep(context.Background())
				assert.Success(t, err)
				_, err = download(t, b.Store, thA, lost.ID)
				assert.Code(t, err, chatrelay.NotFound)
				got, err := download(t, b.Store, thA, kept.ID)
				assert.Success(t, err)
				assert.Equal(t, "kept bytes", string(got), "kept")
				assertNothingStaged(t, b, thA, 1)
			}},
			{"attachments leave with their message (retention)", Options{Retention: chatrelay.Retention{Messages: 1}}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				a := mustUpload(t, b.Store, thA, "a", []byte("bytes of a"))
				_, err := postWith(b.Store, thA, "with a", a.ID)
				assert.Success(t, err)
				appendText(t, b.Store, thA, "", "pushes it out")
				_, err = download(t, b.Store, thA, a.ID)
				assert.Code(t, err, chatrelay.NotFound)
				assertNothingStaged(t, b, thA, 0)
			}},
			{"attachments leave with their thread (sweep)", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				a := mustUpload(t, b.Store, thA, "a", []byte("bytes of a"))
				_, err := postWith(b.Store, thA, "with a", a.ID)
				assert.Success(t, err)
				clk.Advance(chatrelay.DefaultRetainAge + time.Hour)
				_, err = b.Store.Sweep(context.Background())
				assert.Success(t, err)
				_, err = download(t, b.Store, thA, a.ID)
				assert.Code(t, err, chatrelay.NotFound)
				assertNothingStaged(t, b, thA, 0)
			}},
			{"uploads no post named leave with their thread too, so the thread made again cannot show them", Options{Retention: chatrelay.Retention{Age: time.Minute}}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				old := mustUpload(t, b.Store, thA, "old", []byte("bytes of the old conversation"))
				appendText(t, b.Store, thA, "", "the old conversation")
				clk.Advance(2 * time.Minute) // within the upload's hour
				st, err := b.Store.Sweep(context.Background())
				assert.Success(t, err)
				assert.Equal(t, "threads removed", st.ThreadsRemoved, 1)
				assertNothingStaged(t, b, thA, 0)
				appendText(t, b.Store, thA, "", "the thread made again")
				_, err = download(t, b.Store, thA, old.ID)
				assert.Code(t, err, chatrelay.NotFound)
				_, err = postWith(b.Store, thA, "names the old upload", old.ID)
				assert.Code(t, err, chatrelay.InvalidAttachment)
			}},
			{"an upload whose grant is revoked, or whose thread is removed and made again, while its bytes arrive keeps nothing", Options{Retention: chatrelay.Retention{Age: time.Minute}}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				// A participant's upload was taken whole by a link revoked
				// (or a thread removed by the sweep, then made again with
				// the same token) while its bytes arrived: the upload was
				// the new thread's, and its audit event too (lifeprobe).
				appendText(t, b.Store, thA, "", "hello")
				p := participants(t, b)
				alex, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "Alex"})
				st := b.Store.(store.Attachments)
				meanwhile := func(during func()) error {
					_, err := st.PutAttachment(context.Background(), thA, store.Upload{Name: "slow", Grant: alex.ID,
						Body: io.MultiReader(strings.NewReader("the first bytes, "), readFunc(during), strings.NewReader("the rest"))})
					return err
				}
				assert.Success(t, meanwhile(func() {}))
				err := meanwhile(func() { _, err := p.Revoke(context.Background(), thA, alex.ID); assert.Success(t, err) })
				assert.Code(t, err, chatrelay.TokenRevoked)
				assertNothingStaged(t, b, thA, 0) // the first upload, which no message names, went with the revoke

				bo, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "Bo"})
				err = meanwhile(func() {})
				assert.Code(t, err, chatrelay.TokenRevoked)
				_, err = st.PutAttachment(context.Background(), thA, store.Upload{Name: "slow", Grant: bo.ID,
					Body: io.MultiReader(strings.NewReader("the first bytes, "), readFunc(func() {
						clk.Advance(time.Hour + time.Minute) // the thread's messages expire, and the first upload
						_, err := b.Store.Sweep(context.Background())
						assert.Success(t, err)
						appendText(t, b.Store, thA, "", "the thread made again")
					}), strings.NewReader("the rest"))})
				assert.Code(t, err, chatrelay.Unauthorized)
				assertNothingStaged(t, b, thA, 0)
			}},
			{"a revoke removes the uploads of its grant that no message names, with their bytes; those its messages name stay", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				// An outside probe: a commenter filled the thread's 100 MiB,
				// then its 100 pending uploads, with uploads it never
				// posted, and the owner's uploads were refused (413, then
				// 409) for up to an hour, revoked link or not. Its drafts
				// now count for the owner as nothing (the owner takes its
				// own most beside them), and its revoke removes them.
				ctx := context.Background()
				appendText(t, b.Store, thA, "", "hello")
				p := participants(t, b)
				alex, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "Alex", Role: chatrelay.Commenter})
				put := grantUpload(b, thA, alex)
				posted, err := put("posted.txt", []byte("alex's posted file"))
				assert.Success(t, err)
				_, err = b.Store.Append(ctx, thA, store.NewMessage{Author: alex.Author(), Text: "see", Participant: alex.ID, Attachments: []string{posted.ID}})
				assert.Success(t, err)
				owners := mustUpload(t, b.Store, thA, "owner.txt", []byte("the same bytes")) // the owner's draft
				drafts := []string{}
				a, err := put("copy.txt", []byte("the same bytes")) // the owner's bytes: stored once
				assert.Success(t, err)
				drafts = append(drafts, a.ID)
				a, err = put("fill", bytes.Repeat([]byte{7}, chatrelay.LimitParticipantDraftBytes.Max-len("the same bytes")))
				assert.Success(t, err)
				drafts = append(drafts, a.ID)
				for i := len(drafts); i < chatrelay.LimitParticipantPending.Max; i++ { // alex's most drafts
					a, err := put(fmt.Sprintf("junk %d", i), nil)
					assert.Success(t, err)
					drafts = append(drafts, a.ID)
				}
				// The owner's uploads are taken beside alex's drafts, to
				// the thread's most bytes exactly (the named file and its
				// own) and to its most drafts.
				held := int(posted.Size + owners.Size)
				mustUpload(t, b.Store, thA, "rest", bytes.Repeat([]byte{8}, chatrelay.LimitThreadAttachments.Max-held))
				_, err = upload(b.Store, thA, "one more", []byte{9})
				assert.Code(t, err, chatrelay.AttachmentTooLarge)
				var empty chatrelay.Attachment
				for i := 2; i < chatrelay.LimitAttachmentPending.Max; i++ {
					empty = mustUpload(t, b.Store, thA, fmt.Sprintf("empty %d", i), nil)
				}
				_, err = upload(b.Store, thA, "empty.txt", nil)
				assert.Code(t, err, chatrelay.TooManyAttachments)
				assertNothingStaged(t, b, thA, 5) // the posted file's, the owner's drafts' (the empty file's too), alex's fill

				_, err = p.Revoke(ctx, thA, alex.ID)
				assert.Success(t, err)
				for _, id := range drafts {
					_, err := download(t, b.Store, thA, id)
					assert.Code(t, err, chatrelay.NotFound)
				}
				assertNothingStaged(t, b, thA, 4) // the fill's bytes are gone; the bytes the owner's drafts hold stay
				for id, want := range map[string]string{posted.ID: "alex's posted file", owners.ID: "the same bytes"} {
					got, err := download(t, b.Store, thA, id)
					assert.Success(t, err)
					assert.Equal(t, "bytes of "+id, string(got), want)
				}
				// Nothing changed for the owner: its drafts and bytes, at
				// their most, were its own.
				_, err = upload(b.Store, thA, "empty.txt", nil)
				assert.Code(t, err, chatrelay.TooManyAttachments)
				_, err = postWith(b.Store, thA, "an empty file", empty.ID) // a draft less
				assert.Success(t, err)
				_, err = upload(b.Store, thA, "one more", []byte{9})
				assert.Code(t, err, chatrelay.AttachmentTooLarge)
				_, err = p.Revoke(ctx, thA, alex.ID) // again: changes nothing
				assert.Success(t, err)
				assertNothingStaged(t, b, thA, 4)
			}},
			{"uploads racing their grant's revoke: none survives it as a draft", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				appendText(t, b.Store, thA, "", "hello")
				p := participants(t, b)
				alex, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "Alex", Role: chatrelay.Commenter})
				other := b.Another(t, Options{Now: clk.Now})
				before, err := grantUpload(b, thA, alex)("before", []byte("before the revoke"))
				assert.Success(t, err)
				var wg sync.WaitGroup
				var mu sync.Mutex
				taken := []string{before.ID}
				for i := range chatrelay.LimitParticipantPending.Max - 1 { // with before, the most a participant may hold
					wg.Add(1)
					go func() {
						defer wg.Done()
						on := b
						if i%2 == 1 {
							on = other
						}
						if i == 6 {
							_, err := participants(t, on).Revoke(context.Background(), thA, alex.ID)
							assert.Success(t, err)
							return
						}
						a, err := grantUpload(on, thA, alex)(fmt.Sprintf("draft %d", i), []byte(fmt.Sprintf("draft %d", i)))
						if err != nil {
							assert.Code(t, err, chatrelay.TokenRevoked)
							return
						}
						mu.Lock()
						taken = append(taken, a.ID)
						mu.Unlock()
					}()
				}
				wg.Wait()
				for _, id := range taken {
					_, err := download(t, b.Store, thA, id)
					assert.Code(t, err, chatrelay.NotFound)
				}
				assertNothingStaged(t, b, thA, 0)
			}},
			{"a device's revoke and a link's noted expiry remove their uploads that no message names", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				ctx := context.Background()
				appendText(t, b.Store, thA, "", "hello")
				p := participants(t, b)
				bo, _ := invite(t, p, clk, thA, chatrelay.Invite{Name: "Bo", Role: chatrelay.Commenter, ExpiresIn: time.Hour})
				clk.Advance(30 * time.Minute) // (the uploads below are half an hour from their own expiry at bo's)
				phone, _, err := makeDevice(t, b, clk, thA, "phone")
				assert.Success(t, err)
				fromPhone, err := grantUpload(b, thA, phone)("phone draft", []byte("from the phone"))
				assert.Success(t, err)
				postedPhone, err := grantUpload(b, thA, phone)("phone posted", []byte("posted from the phone"))
				assert.Success(t, err)
				_, err = postWith(b.Store, thA, "from the phone", postedPhone.ID)
				assert.Success(t, err)
				fromBo, err := grantUpload(b, thA, bo)("bo draft", []byte("from bo"))
				assert.Success(t, err)
				owners := mustUpload(t, b.Store, thA, "owner draft", []byte("the owner's"))
				assertNothingStaged(t, b, thA, 4)

				_, err = p.Revoke(ctx, thA, phone.ID)
				assert.Success(t, err)
				_, err = download(t, b.Store, thA, fromPhone.ID)
				assert.Code(t, err, chatrelay.NotFound)
				assertNothingStaged(t, b, thA, 3)

				clk.Advance(30 * time.Minute) // bo's link expires: the sweep notes it
				first, err := p.NoteExpired(ctx, thA, bo.ID)
				assert.Success(t, err)
				assert.True(t, first, "the expiry noted first")
				_, err = download(t, b.Store, thA, fromBo.ID)
				assert.Code(t, err, chatrelay.NotFound)
				assertNothingStaged(t, b, thA, 2)
				for _, id := range []string{postedPhone.ID, owners.ID} {
					_, err := download(t, b.Store, thA, id)
					assert.Success(t, err)
				}
			}},
			{"concurrent posts naming one upload: exactly one takes it", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				a := mustUpload(t, b.Store, thA, "a", []byte("once"))
				stores := []store.Store{b.Store, b.Another(t, Options{Now: clk.Now}).Store}
				var wg sync.WaitGroup
				var mu sync.Mutex
				ok, refused := 0, 0
				for i := range 10 {
					wg.Go(func() {
						_, err := postWith(stores[i%2], thA, "take it", a.ID)
						mu.Lock()
						defer mu.Unlock()
						switch chatrelay.CodeOf(err) {
						case "":
							ok++
						case chatrelay.InvalidAttachment:
							refused++
						default:
							t.Errorf("post: %v", err)
						}
					})
				}
				wg.Wait()
				assert.Equal(t, "posts that took it", ok, 1)
				assert.Equal(t, "posts refused", refused, 9)
			}},
			{"a repeat of a post with its client_id is answered again, attachments and all", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				a := mustUpload(t, b.Store, thA, "a", []byte("a"))
				m := store.NewMessage{Text: "see", ClientID: "tab:1", Attachments: []string{a.ID}}
				e1, err := b.Store.Append(context.Background(), thA, m)
				assert.Success(t, err)
				m.Attachments = []string{a.ID}
				e2, err := b.Store.Append(context.Background(), thA, m)
				assert.Success(t, err)
				assert.Equal(t, "replayed", e2.Replayed, true)
				assert.Equal(t, "same message", e2.ID, e1.ID)
			}},
			{"a name empty once cleaned is refused and keeps nothing", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				_, err := upload(b.Store, thA, " <[]>\n", []byte("x"))
				assert.Code(t, err, chatrelay.InvalidAttachment)
				assertNothingStaged(t, b, thA, 0)
			}},
			{"a thread holds at most attachment.pending uploads no message names; one more is refused and keeps nothing", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				max := chatrelay.LimitAttachmentPending.Max
				var ids []string
				for i := range max {
					ids = append(ids, mustUpload(t, b.Store, thA, fmt.Sprintf("copy %d.txt", i), []byte("the same bytes")).ID)
				}
				_, err := upload(b.Store, thA, "new.txt", []byte("bytes the thread does not hold"))
				assert.Code(t, err, chatrelay.TooManyAttachments)
				assertNothingStaged(t, b, thA, 1)
				_, err = upload(b.Store, thA, "copy.txt", []byte("the same bytes"))
				assert.Code(t, err, chatrelay.TooManyAttachments)
				// Each upload still reads as it was; none was added.
				got, err := download(t, b.Store, thA, ids[max-1])
				assert.Success(t, err)
				assert.Equal(t, "bytes", string(got), "the same bytes")

				// Naming some in a post makes room for as many.
				_, err = postWith(b.Store, thA, "", ids[:2]...)
				assert.Success(t, err)
				mustUpload(t, b.Store, thA, "new.txt", []byte("bytes the thread does not hold"))
				mustUpload(t, b.Store, thA, "copy.txt", []byte("the same bytes"))
				_, err = upload(b.Store, thA, "third.txt", []byte("the same bytes"))
				assert.Code(t, err, chatrelay.TooManyAttachments)
				assertNothingStaged(t, b, thA, 2)

				// Uploads past their hour are not pending any more.
				clk.Advance(time.Duration(chatrelay.LimitAttachmentUnused.Max) * time.Second)
				mustUpload(t, b.Store, thA, "later.txt", []byte("later"))
			}},
			{"an upload that starts a thread takes its place in the thread limit until its uploads expire", Options{MaxThreads: 3}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				// A client holding many tokens could keep 100 MiB of
				// uploads in each of as many message-less threads as it
				// liked: the limit counted only threads with a message.
				mustUpload(t, b.Store, thA, "a", []byte("bytes of a"))
				appendText(t, b.Store, thB, "", "b")
				d := mustUpload(t, b.Store, thD, "d", []byte("bytes of d"))
				_, err := b.Store.Append(context.Background(), thC, store.NewMessage{Text: "c"})
				assert.Code(t, err, chatrelay.ThreadLimit)
				_, err = upload(b.Store, thC, "c", []byte("bytes of c"))
				assert.Code(t, err, chatrelay.ThreadLimit)
				assertNothingStaged(t, b, thC, 0)
				// Its own thread takes more uploads, and its first post,
				// which takes no second place.
				mustUpload(t, b.Store, thA, "a2", []byte("more bytes of a"))
				_, err = postWith(b.Store, thD, "with d", d.ID)
				assert.Success(t, err)
				_, err = b.Store.Append(context.Background(), thC, store.NewMessage{Text: "c"})
				assert.Code(t, err, chatrelay.ThreadLimit)

				// A thread of uploads alone leaves the limit when they
				// expire, not before.
				_, err = b.Store.Sweep(context.Background())
				assert.Success(t, err)
				_, err = upload(b.Store, thC, "c", []byte("bytes of c"))
				assert.Code(t, err, chatrelay.ThreadLimit)
				clk.Advance(time.Duration(chatrelay.LimitAttachmentUnused.Max) * time.Second)
				_, err = b.Store.Sweep(context.Background())
				assert.Success(t, err)
				assertNothingStaged(t, b, thA, 0)
				appendText(t, b.Store, thC, "", "c")
				_, err = upload(b.Store, thE, "e", []byte("bytes of e"))
				assert.Code(t, err, chatrelay.ThreadLimit)
				assert.Equal(t, "threads listed", len(b.Threads(t)), 3)
			}},
			{"concurrent uploads do not pass attachment.pending together", Options{}, func(t *testing.T, b *Backend, clk *testclock.Clock) {
				max := chatrelay.LimitAttachmentPending.Max
				for i := range max - 2 {
					mustUpload(t, b.Store, thA, fmt.Sprintf("copy %d.txt", i), []byte("the same bytes"))
				}
				const racers = 6
				errs := make([]error, racers)
				var wg sync.WaitGroup
				for i := range racers {
					wg.Go(func() { _, errs[i] = upload(b.Store, thA, "racer.txt", []byte(fmt.Sprintf("racer %d", i))) })
				}
				wg.Wait()
				took := 0
				for _, err := range errs {
					if err == nil {
						took++
					} else {
						assert.Code(t, err, chatrelay.TooManyAttachments)
					}
				}
				assert.Equal(t, "uploads taken", took, 2)
				assertNothingStaged(t, b, thA, 1+2)
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				clk := testclock.New(t0)
				tc.opt.Now = clk.Now
				tc.run(t, Open(t, backend, tc.opt), clk)
			})
		}
	})
}

// grantUpload is an upload into thread with grant g: a participant's
// (its id the uploader), or a device's (the owner's).
func grantUpload(b *Backend, thread string, g chatrelay.Grant) func(name string, body []byte) (chatrelay.Attachment, error) {
	return func(name string, body []byte) (chatrelay.Attachment, error) {
		up := store.Upload{Name: name, Type: "text/plain", Body: bytes.NewReader(body), Max: int64(chatrelay.LimitThreadAttachments.Max), Grant: g.ID}
		if !g.Device() {
			up.By = g.ID
		}
		return b.Store.(store.Attachments).PutAttachment(context.Background(), thread, up)
	}
}

// assertNothingStaged checks that thread holds files bytes (distinct
// contents) and no upload in progress: no temp file (file), no staging
// key (Redis).
func assertNothingStaged(t *testing.T, b *Backend, thread string, files int) {
	t.Helper()
	switch b.Name {
	case File:
		var blobs, temps int
		for f := range Files(t, b.Dir) {
			switch {
			case strings.Contains(f, ".upload.tmp-"):
				temps++
			case strings.Contains(f, thread+".files/") && !strings.HasSuffix(f, "index.json"):
				blobs++
			}
		}
		assert.Equal(t, "temp files", temps, 0)
		assert.Equal(t, "stored files", blobs, files)
	default:
		keys := threadKeysMatching(t, b, thread, b.KeyPrefix(thread)+"{"+thread+"}:att:*")
		var blobs, staged int
		for _, k := range keys {
			if strings.Contains(k, ":att:up:") {
				staged++
			} else {
				blobs++
			}
		}
		assert.Equal(t, "staging keys", staged, 0)
		assert.Equal(t, "stored blobs", blobs, files)
	}
}

// threadKeysMatching lists the keys matching pattern on the Redis that
// holds thread's keys (every primary of a cluster).
func threadKeysMatching(t *testing.T, b *Backend, thread, pattern string) []string {
	t.Helper()
	var keys []string
	var err error
	c := b.ThreadClient(t, thread)
	if cc, ok := c.(*redis.ClusterClient); ok {
		// KEYS on a cluster asks one node: ask every primary.
		var mu sync.Mutex
		err = cc.ForEachMaster(context.Background(), func(ctx context.Context, n *redis.Client) error {
			ks, err := n.Keys(ctx, pattern).Result()
			mu.Lock()
			keys = append(keys, ks...)
			mu.Unlock()
			return err
		})
	} else {
		keys, err = c.Keys(context.Background(), pattern).Result()
	}
	assert.Success(t, err)
	return keys
}
