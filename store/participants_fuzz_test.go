package store

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzParseParticipants: a participants record is read from disk, where
// another process (or a person with an editor) may have left anything.
// The reader never panics, and whatever it accepts has every grant
// checkable (id, digest, expiry) and writes back to a record that reads
// the same.
func FuzzParseParticipants(f *testing.F) {
	const thread = "a1b2c3d4e5f60718"
	digest := strings.Repeat("0f", 32)
	for _, s := range []string{
		`{"version":1,"thread":"` + thread + `","grants":[]}`,
		`{"version":1,"thread":"` + thread + `","grants":[{"id":"p_0011aabb","name":"Jo","kind":"human","role":"viewer","created_at":1,"expires_at":2,"cap":0,"sent":0,"digest":"` + digest + `"}]}`,
		`{"version":1,"thread":"` + thread + `","grants":[{"id":"p_0011aabb","expires_at":2,"digest":"` + digest + `","revoked_at":3,"used":true,"expiry_noted":true}]}`,
		`{"version":1,"thread":"` + thread + `","grants":[{"id":"p_0011aabb","expires_at":0,"digest":"` + digest + `"}]}`,
		`{"version":1,"thread":"` + thread + `","grants":[{"id":"p_0011aabb","expires_at":2,"digest":"zz"}]}`,
		`{"version":2,"thread":"` + thread + `","grants":null}`, `{"version":1,"thread":"0000000000000000"}`,
		`{"version":1,"thread":"` + thread + `","grants":[],"x":1}`, `{"version":1,"thread":"` + thread + `"} {}`, `null`, ``, "\xff",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		grants, err := parseParticipants(data, thread)
		if err != nil {
			return
		}
		for i, g := range grants {
			if err := CheckGrant(g); err != nil {
				t.Fatalf("%q: grant %d accepted but %v", data, i, err)
			}
		}
		out, err := json.Marshal(participantsFile{Version: 1, Thread: thread, Grants: grants})
		if err != nil {
			t.Fatal(err)
		}
		again, err := parseParticipants(out, thread)
		if err != nil {
			t.Fatalf("%q re-encodes to %s, which does not parse: %v", data, out, err)
		}
		if len(again) != len(grants) || (len(grants) > 0 && !reflect.DeepEqual(again, grants)) {
			t.Fatalf("%q: grants %+v became %+v", data, grants, again)
		}
	})
}
