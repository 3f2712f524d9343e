package redisstore

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/chatrelay/chatrelay"
)

// FuzzParseFast checks the reflection-free reader of stored messages
// against encoding/json: whatever parseFast accepts, encoding/json reads
// the same way, and every message chatrelay.MarshalMessage writes is read back
// exactly.
func FuzzParseFast(f *testing.F) {
	for _, m := range []chatrelay.Message{
		{ID: "MSG-20261129-170005-e0ca0d", Epoch: 1795971605229, TS: "2026-11-29T17:00:05+00:00", Author: chatrelay.Operator, Text: "hello"},
		{ID: "MSG-20261129-170005-e0ca0e", Epoch: 1, TS: "x", Author: chatrelay.Hermes, Text: "quote \" back\\slash \n tab\t <b>&amp; é 😀 \u2028"},
	} {
		f.Add(string(chatrelay.MarshalMessage(m)))
	}
	f.Add(`{"id":"a","epoch":1,"ts":"t","author":"operator","text":"\u0001"}`)
	f.Add(`{"id":"a","epoch":1,"ts":"t","author":"operator","text":"` + "\x01" + `"}`)
	f.Add(`{"id":"a","epoch":1,"ts":"t","author":"operator","text":"` + "\xff" + `"}`)
	f.Add(`{"id":"a","epoch":01,"ts":"t","author":"operator","text":""}`)
	f.Fuzz(func(t *testing.T, js string) {
		got, ok := parseFast(js)
		if ok {
			var want chatrelay.Message
			if err := json.Unmarshal([]byte(js), &want); err != nil {
				t.Fatalf("parseFast accepted %q, encoding/json refuses it: %v", js, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("parseFast(%q) = %+v, encoding/json reads %+v", js, got, want)
			}
		}
		// A message as the store writes it (epochs are positive) always
		// takes the fast path, unchanged.
		var m chatrelay.Message
		if json.Unmarshal([]byte(js), &m) == nil && m.Epoch > 0 {
			again := string(chatrelay.MarshalMessage(m))
			back, ok := parseFast(again)
			if !ok || !reflect.DeepEqual(back, m) {
				t.Fatalf("parseFast(%q) = %+v, %v; want %+v", again, back, ok, m)
			}
		}
	})
}
