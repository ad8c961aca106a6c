package roleserve

import (
	"net/netip"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"cairn.dev/cairn/node/timesync"
	api "cairn.dev/cairn/proto/api"
)

func TestClockStatus(t *testing.T) {
	synced := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		state *timesync.State
		want  *api.ClockStatus
	}{
		{name: "not known"},
		{
			name:  "unsynchronized",
			state: &timesync.State{},
			want:  &api.ClockStatus{State: api.ClockState_CLOCK_STATE_UNSYNCHRONIZED},
		},
		{
			name:  "synchronized",
			state: &timesync.State{Sync: timesync.Synchronized, Server: netip.MustParseAddr("10.42.0.1"), Offset: -1500 * time.Microsecond, LastSync: synced},
			want: &api.ClockStatus{State: api.ClockState_CLOCK_STATE_SYNCHRONIZED, Server: "10.42.0.1",
				OffsetNanos: -1500000, LastSyncUnixNanos: synced.UnixNano()},
		},
		{
			name:  "known wrong",
			state: &timesync.State{Sync: timesync.KnownWrong, Reason: "it reads 1970\nagain\x1b[2J"},
			want:  &api.ClockStatus{State: api.ClockState_CLOCK_STATE_KNOWN_WRONG, Reason: "it reads 1970?again?[2J"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, clockStatus(tc.state), protocmp.Transform()); diff != "" {
				t.Errorf("clockStatus(%+v) (-want +got):\n%s", tc.state, diff)
			}
		})
	}
	long := printableReason(strings.Repeat("é", maxClockReason))
	if len(long) > maxClockReason || !utf8.ValidString(long) {
		t.Errorf("printableReason of %d bytes = %d bytes, valid UTF-8 %t; want at most %d, valid", 2*maxClockReason, len(long), utf8.ValidString(long), maxClockReason)
	}
}

func TestClockNews(t *testing.T) {
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	server := netip.MustParseAddr("10.42.0.1")
	pushed := &timesync.State{Sync: timesync.Synchronized, Server: server, Offset: time.Millisecond, LastSync: at}
	for _, tc := range []struct {
		name string
		now  timesync.State
		want bool
	}{
		{"a new answer", timesync.State{Sync: timesync.Synchronized, Server: server, Offset: -2 * time.Millisecond, LastSync: at.Add(time.Minute)}, false},
		{"a refresh", timesync.State{Sync: timesync.Synchronized, Server: server, LastSync: at.Add(clockRefresh)}, true},
		{"another server", timesync.State{Sync: timesync.Synchronized, Server: netip.MustParseAddr("10.42.0.2"), LastSync: at.Add(time.Minute)}, true},
		{"a step", timesync.State{Sync: timesync.Synchronized, Server: server, Offset: -time.Hour, LastSync: at.Add(time.Minute)}, true},
		{"known wrong", timesync.State{Sync: timesync.KnownWrong, Server: server, Reason: "stepping failed", LastSync: at}, true},
	} {
		if got := clockNews(pushed, tc.now); got != tc.want {
			t.Errorf("clockNews after %+v, for %s = %t, want %t", pushed, tc.name, got, tc.want)
		}
	}
	if !clockNews(nil, timesync.State{}) {
		t.Errorf("clockNews with nothing pushed = false, want true")
	}
}
