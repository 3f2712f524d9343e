package redisstore

import (
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
)

// The Redis records of Part 5 that a store reads back are untrusted: an
// older or newer binary, or a hand edit, wrote them. Reading one never
// panics; what is taken has the shape its checks ask for, in the order
// the store promises, and written again reads back the same.

// FuzzReadPush: a thread's push subscriptions hash (id → JSON), here of
// two fields. What readPush takes passes CheckPushSubscription under its
// own field's id, oldest first (then by id), and the same records
// encoded again read back equal.
func FuzzReadPush(f *testing.F) {
	rec := func(id string, created int64, events string) string {
		return `{"id":"` + id + `","endpoint":"https://fcm.googleapis.com/fcm/send/x","p256dh":"BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4","auth":"BTBZMqHH6r4Tts7J_aSIgg","events":` + events + `,"created_at":` + itoa(created) + `,"subscriber":"owner","base":"https://chat.example.com"}`
	}
	f.Add("w_0000000a", rec("w_0000000a", 1796243812883, `["interaction","reply"]`), "w_0000000b", rec("w_0000000b", 1796243812884, `["reply"]`))
	f.Add("w_0000000a", rec("w_0000000a", 2, `[]`), "w_0000000b", rec("w_0000000b", 1, `null`))
	f.Add("w_0000000a", rec("w_0000000a", -9223372036854775808, `["reply"]`), "w_0000000b", rec("w_0000000b", 9223372036854775807, `["reply"]`))
	f.Add("w_0000000a", rec("w_0000000b", 1, `["reply"]`), "w_0000000c", `{"id":"w_0000000c","extra":1}`)
	f.Add("w_0000000a", `{"id":"w_0000000a"}`, "x", `null`)
	f.Fuzz(func(t *testing.T, id1, js1, id2, js2 string) {
		fields := map[string]string{id1: js1, id2: js2}
		subs, err := readPush(fields)
		if err != nil {
			return
		}
		again := map[string]string{}
		for i, s := range subs {
			if _, ok := fields[s.ID]; !ok {
				t.Fatalf("readPush(%q) took %+v under another id", fields, s)
			}
			if err := chatrelay.CheckPushSubscription(s); err != nil {
				t.Fatalf("readPush(%q) took %+v: %v", fields, s, err)
			}
			if i > 0 && (subs[i-1].CreatedAt > s.CreatedAt || subs[i-1].CreatedAt == s.CreatedAt && subs[i-1].ID >= s.ID) {
				t.Fatalf("readPush(%q): not oldest first: %+v", fields, subs)
			}
			b, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			again[s.ID] = string(b)
		}
		back, err := readPush(again)
		if err != nil || !reflect.DeepEqual(back, subs) {
			t.Fatalf("readPush(%q) = %+v; written again it reads %+v, %v", fields, subs, back, err)
		}
	})
}

// FuzzParseAgents: the agent keys hash (id → JSON), here of two fields.
// What parseAgents takes is a key under its own field's id with a
// digest, newest first (then by id, descending), and the same keys
// encoded again read back equal.
func FuzzParseAgents(f *testing.F) {
	s := &Store{log: slog.New(slog.DiscardHandler)}
	rec := func(id string, created int64, more string) string {
		return `{"id":"` + id + `","name":"ci-bot","created_at":` + itoa(created) + more + `,"digest":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}`
	}
	f.Add("a_0000000a", rec("a_0000000a", 1796243812883, ""), "a_0000000b", rec("a_0000000b", 1796243812884, `,"threads":["a1b2c3d4e5f60718"],"revoked_at":1796243812999`))
	f.Add("a_0000000a", rec("a_0000000a", 5, ""), "a_0000000b", rec("a_0000000b", 5, ""))
	f.Add("a_0000000a", rec("a_0000000a", -9223372036854775808, ""), "a_0000000b", rec("a_0000000b", 9223372036854775807, ""))
	f.Add("a_0000000a", rec("a_0000000a", 1, `,"scope":"all"`), "a_0000000b", `{"id":"a_0000000b","digest":""}`)
	f.Fuzz(func(t *testing.T, id1, js1, id2, js2 string) {
		fields := map[string]string{id1: js1, id2: js2}
		keys := s.parseAgents(fields)
		again := map[string]string{}
		for i, k := range keys {
			if _, ok := fields[k.ID]; !ok || k.Digest == "" {
				t.Fatalf("parseAgents(%q) took %+v", fields, k)
			}
			if i > 0 && (keys[i-1].CreatedAt < k.CreatedAt || keys[i-1].CreatedAt == k.CreatedAt && keys[i-1].ID <= k.ID) {
				t.Fatalf("parseAgents(%q): not newest first: %+v", fields, keys)
			}
			if len(k.Threads) == 0 {
				keys[i].Threads = nil // [] and absent both reach every thread
			}
			b, err := json.Marshal(k)
			if err != nil {
				t.Fatal(err)
			}
			again[k.ID] = string(b)
		}
		if back := s.parseAgents(again); !reflect.DeepEqual(back, keys) {
			t.Fatalf("parseAgents(%q) = %+v; written again it reads %+v", fields, keys, back)
		}
	})
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// FuzzParseGrants: a thread's participants hash (.v, .order and a field
// per grant, devices included), here of up to three fields. What
// parseGrants takes accounts for every field of the record (.v, .order
// and each grant of .order, once), each grant passing CheckGrant under
// its own field's id; anything else fails closed.
func FuzzParseGrants(f *testing.F) {
	digest := strings.Repeat("0f", 32)
	grant := func(id string) string {
		return `{"id":"` + id + `","name":"Jo","kind":"human","role":"viewer","created_at":1796243812883,"expires_at":1796848612883,"cap":50,"sent":0,"digest":"` + digest + `"}`
	}
	device := `{"id":"d_0011aabb","name":"Phone","created_at":1,"expires_at":2,"digest":"` + digest + `","device":true}`
	f.Add(".v", "3", ".order", "p_0011aabb", "p_0011aabb", grant("p_0011aabb"))
	f.Add(".v", "7", ".order", "d_0011aabb", "d_0011aabb", device)
	f.Add(".v", "2", ".order", "", "x", "y")
	f.Add(".v", "3", "p_0011aabb", grant("p_0011aabb"), "", "")
	f.Add(".v", "3", ".order", "p_0011aabb p_0011aabb", "p_0011aabb", grant("p_0011aabb"))
	f.Add(".v", "0", ".order", "p_0011aabb", "p_0011aabb", grant("p_0011aabb"))
	f.Add(".v", "3", ".order", "p_0011aabb", "p_0011aabb", grant("p_0011aabc"))
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string) {
		fields := map[string]string{k1: v1, k2: v2}
		if k3 != "" {
			fields[k3] = v3
		}
		rec, err := parseGrants(fields)
		if err != nil {
			if !errors.Is(err, errBadRecord) {
				t.Fatalf("parseGrants(%q): %v", fields, err)
			}
			return
		}
		if rec.version == "" && len(rec.grants) == 0 && len(fields) == 0 {
			return
		}
		want := map[string]bool{".v": true, ".order": true}
		for _, g := range rec.grants {
			if err := chatrelay.CheckGrant(g); err != nil || want[g.ID] {
				t.Fatalf("parseGrants(%q) took %+v: %v", fields, g, err)
			}
			want[g.ID] = true
		}
		for k := range fields {
			if !want[k] {
				t.Fatalf("parseGrants(%q) took the record, leaving its field %q out", fields, k)
			}
			delete(want, k)
		}
		if len(want) > 0 {
			t.Fatalf("parseGrants(%q) took the record without its %v", fields, want)
		}
	})
}
