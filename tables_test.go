package chatrelay_test

import (
	"testing"

	"github.com/chatrelay/chatrelay"
)

// TestCodeTable: every code is in the table once, with an error's HTTP
// status (4xx or 5xx) and words saying what it means.
func TestCodeTable(t *testing.T) {
	seen := map[chatrelay.Code]bool{}
	for _, c := range chatrelay.CodeTable() {
		if seen[c.Code] {
			t.Errorf("code %s: two rows", c.Code)
		}
		seen[c.Code] = true
		if c.Status < 400 || c.Status > 599 {
			t.Errorf("code %s: status %d is not an error's", c.Code, c.Status)
		}
		if c.Description == "" {
			t.Errorf("code %s: no description", c.Code)
		}
	}
}

// TestRouteTable: every route is in the table once, and every $defs entry
// a row names is in the bundle.
func TestRouteTable(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range chatrelay.Routes() {
		if seen[r.Key()] {
			t.Errorf("route %s: two rows", r.Key())
		}
		seen[r.Key()] = true
		for _, def := range []string{r.Body, r.Answer, r.AnswerV2} {
			if _, ok := chatrelay.SchemaDef(def); def != "" && !ok {
				t.Errorf("route %s names $defs %s, which the bundle has not", r.Key(), def)
			}
		}
		if (r.Answer == "") != (r.Status == 0) {
			t.Errorf("route %s: an answer needs its status, and a status its answer", r.Key())
		}
	}
}
