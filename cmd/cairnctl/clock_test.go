package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cairn.dev/cairn/proto/api"
)

func TestClockLine(t *testing.T) {
	synced := testNow.Add(-12 * time.Second)
	for _, tc := range []struct {
		name  string
		clock *clockView
		want  string
	}{
		{"not reported", nil, "-"},
		{"unspecified", &clockView{State: "UNSPECIFIED"}, "-"},
		{"unsynchronized", &clockView{State: "UNSYNCHRONIZED"}, "unsynchronized (no NTP server has answered since the node booted)"},
		{"synchronized, behind", &clockView{State: "SYNCHRONIZED", Server: "10.42.0.1", OffsetNanos: 1234567, LastSync: &synced},
			"synchronized with 10.42.0.1 (offset +1.2ms, 12s ago)"},
		{"synchronized, ahead", &clockView{State: "SYNCHRONIZED", Server: "10.42.0.1", OffsetNanos: -450400, LastSync: &synced},
			"synchronized with 10.42.0.1 (offset -450µs, 12s ago)"},
		{"synchronized after a step", &clockView{State: "SYNCHRONIZED", Server: "192.0.2.7", OffsetNanos: int64(3*time.Hour + 1234567), LastSync: &synced},
			"synchronized with 192.0.2.7 (offset +3h0m0.001s, 12s ago)"},
		{"known wrong at boot", &clockView{State: "KNOWN_WRONG", Reason: "it reads 1970-01-01T00:00:00Z, before 2026-01-01T00:00:00Z"},
			"KNOWN WRONG: it reads 1970-01-01T00:00:00Z, before 2026-01-01T00:00:00Z"},
		{"known wrong after a sync", &clockView{State: "KNOWN_WRONG", Server: "10.42.0.1", OffsetNanos: int64(-time.Hour), LastSync: &synced, Reason: "stepping it failed"},
			"KNOWN WRONG: stepping it failed; last synchronized with 10.42.0.1 (offset -1h0m0s, 12s ago)"},
		{"a state of the future", &clockView{State: "CLOCK_STATE(9)"}, "CLOCK_STATE(9)"},
	} {
		if got := clockLine(testNow, tc.clock); got != tc.want {
			t.Errorf("clockLine(%s) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestNodeDescribeClock reads nodes' clocks through GetNodes, as node
// describe prints them and in JSON.
func TestNodeDescribeClock(t *testing.T) {
	lastSync := testNow.Add(-12 * time.Second)
	synced := testNode(t, api.NodeState_NODE_STATE_UP, nil, &api.NodeStatus{
		ExternalAddress: "10.42.0.10",
		Clock: &api.ClockStatus{State: api.ClockState_CLOCK_STATE_SYNCHRONIZED, Server: "10.42.0.1",
			OffsetNanos: 1234567, LastSyncUnixNanos: lastSync.UnixNano()},
	}, time.Time{})
	wrong := testNode(t, api.NodeState_NODE_STATE_UP, nil, &api.NodeStatus{
		Clock: &api.ClockStatus{State: api.ClockState_CLOCK_STATE_KNOWN_WRONG, Reason: "it reads 1999-12-31T23:59:59Z"},
	}, time.Time{})
	silent := testNode(t, api.NodeState_NODE_STATE_UP, nil, &api.NodeStatus{ExternalAddress: "10.42.0.12"}, time.Time{})
	dir, s := bootstrapped(t, synced, wrong, silent)
	mustRun(t, dir, "--endpoint", s.addr, "takeownership")

	for _, tc := range []struct {
		node     *api.Node
		line     string
		wantJSON *clockView
	}{
		{synced, "Clock:           synchronized with 10.42.0.1 (offset +1.2ms, 12s ago)\n",
			&clockView{State: "SYNCHRONIZED", Server: "10.42.0.1", OffsetNanos: 1234567, LastSync: &lastSync}},
		{wrong, "Clock:           KNOWN WRONG: it reads 1999-12-31T23:59:59Z\n",
			&clockView{State: "KNOWN_WRONG", Reason: "it reads 1999-12-31T23:59:59Z"}},
		{silent, "Clock:           -\n", nil},
	} {
		v := describe(t, dir, tc.node.Id, tc.line)
		if diff := cmp.Diff(tc.wantJSON, v.Clock); diff != "" {
			t.Errorf("node describe -o json %s: clock (-want +got):\n%s", tc.node.Id, diff)
		}
	}
}

// describe runs node describe on node id, checks that it prints line, and
// returns what it prints in JSON.
func describe(t *testing.T, dir, id, line string) nodeView {
	t.Helper()
	if out := mustRun(t, dir, "node", "describe", id); !strings.Contains(out, line) {
		t.Errorf("node describe %s printed\n%s\nwant the line %q", id, out, line)
	}
	var v nodeView
	if err := json.Unmarshal([]byte(mustRun(t, dir, "-o", "json", "node", "describe", id)), &v); err != nil {
		t.Fatalf("node describe -o json: %v", err)
	}
	return v
}
