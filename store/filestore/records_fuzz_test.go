package filestore

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
)

// The Part 5 records and the folder's settings are read from disk, where
// an older or newer binary, a crash or a person with an editor may have
// left anything. Reading one never panics; what is taken has the shape
// its checks ask for, and written again reads back the same.

// FuzzParsePushRecord: a thread's <thread>.push.json. What parsePush
// takes passes CheckPushSubscription, and the record the store would
// write of it parses to the same subscriptions.
func FuzzParsePushRecord(f *testing.F) {
	const thread = "a1b2c3d4e5f60718"
	sub := `{"id":"w_0011aabb","endpoint":"https://fcm.googleapis.com/fcm/send/x","p256dh":"BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4","auth":"BTBZMqHH6r4Tts7J_aSIgg","events":["interaction","reply"],"created_at":1796243812883,"subscriber":"owner","base":"https://chat.example.com"}`
	for _, s := range []string{
		`{"version":1,"thread":"` + thread + `","subscriptions":[` + sub + `]}`,
		`{"version":1,"thread":"` + thread + `","subscriptions":[` + sub + `,` + strings.Replace(sub, `"owner"`, `"p:p_1a2b3c4d"`, 1) + `]}`,
		`{"version":1,"thread":"` + thread + `","subscriptions":[]}`,
		`{"version":1,"thread":"` + thread + `","subscriptions":null}`,
		`{"version":1,"thread":"` + thread + `","subscriptions":[` + strings.Replace(sub, `"reply"`, `"bogus"`, 1) + `]}`,
		`{"version":1,"thread":"` + thread + `","subscriptions":[` + strings.Replace(sub, `"events":["interaction","reply"]`, `"events":[]`, 1) + `]}`,
		`{"version":2,"thread":"` + thread + `"}`, `{"version":1,"thread":"0000000000000000"}`,
		`{"version":1,"thread":"` + thread + `","x":1}`, `null`, ``, "\xff",
	} {
		f.Add([]byte(s))
	}
	s := openFile(f, "", FileOptions{})
	f.Fuzz(func(t *testing.T, data []byte) {
		subs, err := s.parsePush(thread, data)
		if err != nil {
			if chatrelay.CodeOf(err) != chatrelay.ThreadUnreadable {
				t.Fatalf("%q: refused with %v", data, err)
			}
			return
		}
		for i, p := range subs {
			if err := chatrelay.CheckPushSubscription(p); err != nil {
				t.Fatalf("%q: subscription %d taken but %v", data, i, err)
			}
		}
		out, err := json.Marshal(pushFile{Version: 1, Thread: thread, Subscriptions: subs})
		if err != nil {
			t.Fatal(err)
		}
		again, err := s.parsePush(thread, out)
		if err != nil || len(again) != len(subs) || (len(subs) > 0 && !reflect.DeepEqual(again, subs)) {
			t.Fatalf("%q: %+v written as %s reads %+v, %v", data, subs, out, again, err)
		}
	})
}

// FuzzAgentsFile: the agent keys file. What the store takes it writes
// back to a file that reads the same; a file it refuses fails closed
// (store_unavailable), and no key resolves through it.
func FuzzAgentsFile(f *testing.F) {
	digest := chatrelay.DigestOf("cha_" + strings.Repeat("A", 43))
	for _, s := range []string{
		`{"version":1,"agents":[{"id":"a_0011aabb","name":"ci-bot","created_at":1796243812883,"digest":"` + digest + `"}]}`,
		`{"version":1,"agents":[{"id":"a_0011aabb","name":"ci-bot","threads":["a1b2c3d4e5f60718"],"created_at":1,"revoked_at":2,"digest":"` + digest + `"}]}`,
		`{"version":1,"agents":[]}`, `{"version":1}`, `{"version":2,"agents":[]}`,
		`{"version":1,"agents":[{"id":"a_0011aabb","scope":"all","digest":"` + digest + `"}]}`,
		`{"version":1,"agents":[{"id":"a_0011aabb","threads":[],"digest":""}]}`,
		`null`, ``, "\xff", `{"version":1}{"version":1}`,
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	s := openFile(f, dir, FileOptions{})
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(s.agentsPath(), data, 0o600); err != nil {
			t.Fatal(err)
		}
		keys, err := s.AgentKeys(t.Context())
		if err != nil {
			if chatrelay.CodeOf(err) != chatrelay.StoreUnavailable {
				t.Fatalf("%q: refused with %v", data, err)
			}
			if _, err := s.ResolveAgent(t.Context(), digest); err == nil {
				t.Fatalf("%q: refused, yet a key resolves", data)
			}
			return
		}
		if err := os.WriteFile(s.agentsPath(), agentsRecord(keys), 0o600); err != nil {
			t.Fatal(err)
		}
		again, err := s.AgentKeys(t.Context())
		if err != nil || len(again) != len(keys) {
			t.Fatalf("%q: %+v written again reads %+v, %v", data, keys, again, err)
		}
		for i := range keys {
			if len(keys[i].Threads) == 0 {
				keys[i].Threads = nil // [] and absent both reach every thread
			}
		}
		if len(keys) > 0 && !reflect.DeepEqual(again, keys) {
			t.Fatalf("%q: %+v written again reads %+v", data, keys, again)
		}
	})
}

