package roleserve

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/fixture"
	api "cairn.dev/cairn/proto/api"
)

// recordingValue is a Value that records every Set.
type recordingValue[T any] struct {
	memory.Value[T]
	mu   sync.Mutex
	sets []T
}

func (v *recordingValue[T]) Set(x T) {
	v.mu.Lock()
	v.sets = append(v.sets, x)
	v.mu.Unlock()
	v.Value.Set(x)
}

func (v *recordingValue[T]) recorded() []T {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]T(nil), v.sets...)
}

// runRolefetch runs w, its roles and release set, as the node of creds on
// storage of its own, with srv as its curator, until the test ends.
func runRolefetch(t *testing.T, w *workerRolefetch, creds *identity.Node, srv api.CuratorServer) {
	t.Helper()
	st := newTestNode(t, 0, 0, 0, 0).cfg.Storage
	var (
		membership  memory.Value[*Membership]
		credentials memory.Value[*identity.Node]
		cc          memory.Value[*curatorConn]
	)
	membership.Set(&Membership{NodeKey: creds.PrivateKey(), InitialRoles: &api.NodeRoles{}})
	credentials.Set(creds)
	cc.Set(fakeCurator(t, srv))
	w.membership, w.credentials, w.curator = &membership, &credentials, &cc
	if w.decommissioned == nil {
		w.decommissioned = &memory.Value[bool]{}
	}
	w.paths = nodePaths{etcd: st.Root.Data.Etcd.FullPath(), node: &st.Root.Data.Node}
	runWorker(t, w.run)
}

// TestRolefetchPublishesDesiredRelease feeds workerRolefetch its node as a
// curator's Watch sends it: without a desired release, with one, with
// other roles but the same release, with the release of another rollout,
// without one again, with a release to stage only (published staged only,
// though the curator left stage_only out), and with that release for the
// node's turn beside it (the turn's is published). The desired release is
// published at first and then only when it changes.
func TestRolefetchPublishesDesiredRelease(t *testing.T) {
	ctx := fixture.Context(t)
	ca := identitytest.NewCA(t, "test CA")
	creds := ca.Node(t)
	first := &api.DesiredRelease{
		RolloutId:            "r1",
		Reference:            "10.42.0.1:5000/cairn@sha256:" + strings.Repeat("a", 64),
		Version:              "1.2.3",
		TrialDeadlineSeconds: 300,
	}
	second := &api.DesiredRelease{
		RolloutId:      "r2",
		Reference:      "10.42.0.1:5000/cairn@sha256:" + strings.Repeat("b", 64),
		Version:        "1.2.2",
		AllowDowngrade: true,
	}
	worker := &api.NodeRoles{KubernetesWorker: &api.NodeRoles_KubernetesWorker{}}
	third := &api.DesiredRelease{RolloutId: "r3", Reference: "10.42.0.1:5000/cairn@sha256:" + strings.Repeat("c", 64), Version: "1.2.4"}
	thirdStaged := proto.Clone(third).(*api.DesiredRelease)
	thirdStaged.StageOnly = true
	nodeStaging := func(roles *api.NodeRoles, d, toStage *api.DesiredRelease) *api.WatchEvent {
		return &api.WatchEvent{Nodes: []*api.Node{{Id: creds.ID(), State: api.NodeState_NODE_STATE_UP, Roles: roles, DesiredRelease: d, ReleaseToStage: toStage}}}
	}
	node := func(roles *api.NodeRoles, d *api.DesiredRelease) *api.WatchEvent {
		return nodeStaging(roles, d, nil)
	}
	cur := &watchingCurator{events: make(chan *api.WatchEvent, 8)}
	release := &recordingValue[*api.DesiredRelease]{}
	w := &workerRolefetch{roles: &memory.Value[*api.NodeRoles]{}, release: release}
	runRolefetch(t, w, creds, cur)

	// wait waits until the desired release is want.
	wait := func(want *api.DesiredRelease) {
		t.Helper()
		if _, err := event.Get(ctx, w.release, event.Filter(func(d *api.DesiredRelease) bool { return proto.Equal(d, want) })); err != nil {
			t.Fatalf("waiting for desired release %v: %v", want, err)
		}
	}
	cur.events <- node(&api.NodeRoles{}, nil)
	wait(nil)
	cur.events <- node(&api.NodeRoles{}, first)
	wait(first)
	cur.events <- node(worker, first)
	cur.events <- node(worker, second)
	wait(second)
	cur.events <- node(worker, nil)
	wait(nil)
	cur.events <- nodeStaging(worker, nil, third)
	wait(thirdStaged)
	cur.events <- nodeStaging(worker, third, third)
	wait(third)
	cur.events <- node(worker, nil)
	wait(nil)

	want := []*api.DesiredRelease{nil, first, second, nil, thirdStaged, third, nil}
	if diff := cmp.Diff(want, release.recorded(), protocmp.Transform()); diff != "" {
		t.Errorf("desired releases published (-want +got):\n%s", diff)
	}
}

// decommissioningCurator serves one Watch: it sends the node with the
// KubernetesWorker role, then, once refuse is closed, ends the stream as a
// curator ends a decommissioned node's, and refuses every later Watch.
type decommissioningCurator struct {
	api.UnimplementedCuratorServer
	id      string
	refuse  chan struct{}
	watches atomic.Int32
}

