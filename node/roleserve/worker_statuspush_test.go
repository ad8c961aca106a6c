package roleserve

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/node/timesync"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/fixture"
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
	long := printableReason(strings.Repeat("é", maxReason))
	if len(long) > maxReason || !utf8.ValidString(long) {
		t.Errorf("printableReason of %d bytes = %d bytes, valid UTF-8 %t; want at most %d, valid", 2*maxReason, len(long), utf8.ValidString(long), maxReason)
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

// statusCurator answers UpdateNodeStatus and sends each status it gets on
// its channel.
type statusCurator struct {
	api.UnimplementedCuratorServer
	statuses chan *api.NodeStatus
}

func (c *statusCurator) UpdateNodeStatus(ctx context.Context, req *api.UpdateNodeStatusRequest) (*api.UpdateNodeStatusResponse, error) {
	select {
	case c.statuses <- req.Status:
		return &api.UpdateNodeStatusResponse{}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestStatuspushPushesUpdateStatus checks that the node's status leaves
// the update status out until there is one, that each new one is pushed at
// once and a Set of the same one is not, that its reason is cut to what
// the curator stores, and that UpdatePushed follows what reached the
// curator.
func TestStatuspushPushesUpdateStatus(t *testing.T) {
	ctx := fixture.Context(t)
	cur := &statusCurator{statuses: make(chan *api.NodeStatus)}
	// The node runs no curator: localCurator never has a value, so that
	// only the address and the update status make pushes.
	var (
		address      memory.Value[netip.Prefix]
		credentials  memory.Value[*identity.Node]
		cc           memory.Value[*curatorConn]
		localCurator memory.Value[netip.AddrPort]
		update       memory.Value[*api.UpdateStatus]
		updatePushed memory.Value[*api.UpdateStatus]
	)
	address.Set(netip.MustParsePrefix("10.42.0.10/24"))
	credentials.Set(identitytest.NewCA(t, "test CA").Node(t))
	cc.Set(fakeCurator(t, cur))
	w := &workerStatuspush{
		address:      &address,
		credentials:  &credentials,
		curator:      &cc,
		localCurator: &localCurator,
		update:       &update,
		version:      "1.2.2",
		updatePushed: &updatePushed,
	}
	runWorker(t, w.run)

	// next returns the update status of the next status pushed.
	next := func() *api.UpdateStatus {
		t.Helper()
		select {
		case st := <-cur.statuses:
			if st.GetVersion() != "1.2.2" || st.GetExternalAddress() != "10.42.0.10" {
				t.Errorf("status pushed = %v, want version 1.2.2 and address 10.42.0.10", st)
			}
			return st.GetUpdate()
		case <-time.After(time.Minute):
			t.Fatal("no status pushed within a minute")
			return nil
		}
	}
	// push sets u, checks that the next status pushed carries want, and
	// waits until UpdatePushed says u reached the curator.
	push := func(u, want *api.UpdateStatus) {
		t.Helper()
		update.Set(u)
		if diff := cmp.Diff(want, next(), protocmp.Transform()); diff != "" {
			t.Errorf("update status pushed after %v (-want +got):\n%s", u, diff)
		}
		if _, err := event.Get(ctx, &updatePushed, event.Filter(func(p *api.UpdateStatus) bool { return proto.Equal(p, u) })); err != nil {
			t.Fatalf("waiting for UpdatePushed %v: %v", u, err)
		}
	}

	if u := next(); u != nil {
		t.Errorf("first status pushed has update status %v, want none", u)
	}
	installing := &api.UpdateStatus{RolloutId: "r1", Version: "1.2.3", Phase: api.UpdatePhase_UPDATE_PHASE_INSTALLING}
	push(installing, installing)

	update.Set(proto.Clone(installing).(*api.UpdateStatus))
	select {
	case st := <-cur.statuses:
		t.Errorf("the same update status set again was pushed: %v", st)
	case <-time.After(time.Second):
	}

	failed := &api.UpdateStatus{
		RolloutId: "r1",
		Version:   "1.2.3",
		Phase:     api.UpdatePhase_UPDATE_PHASE_FAILED,
		Reason:    "when installing: the registry said\n" + strings.Repeat("no ", maxReason),
	}
	cut := proto.Clone(failed).(*api.UpdateStatus)
	cut.Reason = "when installing: the registry said?" + strings.Repeat("no ", maxReason)[:maxReason-len("when installing: the registry said?")]
	push(failed, cut)
	push(nil, nil)
}