// FuzzSettings: settings.json, which every command of the folder reads.
// What readSettings takes is in range, names its webhook destinations as
// store.DestinationID does (they become file names under the folder:
// nothing else may), and recorded again reads back the same.
func FuzzSettings(f *testing.F) {
	dest := store.DestinationID("https://hooks.example.com/chat")
	for _, s := range []string{
		`{"retention_messages":200,"retention_age":"720h0m0s","max_threads":500}`,
		`{"retention_messages":200,"retention_age":"720h0m0s","max_threads":500,"public_url":"https://chat.example.com","webhooks":["` + dest + `"]}`,
		`{"retention_messages":200,"retention_age":"720h0m0s","max_threads":500,"webhooks":["../../../tmp/x"]}`,
		`{"retention_messages":200,"retention_age":"720h0m0s","max_threads":500,"webhooks":[""]}`,
		`{"retention_messages":0,"retention_age":"1h","max_threads":1}`,
		`{"retention_messages":1,"retention_age":"-1h","max_threads":1}`,
		`{"retention_messages":1,"retention_age":"1.5h","max_threads":1,"extra":true}`,
		`null`, ``, "\xff", `[]`,
	} {
		f.Add([]byte(s))
	}
	destID := regexp.MustCompile(`^[0-9a-f]{16}$`)
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "settings.json"), data, 0o600); err != nil {
			t.Fatal(err)
		}
		set, ok, err := readSettings(dir)
		if err != nil || !ok {
			return
		}
		if set.Retention.Messages <= 0 || set.Retention.Age <= 0 || set.MaxThreads <= 0 {
			t.Fatalf("%q: took %+v", data, set)
		}
		for _, id := range set.Webhooks {
			if !destID.MatchString(id) {
				t.Fatalf("%q: took the webhook destination %q, which is no destination id (it names a file)", data, id)
			}
		}
		if len(set.Webhooks) == 0 {
			set.Webhooks = nil // [] and absent are both no destination
		}
		if err := recordSettings(dir, set, false); err != nil {
			t.Fatal(err)
		}
		again, ok, err := readSettings(dir)
		if err != nil || !ok || !reflect.DeepEqual(again, set) {
			t.Fatalf("%q: %+v recorded again reads %+v, %v, %v", data, set, again, ok, err)
		}
	})
}

// TestSettingsWebhookNamesAFile: a settings.json whose webhook
// destination is not a destination id (a hand edit: "../../escaped") is
// refused as settings out of range, so no host command of the folder
// queues an event into a file outside the folder's webhooks directory.
func TestSettingsWebhookNamesAFile(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	data := filepath.Join(root, "data")
	assert.Success(t, os.MkdirAll(data, 0o700))
	assert.Success(t, os.WriteFile(filepath.Join(data, "settings.json"),
		[]byte(`{"retention_messages":200,"retention_age":"720h0m0s","max_threads":500,"webhooks":["../../escaped"]}`), 0o600))
	b, err := store.Open(t.Context(), "file:"+data, store.Options{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	if err == nil {
		_, aerr := b.Store.Append(t.Context(), "a1b2c3d4e5f60718", store.NewMessage{Text: "hello"})
		b.Close()
		assert.Success(t, aerr)
	}
	_, serr := os.Stat(filepath.Join(root, "escaped.queue"))
	assert.True(t, os.IsNotExist(serr), "an event was queued outside the data folder: %v", serr)
	assert.True(t, err != nil, "a settings.json naming a file as a webhook destination opened")
}