func (c *decommissioningCurator) Watch(_ *api.WatchRequest, srv api.Curator_WatchServer) error {
	refusal := rpc.Decommissioned(codes.PermissionDenied, "node %s is NODE_STATE_DECOMMISSIONED; its certificate is no longer honoured", c.id)
	if c.watches.Add(1) > 1 {
		return refusal
	}
	worker := &api.NodeRoles{KubernetesWorker: &api.NodeRoles_KubernetesWorker{}}
	if err := srv.Send(&api.WatchEvent{Nodes: []*api.Node{{Id: c.id, State: api.NodeState_NODE_STATE_UP, Roles: worker}}}); err != nil {
		return err
	}
	select {
	case <-c.refuse:
		return refusal
	case <-srv.Context().Done():
		return srv.Context().Err()
	}
}

// TestRolefetchGivesUpWhenDecommissioned: a worker whose stream the
// curator ends because the cluster decommissioned it, without the empty
// roles of the decommissioning, gives up its roles, empties roles.pb and
// stops asking.
func TestRolefetchGivesUpWhenDecommissioned(t *testing.T) {
	ctx := fixture.Context(t)
	ca := identitytest.NewCA(t, "test CA")
	creds := ca.Node(t)
	cur := &decommissioningCurator{id: creds.ID(), refuse: make(chan struct{})}
	var (
		roles          memory.Value[*api.NodeRoles]
		decommissioned memory.Value[bool]
	)
	decommissioned.Set(false)
	w := &workerRolefetch{roles: &roles, release: &memory.Value[*api.DesiredRelease]{}, decommissioned: &decommissioned}
	runRolefetch(t, w, creds, cur)
	rolesFile := func(want *api.NodeRoles) error {
		return wantProtoFile(w.paths.node.Roles.Read, want)
	}

	worker := &api.NodeRoles{KubernetesWorker: &api.NodeRoles_KubernetesWorker{}}
	if _, err := event.Get(ctx, &roles, event.Filter(func(r *api.NodeRoles) bool { return proto.Equal(r, worker) })); err != nil {
		t.Fatalf("waiting for the worker role: %v", err)
	}
	if err := rolesFile(worker); err != nil {
		t.Fatalf("roles.pb before the decommissioning: %v", err)
	}
	close(cur.refuse)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := event.Get(ctx, &roles, event.Filter(func(r *api.NodeRoles) bool { return proto.Equal(r, &api.NodeRoles{}) })); err != nil {
		t.Fatalf("waiting for the roles to be given up: %v", err)
	}
	if err := rolesFile(&api.NodeRoles{}); err != nil {
		t.Errorf("roles.pb after the decommissioning: %v", err)
	}
	// The connection to the curators closes on it.
	if _, err := event.Get(ctx, &decommissioned, event.Filter(func(gone bool) bool { return gone })); err != nil {
		t.Errorf("waiting for the node to be said decommissioned: %v", err)
	}
	// A restart of the worker would open a second Watch; giving up, it
	// asks no more.
	time.Sleep(time.Second)
	if n := cur.watches.Load(); n != 1 {
		t.Errorf("%d Watch calls, want 1: the decommissioned node asked again", n)
	}
}

// FuzzParseRoles feeds parseRoles what a damaged or tampered roles.pb might
// hold: it must return roles or an error, never panic, and roles it
// accepts must survive being written back and read again.
func FuzzParseRoles(f *testing.F) {
	for _, r := range []*api.NodeRoles{
		{},
		{ConsensusMember: &api.NodeRoles_ConsensusMember{}},
		{
			ConsensusMember:      &api.NodeRoles_ConsensusMember{},
			KubernetesController: &api.NodeRoles_KubernetesController{},
			KubernetesWorker:     &api.NodeRoles_KubernetesWorker{},
		},
	} {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x0a})             // a field cut short
	f.Add([]byte{0x0a, 0x05, 0x01}) // a length past the end
	f.Add([]byte("not a protobuf message at all"))

	f.Fuzz(func(t *testing.T, b []byte) {
		roles, err := parseRoles(b)
		if err != nil {
			if roles != nil {
				t.Errorf("parseRoles(%x) = %v, %v: roles with an error", b, roles, err)
			}
			return
		}
		if roles == nil {
			t.Fatalf("parseRoles(%x) = nil, nil", b)
		}
		// Whatever the roles, their marker parses back to the same names.
		names := roleNames(roles)
		if m, ok := marker.Parse(marker.Format(marker.Roles, "roles", names)); !ok || m.Get("roles") != names {
			t.Errorf("the roles marker of %q parses as %+v, %v", names, m, ok)
		}
		again, err := proto.MarshalOptions{Deterministic: true}.Marshal(roles)
		if err != nil {
			t.Fatalf("marshalling roles parsed from %x: %v", b, err)
		}
		back, err := parseRoles(again)
		if err != nil {
			t.Fatalf("parseRoles(%x) of roles written back: %v", again, err)
		}
		if !proto.Equal(roles, back) {
			t.Errorf("roles parsed from %x changed when written back: %v, then %v", b, roles, back)
		}
	})
}
