package curator

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/kubernetes"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/ociimage/ocitest"
	"cairn.dev/cairn/pkg/release"
	"cairn.dev/cairn/pkg/release/releasetest"
	"cairn.dev/cairn/proto/api"
)

// TestRollout drives rollouts over a cluster of three nodes whose node
// side (node/update) is played by agents speaking the real curator API:
// they beat, watch their own record, and report their update status as a
// node does. It checks that a good release reaches every node one at a
// time, the member first, draining the Kubernetes worker; that a node
// whose update fails halts the rollout with the release recorded bad and
// the nodes after it untouched; that a bad release is refused until
// cleared; and that an abort touches no further node while the one under
// way is followed to its end.
func TestRollout(t *testing.T) {
	drains := &recordingDrainer{}
	c := newTestCluster(t, WithHeartbeatInterval(400*time.Millisecond), WithRolloutInterval(100*time.Millisecond), withDrainer(drains))
	ctx := fixture.Context(t)
	addr := c.nodes[0].addr.String()
	m := c.mgmt(t, addr)
	n1, n2 := newTestNode(t), newTestNode(t)
	c.enrol(t, addr, n1)
	c.enrol(t, addr, n2)
	yes := true
	if _, err := m.UpdateNodeRoles(ctx, &api.UpdateNodeRolesRequest{NodeId: n2.id(), KubernetesWorker: &yes}); err != nil {
		t.Fatalf("UpdateNodeRoles: %v", err)
	}

	reg, key, push := releaseRegistry(t, m)
	log := &agentLog{}
	agents := startAgents(t, addr, log, c.nodes[0], n1, n2)
	others := []string{n1.id(), n2.id()}
	slices.Sort(others)
	order := append([]string{c.nodes[0].id()}, others...)

	// Refusals, before anything starts.
	for _, tc := range []struct {
		name, ref string
		want      codes.Code
	}{
		{"not a reference", "nonsense", codes.InvalidArgument},
		{"signed by an untrusted key", push("1.1.0", releasetest.PrivateKey(2)).Reference, codes.FailedPrecondition},
		{"not in the registry", reg.Host() + "/cairn/release:9.9.9", codes.FailedPrecondition},
	} {
		if _, err := m.StartRollout(ctx, &api.StartRolloutRequest{Reference: tc.ref}); status.Code(err) != tc.want {
			t.Errorf("StartRollout of a release %s = %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := m.AbortRollout(ctx, &api.AbortRolloutRequest{}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("AbortRollout with none running = %v, want FailedPrecondition", err)
	}

	t.Run("good release", func(t *testing.T) {
		// A staging that fails is not the step's failure: the node
		// installs the release at its turn.
		agents[order[2]].setStageFail("no space left on the data partition")
		defer agents[order[2]].setStageFail("")
		good := push("1.2.0", key)
		r, err := m.StartRollout(ctx, &api.StartRolloutRequest{Reference: good.Reference})
		if err != nil {
			t.Fatalf("StartRollout: %v", err)
		}
		if !strings.Contains(r.Reference, "@sha256:") || r.Version != "1.2.0" {
			t.Errorf("the rollout names %s of version %s, want the release pinned by digest, 1.2.0", r.Reference, r.Version)
		}
		if got := stepNodes(r); !slices.Equal(got, order) {
			t.Errorf("steps in order %v, want the member first, then by ID: %v", got, order)
		}
		if again, err := m.StartRollout(ctx, &api.StartRolloutRequest{Reference: good.Reference}); err != nil || again.Id != r.Id {
			t.Errorf("StartRollout of the same release while it runs = %v, %v, want rollout %s", again, err, r.Id)
		}
		other := push("1.2.1", key)
		if _, err := m.StartRollout(ctx, &api.StartRolloutRequest{Reference: other.Reference}); status.Code(err) != codes.FailedPrecondition {
			t.Errorf("StartRollout of another release while one runs = %v, want FailedPrecondition", err)
		}
		end := waitRollout(t, m, r.Id)
		if end.Rollout.State != api.RolloutState_ROLLOUT_STATE_DONE {
			t.Fatalf("the rollout ended %v: %s\n%v", end.Rollout.State, end.Rollout.Reason, end.Rollout.Steps)
		}
		if got := log.given(r.Id); !slices.Equal(got, order) {
			t.Errorf("nodes were given the release in order %v, want %v", got, order)
		}
		log.checkOneAtATime(t, r.Id)
		// The nodes whose turn had not come staged the release while the
		// member took its turn.
		history := log.history(r.Id, true)
		memberDone := slices.Index(history, order[0]+" done")
		for _, want := range []string{order[1] + " staged", order[2] + " staging failed"} {
			if i := slices.Index(history, want); i < 0 || i > memberDone {
				t.Errorf("the release's events were %v, want %q before the member was done", history, want)
			}
		}
		if slices.Contains(history, order[0]+" staged") {
			t.Errorf("the member, whose turn came first, was given the release to stage: %v", history)
		}
		for _, s := range end.Rollout.Steps {
			if s.Phase != api.StepPhase_STEP_PHASE_DONE || s.StartedUnixNanos == 0 || s.FinishedUnixNanos < s.StartedUnixNanos {
				t.Errorf("step %v, want DONE with its times", s)
			}
		}
		if got := drains.calls(); !slices.Equal(got, []string{"drain " + n2.id(), "uncordon " + n2.id()}) {
			t.Errorf("the Kubernetes API saw %v, want the worker drained once, then uncordoned", got)
		}
		nodes, err := m.GetNodes(ctx, &api.GetNodesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes.Nodes {
			if n.DesiredRelease != nil || n.ReleaseToStage != nil || n.GetStatus().GetVersion() != "1.2.0" {
				t.Errorf("node %s after the rollout: desired %v, to stage %v, runs %s; want none given, 1.2.0", n.Id, n.DesiredRelease, n.ReleaseToStage, n.GetStatus().GetVersion())
			}
		}
	})

	t.Run("failing release halts", func(t *testing.T) {
		agents[order[1]].setFail("its trial boot ended before it was healthy")
		bad := push("1.3.0", key)
		r, err := m.StartRollout(ctx, &api.StartRolloutRequest{Reference: bad.Reference})
		if err != nil {
			t.Fatalf("StartRollout: %v", err)
		}
		end := waitRollout(t, m, r.Id)
		if end.Rollout.State != api.RolloutState_ROLLOUT_STATE_HALTED || !strings.Contains(end.Rollout.Reason, order[1]) || !strings.Contains(end.Rollout.Reason, "before it was healthy") {
			t.Fatalf("the rollout ended %v: %q, want HALTED naming %s and its reason", end.Rollout.State, end.Rollout.Reason, order[1])
		}
		if got := log.given(r.Id); !slices.Equal(got, order[:2]) {
			t.Errorf("nodes given the failing release: %v, want %v and none after", got, order[:2])
		}
		if s := end.Rollout.Steps[2]; s.Phase != api.StepPhase_STEP_PHASE_PENDING {
			t.Errorf("the step after the failure is %v, want PENDING", s)
		}
		// The node whose turn never came staged the release, and is no
		// longer asked to.
		if !slices.Contains(log.history(r.Id, true), order[2]+" staged") {
			t.Errorf("the release's events were %v, want %s to have staged it", log.history(r.Id, true), order[2])
		}
		fixture.Eventually(t, 10*time.Second, "the release to stage taken from "+order[2], func() error {
			nodes, err := m.GetNodes(ctx, &api.GetNodesRequest{})
			if err != nil {
				return err
			}
			for _, n := range nodes.Nodes {
				if n.DesiredRelease != nil || n.ReleaseToStage != nil {
					return fmt.Errorf("node %s is still given %v to install, %v to stage", n.Id, n.DesiredRelease, n.ReleaseToStage)
				}
			}
			return nil
		})
		digest := end.Rollout.Digest
		if len(end.BadReleases) != 1 || end.BadReleases[0].Digest != digest || end.BadReleases[0].NodeId != order[1] {
			t.Fatalf("bad releases %v, want %s recorded on %s", end.BadReleases, digest, order[1])
		}
		if _, err := m.StartRollout(ctx, &api.StartRolloutRequest{Reference: bad.Reference}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "recorded bad") {
			t.Errorf("StartRollout of the bad release = %v, want FailedPrecondition saying it is recorded bad", err)
		}
		if _, err := m.ClearBadRelease(ctx, &api.ClearBadReleaseRequest{Digest: digest}); err != nil {
			t.Fatalf("ClearBadRelease: %v", err)
		}
		if _, err := m.ClearBadRelease(ctx, &api.ClearBadReleaseRequest{Digest: digest}); status.Code(err) != codes.NotFound {
			t.Errorf("ClearBadRelease of a release not recorded = %v, want NotFound", err)
		}
	})

	t.Run("abort", func(t *testing.T) {
		agents[order[1]].setFail("")
		// The first node to be given the release stays installing until
		// the rollout was aborted.
		hold := agents[order[0]].hold()
		again := push("1.3.1", key)
		r, err := m.StartRollout(ctx, &api.StartRolloutRequest{Reference: again.Reference})
		if err != nil {
			t.Fatalf("StartRollout: %v", err)
		}
		log.waitGiven(t, r.Id, order[0])
		if a, err := m.AbortRollout(ctx, &api.AbortRolloutRequest{}); err != nil || a.State != api.RolloutState_ROLLOUT_STATE_ABORTED {
			t.Fatalf("AbortRollout = %v, %v", a, err)
		}
		if a, err := m.AbortRollout(ctx, &api.AbortRolloutRequest{}); err != nil || a.Id != r.Id {
			t.Errorf("AbortRollout again while its node is under way = %v, %v, want rollout %s as it is", a, err, r.Id)
		}
		close(hold)
		deadline := time.Now().Add(20 * time.Second)
		for {
			got, err := m.GetRollout(ctx, &api.GetRolloutRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if s := got.Rollout.Steps[0]; s.Phase == api.StepPhase_STEP_PHASE_DONE {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the node under way when the rollout was aborted was not followed to its end: %v", got.Rollout.Steps)
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(time.Second)
		if got := log.given(r.Id); !slices.Equal(got, order[:1]) {
			t.Errorf("nodes given the release of the aborted rollout: %v, want only %s", got, order[0])
		}
	})

	t.Run("drain timeout halts", func(t *testing.T) {
		drains.holdPods(2)
		next := push("1.4.0", key)
		r, err := m.StartRollout(ctx, &api.StartRolloutRequest{Reference: next.Reference, DrainTimeoutSeconds: 1})
		if err != nil {
			t.Fatalf("StartRollout: %v", err)
		}
		end := waitRollout(t, m, r.Id)
		if end.Rollout.State != api.RolloutState_ROLLOUT_STATE_HALTED || !strings.Contains(end.Rollout.Reason, "drain timed out") || !strings.Contains(end.Rollout.Reason, "2 pods left") {
			t.Fatalf("the rollout ended %v: %q, want HALTED as the worker's drain timed out with 2 pods left", end.Rollout.State, end.Rollout.Reason)
		}
		if slices.Contains(log.given(r.Id), n2.id()) {
			t.Errorf("the worker whose drain timed out was given the release")
		}
		if calls := drains.calls(); calls[len(calls)-1] != "uncordon "+n2.id() {
			t.Errorf("the Kubernetes API saw %v, want the worker uncordoned last", calls)
		}
	})

	t.Run("two unavailable at once", func(t *testing.T) {
		drains.holdPods(0)
		// Both nodes that are no members stay installing until both
		// were given the release: only two under way at once gets there.
		holds := []chan struct{}{agents[others[0]].hold(), agents[others[1]].hold()}
		r, err := m.StartRollout(ctx, &api.StartRolloutRequest{Reference: push("1.5.0", key).Reference, MaxUnavailable: 2})
		if err != nil {
			t.Fatalf("StartRollout: %v", err)
		}
		log.waitGiven(t, r.Id, others[0])
		log.waitGiven(t, r.Id, others[1])
		for _, h := range holds {
			close(h)
		}
		end := waitRollout(t, m, r.Id)
		if end.Rollout.State != api.RolloutState_ROLLOUT_STATE_DONE {
			t.Fatalf("the rollout ended %v: %s", end.Rollout.State, end.Rollout.Reason)
		}
		// The member still went alone, before the others.
		member := c.nodes[0].id()
		if got := log.history(r.Id, false); len(got) < 2 || !slices.Equal(got[:2], []string{member + " given", member + " done"}) {
			t.Errorf("the release's events were %v, want the member given it and done first, alone", got)
		}
	})
}

// TestRolloutMembers rolls a release out over three consensus members:
// one at a time, the leader's own node last, and no member's turn comes
// while another member is not heard from.
func TestRolloutMembers(t *testing.T) {
	ports := &peerPorts{}
	c := newTestCluster(t, ports.option(), WithHeartbeatInterval(400*time.Millisecond), WithRolloutInterval(100*time.Millisecond))
	ctx := fixture.Context(t)
	n0 := c.nodes[0]
	ports.set(n0.id(), n0.member.Config.Ports.EtcdPeer)
	addr := n0.addr.String()
	for range 2 {
		c.addMember(t, addr, newTestNode(t), ports)
	}
	m := c.mgmt(t, addr)
	_, key, push := releaseRegistry(t, m)
	log := &agentLog{}
	agents := startAgents(t, addr, log, c.nodes...)
	others := []string{c.nodes[1].id(), c.nodes[2].id()}
	slices.Sort(others)
	order := append(others, n0.id())

	// The member whose turn would come second falls silent.
	silent := agents[order[1]]
	silent.silence(true)
	time.Sleep(2 * time.Second)
	r, err := m.StartRollout(ctx, &api.StartRolloutRequest{Reference: push("1.2.0", key).Reference})
	if err != nil {
		t.Fatalf("StartRollout: %v", err)
	}
	if got := stepNodes(r); !slices.Equal(got, order) {
		t.Errorf("steps in order %v, want the members by ID, the leader's own node last: %v", got, order)
	}
	time.Sleep(2 * time.Second)
	got, err := m.GetRollout(ctx, &api.GetRolloutRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if given := log.given(r.Id); len(given) != 0 {
		t.Errorf("members were given the release while %s was silent: %v", order[1], given)
	}
	if msg := got.Rollout.Steps[0].Message; !strings.Contains(msg, "waiting: consensus member "+order[1]) {
		t.Errorf("the first step says %q, want it waiting for the silent member", msg)
	}
	silent.silence(false)
	end := waitRollout(t, m, r.Id)
	if end.Rollout.State != api.RolloutState_ROLLOUT_STATE_DONE {
		t.Fatalf("the rollout ended %v: %s", end.Rollout.State, end.Rollout.Reason)
	}
	if given := log.given(r.Id); !slices.Equal(given, order) {
		t.Errorf("members were given the release in order %v, want %v", given, order)
	}
	log.checkOneAtATime(t, r.Id)
}

// releaseRegistry starts a registry that the cluster of m reaches over
// plain HTTP and whose releases signed by key it trusts, and returns a
// function that pushes a release of a version signed by a key.
func releaseRegistry(t *testing.T, m api.ManagementClient) (*ocitest.Registry, release.PrivateKey, func(string, release.PrivateKey) *releasetest.Release) {
	t.Helper()
	ctx := fixture.Context(t)
	reg := ocitest.New(t, "cairn/release")
	key := releasetest.PrivateKey(1)
	if _, err := m.UpdateReleaseKeys(ctx, &api.UpdateReleaseKeysRequest{Add: []string{key.Public().String()}}); err != nil {
		t.Fatalf("UpdateReleaseKeys: %v", err)
	}
	if _, err := m.UpdateRegistries(ctx, &api.UpdateRegistriesRequest{Registries: &api.Registries{PlainHttp: []string{reg.Host()}}}); err != nil {
		t.Fatalf("UpdateRegistries: %v", err)
	}
	push := func(version string, key release.PrivateKey) *releasetest.Release {
		system, params := releasetest.SystemImage(t, 4, nil)
		return releasetest.Push(t, reg, key, release.Metadata{Version: version, Architecture: runtime.GOARCH, Verity: params.String()}, []byte("uki "+version), system)
	}
	return reg, key, push
}

// startAgents starts an agent, running 1.0.0, for each of nodes, which
// call the curator at addr; the agents of consensus members say their
// curators serve.
func startAgents(t *testing.T, addr string, log *agentLog, nodes ...*testNode) map[string]*agent {
	agents := map[string]*agent{}
	for _, n := range nodes {
		a := &agent{t: t, n: n, addr: addr, version: "1.0.0", log: log}
		if n.stopCurator != nil {
			a.curatorPort = int32(n.addr.Port())
		}
		agents[n.id()] = a
		go a.run(fixture.Context(t))
	}
	return agents
}

// waitRollout waits until rollout id is no longer running.
func waitRollout(t *testing.T, m api.ManagementClient, id string) *api.GetRolloutResponse {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got, err := m.GetRollout(fixture.Context(t), &api.GetRolloutRequest{})
		if err != nil {
			t.Fatalf("GetRollout: %v", err)
		}
		if got.Rollout.GetId() == id && got.Rollout.State != api.RolloutState_ROLLOUT_STATE_RUNNING {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("rollout %s still runs after a minute: %v", id, got.Rollout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func stepNodes(r *api.Rollout) []string {
	var ids []string
	for _, s := range r.Steps {
		ids = append(ids, s.NodeId)
	}
	return ids
}

// withDrainer makes the curator drain workers through d.
func withDrainer(d drainer) Option {
	return func(o *options) { o.drainer = d }
}

// recordingDrainer plays a Kubernetes API with no pods: it records the
// calls.
type recordingDrainer struct {
	mu  sync.Mutex
	log []string
	// held is how many pods a disruption budget keeps on every node.
	held int
}

func (d *recordingDrainer) holdPods(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.held = n
}

func (d *recordingDrainer) Drain(_ context.Context, node string) (kubernetes.DrainRound, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.log = append(d.log, "drain "+node)
	return kubernetes.DrainRound{Held: d.held, Remaining: d.held}, nil
}

func (d *recordingDrainer) Cordon(_ context.Context, node string, on bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.log = append(d.log, map[bool]string{true: "cordon ", false: "uncordon "}[on]+node)
	return nil
}

func (d *recordingDrainer) calls() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.log)
}

// agentLog records what the agents saw and did, in order.
type agentLog struct {
	mu     sync.Mutex
	events []agentEvent
}

type agentEvent struct {
	rollout, node, what string
}

func (l *agentLog) add(rollout, node, what string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, agentEvent{rollout, node, what})
}

// given lists the nodes given rollout's release, in order.
func (l *agentLog) given(rollout string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []string
	for _, e := range l.events {
		if e.rollout == rollout && e.what == "given" {
			ids = append(ids, e.node)
		}
	}
	return ids
}

// checkOneAtATime checks that no node was given rollout's release before
// the one before it reported DONE.
func (l *agentLog) checkOneAtATime(t *testing.T, rollout string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	busy := ""
	for _, e := range l.events {
		if e.rollout != rollout {
			continue
		}
		switch e.what {
		case "given":
			if busy != "" {
				t.Errorf("node %s was given the release while %s was updating", e.node, busy)
			}
			busy = e.node
		case "done":
			busy = ""
		}
	}
}

// history lists what happened to rollout's release at the nodes' turns,
// in order, as "node what"; with stagings, their events too.
func (l *agentLog) history(rollout string, stagings bool) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var list []string
	for _, e := range l.events {
		if e.rollout == rollout && (stagings || !strings.HasPrefix(e.what, "stag")) {
			list = append(list, e.node+" "+e.what)
		}
	}
	return list
}

func (l *agentLog) waitGiven(t *testing.T, rollout, node string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !slices.Contains(l.given(rollout), node) {
		if time.Now().After(deadline) {
			t.Fatalf("node %s was not given rollout %s's release", node, rollout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// An agent plays a node's part in rollouts: it beats, and when its record
// names a release of a rollout it has not acted on, reports installing,
// then runs it (or reports the failure it was told to).
type agent struct {
	t           *testing.T
	n           *testNode
	addr        string
	curatorPort int32
	log         *agentLog

	// quiet stops the agent's heartbeats while set.
	quiet atomic.Bool

	mu           sync.Mutex
	version      string
	update       *api.UpdateStatus
	failure      string
	stageFailure string
	holdC        chan struct{}
	// working is held while the agent stages or installs: a node does
	// one at a time.
	working sync.Mutex
}

// silence stops (or starts again) the agent's heartbeats.
func (a *agent) silence(on bool) { a.quiet.Store(on) }

func (a *agent) setFail(why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.failure = why
}

// setStageFail makes the agent's stagings fail for why.
func (a *agent) setStageFail(why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stageFailure = why
}

// hold makes the agent's next install wait until the returned channel is
// closed.
func (a *agent) hold() chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.holdC = make(chan struct{})
	return a.holdC
}

func (a *agent) run(ctx context.Context) {
	cl := a.n.client(a.t, a.addr)
	go func() {
		for ctx.Err() == nil {
			if !a.quiet.Load() {
				_, _ = cl.Heartbeat(ctx, &api.HeartbeatRequest{})
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	a.push(ctx, cl)
	acted := map[string]bool{}
	for ctx.Err() == nil {
		stream, err := cl.Watch(ctx, &api.WatchRequest{Kind: &api.WatchRequest_NodeInCluster_{NodeInCluster: &api.WatchRequest_NodeInCluster{NodeId: a.n.id()}}})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for {
			ev, err := stream.Recv()
			if err != nil {
				break
			}
			for _, n := range ev.Nodes {
				// As a node's rolefetch does: its turn first.
				d := n.GivenRelease()
				key := d.GetRolloutId()
				if d.GetStageOnly() {
					key += " staging"
				}
				if d == nil || acted[key] {
					continue
				}
				acted[key] = true
				if d.StageOnly {
					// A node stages, then takes its turn.
					a.stage(ctx, cl, d)
					continue
				}
				a.log.add(d.RolloutId, a.n.id(), "given")
				go a.act(ctx, cl, d)
			}
		}
	}
}

// stage stages desired release d, to be staged only, as a node would:
// it reports its work, and STAGED or the failure it was told to.
func (a *agent) stage(ctx context.Context, cl api.CuratorClient, d *api.DesiredRelease) {
	a.working.Lock()
	defer a.working.Unlock()
	a.set(ctx, cl, "", &api.UpdateStatus{RolloutId: d.RolloutId, Version: d.Version, Phase: api.UpdatePhase_UPDATE_PHASE_INSTALLING, StageOnly: true})
	a.mu.Lock()
	failure := a.stageFailure
	a.mu.Unlock()
	time.Sleep(100 * time.Millisecond)
	if failure != "" {
		a.set(ctx, cl, "", &api.UpdateStatus{RolloutId: d.RolloutId, Version: d.Version, Phase: api.UpdatePhase_UPDATE_PHASE_FAILED, Reason: failure, StageOnly: true})
		a.log.add(d.RolloutId, a.n.id(), "staging failed")
		return
	}
	a.set(ctx, cl, "", &api.UpdateStatus{RolloutId: d.RolloutId, Version: d.Version, Phase: api.UpdatePhase_UPDATE_PHASE_STAGED, StageOnly: true})
	a.log.add(d.RolloutId, a.n.id(), "staged")
}

// act carries out desired release d as a node would.
func (a *agent) act(ctx context.Context, cl api.CuratorClient, d *api.DesiredRelease) {
	a.working.Lock()
	defer a.working.Unlock()
	a.set(ctx, cl, "", &api.UpdateStatus{RolloutId: d.RolloutId, Version: d.Version, Phase: api.UpdatePhase_UPDATE_PHASE_INSTALLING})
	a.mu.Lock()
	hold, failure := a.holdC, a.failure
	a.holdC = nil
	a.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return
		}
	}
	time.Sleep(200 * time.Millisecond)
	if failure != "" {
		a.set(ctx, cl, "", &api.UpdateStatus{RolloutId: d.RolloutId, Version: d.Version, Phase: api.UpdatePhase_UPDATE_PHASE_FAILED, Reason: failure})
		a.log.add(d.RolloutId, a.n.id(), "failed")
		return
	}
	a.set(ctx, cl, d.Version, &api.UpdateStatus{RolloutId: d.RolloutId, Version: d.Version, Phase: api.UpdatePhase_UPDATE_PHASE_DONE})
	a.log.add(d.RolloutId, a.n.id(), "done")
}

// set changes the agent's version (unless empty) and update status, and
// pushes its status.
func (a *agent) set(ctx context.Context, cl api.CuratorClient, version string, u *api.UpdateStatus) {
	a.mu.Lock()
	if version != "" {
		a.version = version
	}
	a.update = u
	a.mu.Unlock()
	a.push(ctx, cl)
}

func (a *agent) push(ctx context.Context, cl api.CuratorClient) {
	a.mu.Lock()
	st := &api.NodeStatus{ExternalAddress: "127.0.0.1", Version: a.version, TimestampUnixNanos: time.Now().UnixNano(), Update: a.update}
	a.mu.Unlock()
	if a.curatorPort != 0 {
		st.RunningCurator = &api.NodeStatus_RunningCurator{Port: a.curatorPort}
	}
	for ctx.Err() == nil {
		_, err := cl.UpdateNodeStatus(ctx, &api.UpdateNodeStatusRequest{NodeId: a.n.id(), Status: st})
		if err == nil {
			return
		}
		if status.Code(err) == codes.InvalidArgument {
			a.t.Errorf("node %s's status refused: %v", a.n.id(), err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
