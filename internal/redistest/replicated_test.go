package redistest

import "testing"

func TestReplicasCaughtUp(t *testing.T) {
	for _, tc := range []struct {
		name, info string
		want       bool
	}{
		{"caught up", "# Replication\r\nrole:master\r\nconnected_slaves:1\r\nslave0:ip=127.0.0.1,port=7004,state=online,offset=1234,lag=0\r\nmaster_repl_offset:1234\r\n", true},
		{"behind", "role:master\r\nslave0:ip=127.0.0.1,port=7004,state=online,offset=1200,lag=0\r\nmaster_repl_offset:1234\r\n", false},
		{"one of two behind", "slave0:ip=a,port=1,state=online,offset=9,lag=0\r\nslave1:ip=b,port=2,state=online,offset=8,lag=0\r\nmaster_repl_offset:9\r\n", false},
		{"no replica", "role:master\r\nconnected_slaves:0\r\nmaster_repl_offset:1234\r\n", false},
	} {
		if got := replicasCaughtUp(tc.info); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
