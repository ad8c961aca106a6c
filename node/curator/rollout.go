package curator

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/kubernetes"
	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/pkg/supervisor"
	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/proto/private"
)

// A cluster rollout updates the cluster's nodes to one release, one step
// per node, driven by the curator leader a round at a time. Everything it
// knows is in etcd (the rollout, the nodes' records and statuses), so a
// new leader, after the old one rebooted into the release, goes on where
// it stopped.
//
//	PENDING ──turn──▶ DRAINING ──no pods left──▶ UPDATING ──node DONE, healthy──▶ DONE
//	                     │ drain timeout            │ node FAILED, or no word in time
//	                     ▼                          ▼
//	                  rollout HALTED            FAILED, release bad, rollout HALTED
//
// A step's turn comes in order: the consensus members one at a time, and
// only while every other member is healthy (the leader's own node last);
// then the others, up to max_unavailable at once. Until its turn, a node
// is given the release to stage (Node.release_to_stage), which it writes
// while it serves. A node's part is its own (node/update): it installs
// the release it was given (or finds it staged), boots it for a trial and
// reports how it went in its status.
const (
	// DefaultRolloutInterval is how often the leader looks at a running
	// rollout.
	DefaultRolloutInterval = 2 * time.Second
	// DefaultDrainTimeout is how long a drain may wait for disruption
	// budgets.
	DefaultDrainTimeout = 10 * time.Minute
	// defaultTrialDeadline is the nodes' own default trial deadline
	// (node/update), which the leader's patience adds to.
	defaultTrialDeadline = 10 * time.Minute
	// installAllowance is how long a node may take, beyond its trial
	// deadline, to download and write a release and reboot.
	installAllowance = 30 * time.Minute
)

// WithRolloutInterval sets how often the leader looks at a running
// rollout; tests shorten it.
func WithRolloutInterval(d time.Duration) Option {
	return func(o *options) { o.rolloutInterval = d }
}

// A drainer drains Kubernetes Nodes (kubernetes.Drainer).
type drainer interface {
	Drain(ctx context.Context, node string) (kubernetes.DrainRound, error)
	Cordon(ctx context.Context, node string, on bool) error
}

// driveRollouts runs the rounds of the rollout while this curator leads.
// It is a runnable of the election. A failed round is tried again at the
// next tick; the same failure is logged once.
func (c *curator) driveRollouts(ctx context.Context) error {
	lastErr := ""
	return c.whileLeading(ctx, c.opts.rolloutInterval, func(ctx context.Context) error {
		err := c.rolloutRound(ctx)
		switch {
		case err != nil && err.Error() != lastErr:
			supervisor.Logger(ctx).Warningf("Rollout: %v", err)
			lastErr = err.Error()
		case err == nil:
			lastErr = ""
		}
		return nil
	})
}

// rolloutRound moves the rollout on by what the nodes did since the last
// round, and stores it if anything changed.
func (c *curator) rolloutRound(ctx context.Context) error {
	r, rev, err := c.getRollout(ctx)
	if err != nil || r == nil {
		return err
	}
	if !rolloutActive(r) {
		return c.unstage(ctx, r)
	}
	nodes, _, err := c.listNodes(ctx)
	if err != nil {
		return err
	}
	before := proto.Clone(r).(*api.Rollout)
	d := &rolloutDriver{c: c, r: r, nodes: map[string]*private.Node{}, now: time.Now()}
	for _, n := range nodes {
		d.nodes[identity.NodeID(n.PublicKey)] = n
	}
	d.round(ctx)
	if proto.Equal(before, r) {
		return nil
	}
	ok, err := c.putRollout(ctx, r, rev)
	if err != nil {
		return err
	}
	if !ok {
		// The owner aborted or started one in between: the next round
		// reads it. What this round did to nodes is in their records.
		return nil
	}
	log := supervisor.Logger(ctx)
	for i, s := range r.Steps {
		if was := before.Steps[i]; s.Phase != was.Phase || s.Message != was.Message {
			log.Infof("Rollout %s: node %s: %s: %s", r.Id, s.NodeId, phaseName(s.Phase), s.Message)
		}
	}
	if r.State != before.State {
		log.Infof("Rollout %s of %s: %s: %s", r.Id, r.Version, stateName(r.State), r.Reason)
	}
	return nil
}

// rolloutActive says the rollout still has work: it runs, or it was
// aborted while nodes were under way.
func rolloutActive(r *api.Rollout) bool {
	if r.State == api.RolloutState_ROLLOUT_STATE_RUNNING {
		return true
	}
	return r.State == api.RolloutState_ROLLOUT_STATE_ABORTED && slices.ContainsFunc(r.Steps, stepActive)
}

// stepActive says a step holds its node out of service.
func stepActive(s *api.RolloutStep) bool {
	return s.Phase == api.StepPhase_STEP_PHASE_DRAINING || s.Phase == api.StepPhase_STEP_PHASE_UPDATING
}

// rolloutDriver is one round of a rollout.
type rolloutDriver struct {
	c     *curator
	r     *api.Rollout
	nodes map[string]*private.Node
	now   time.Time
}

func (d *rolloutDriver) round(ctx context.Context) {
	for _, s := range d.r.Steps {
		switch s.Phase {
		case api.StepPhase_STEP_PHASE_DRAINING:
			d.drain(ctx, s)
		case api.StepPhase_STEP_PHASE_UPDATING:
			d.watchUpdate(ctx, s)
		}
	}
	if d.r.State != api.RolloutState_ROLLOUT_STATE_RUNNING {
		return
	}
	d.startSteps()
	if !slices.ContainsFunc(d.r.Steps, func(s *api.RolloutStep) bool { return s.Phase != api.StepPhase_STEP_PHASE_DONE }) {
		d.r.State = api.RolloutState_ROLLOUT_STATE_DONE
		d.r.Reason = fmt.Sprintf("every node runs %s", d.r.Version)
		d.r.EndedUnixNanos = d.now.UnixNano()
		return
	}
	d.stageAhead(ctx)
}

// desired is the release a step's node is given: to stage only, ahead
// of its turn, or to install and boot.
func (d *rolloutDriver) desired(stageOnly bool) *api.DesiredRelease {
	return &api.DesiredRelease{
		RolloutId:            d.r.Id,
		Reference:            d.r.Reference,
		Version:              d.r.Version,
		AllowDowngrade:       d.r.AllowDowngrade,
		TrialDeadlineSeconds: d.r.TrialDeadlineSeconds,
		StageOnly:            stageOnly,
	}
}

// stageAhead gives every node whose turn has not come the release to
// stage only: it downloads, writes and reads it back while it still
// serves, and at its turn boots what it staged, so that a step holds its
// node out of service for its drain and reboot alone, and the nodes'
// stagings overlap. A staging that failed is not the step's failure: the
// node installs the release again at its turn, whose outcome counts.
func (d *rolloutDriver) stageAhead(ctx context.Context) {
	for _, s := range d.r.Steps {
		n := d.nodes[s.NodeId]
		if s.Phase != api.StepPhase_STEP_PHASE_PENDING || n == nil || n.FsmState != api.NodeState_NODE_STATE_UP ||
			n.GetStatus().GetVersion() == d.r.Version {
			continue
		}
		if n.GetReleaseToStage().GetRolloutId() != d.r.Id {
			if err := d.c.setReleases(ctx, s.NodeId, func(n *private.Node) { n.ReleaseToStage = d.desired(true) }); err != nil {
				s.Message = "giving the node the release to stage: " + err.Error()
			}
			continue
		}
		if strings.HasPrefix(s.Message, "waiting: ") {
			// Why its turn waits says more.
			continue
		}
		switch u := n.GetStatus().GetUpdate(); {
		case u.GetRolloutId() != d.r.Id || !u.GetStageOnly():
		case u.Phase == api.UpdatePhase_UPDATE_PHASE_INSTALLING:
			s.Message = "staging " + d.r.Version + " ahead of its turn"
		case u.Phase == api.UpdatePhase_UPDATE_PHASE_STAGED:
			s.Message = "staged " + d.r.Version + ", waiting for its turn"
		case u.Phase == api.UpdatePhase_UPDATE_PHASE_FAILED:
			s.Message = "staging failed (it installs at its turn): " + u.Reason
		}
	}
}

// unstage takes the releases to stage that rollout r gave, once r ended,
// from the nodes whose turn never came; once per rollout while this
// curator leads. What a node staged stays in its other slot, unbooted.
func (c *curator) unstage(ctx context.Context, r *api.Rollout) error {
	if c.unstaged == r.Id {
		return nil
	}
	nodes, _, err := c.listNodes(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if n.GetReleaseToStage().GetRolloutId() != r.Id {
			continue
		}
		id := identity.NodeID(n.PublicKey)
		err := c.setReleases(ctx, id, func(n *private.Node) {
			if n.GetReleaseToStage().GetRolloutId() == r.Id {
				n.ReleaseToStage = nil
			}
		})
		if err != nil {
			return fmt.Errorf("when taking rollout %s's release to stage from node %s: %w", r.Id, id, err)
		}
	}
	c.unstaged = r.Id
	return nil
}

// startSteps starts the steps whose turn came.
func (d *rolloutDriver) startSteps() {
	active := 0
	for _, s := range d.r.Steps {
		if stepActive(s) {
			active++
		}
	}
	for _, s := range d.r.Steps {
		if s.Phase != api.StepPhase_STEP_PHASE_PENDING {
			continue
		}
		n := d.nodes[s.NodeId]
		switch {
		case n == nil || n.FsmState != api.NodeState_NODE_STATE_UP:
			d.finish(s, api.StepPhase_STEP_PHASE_DONE, "skipped: the node is no longer UP")
			continue
		case n.GetStatus().GetVersion() == d.r.Version:
			d.finish(s, api.StepPhase_STEP_PHASE_DONE, "already runs "+d.r.Version)
			continue
		}
		member := n.GetRoles().GetConsensusMember() != nil
		if member && active > 0 {
			// Members go alone.
			return
		}
		if !member && (active >= int(max(1, d.r.MaxUnavailable)) || d.memberActive()) {
			return
		}
		if why := d.unhealthy(s.NodeId, member); why != "" {
			s.Message = "waiting: " + why
			return
		}
		s.Phase = api.StepPhase_STEP_PHASE_DRAINING
		s.StartedUnixNanos = d.now.UnixNano()
		s.Message = "cordoned, evicting its pods"
		active++
		if member {
			return
		}
	}
}

// memberActive says a consensus member's step is under way.
func (d *rolloutDriver) memberActive() bool {
	return slices.ContainsFunc(d.r.Steps, func(s *api.RolloutStep) bool {
		return stepActive(s) && d.nodes[s.NodeId].GetRoles().GetConsensusMember() != nil
	})
}

// unhealthy says why node id may not go out of service now, "" when it
// may: it must be healthy itself, and when it is a member, so must every
// other member, so that etcd keeps its quorum while it reboots.
func (d *rolloutDriver) unhealthy(id string, member bool) string {
	if h := d.c.heartbeats.health(id, d.now); h != api.NodeHealth_NODE_HEALTH_HEALTHY {
		return fmt.Sprintf("node %s is %s", id, healthName(h))
	}
	if !member {
		return ""
	}
	for other, n := range d.nodes {
		if other == id || n.FsmState != api.NodeState_NODE_STATE_UP || n.GetRoles().GetConsensusMember() == nil {
			continue
		}
		if h := d.c.heartbeats.health(other, d.now); h != api.NodeHealth_NODE_HEALTH_HEALTHY {
			return fmt.Sprintf("consensus member %s is %s", other, healthName(h))
		}
	}
	return ""
}

// drain runs one round of draining step s's node, and gives it the
// release once no pod is left.
func (d *rolloutDriver) drain(ctx context.Context, s *api.RolloutStep) {
	if d.r.State == api.RolloutState_ROLLOUT_STATE_ABORTED {
		d.uncordon(ctx, s)
		s.Phase = api.StepPhase_STEP_PHASE_PENDING
		s.Message = "not started: the rollout was aborted"
		return
	}
	n := d.nodes[s.NodeId]
	if n == nil {
		d.finish(s, api.StepPhase_STEP_PHASE_DONE, "skipped: the node left the cluster")
		return
	}
	if n.GetRoles().GetKubernetesWorker() != nil {
		kube, err := d.drainer(ctx)
		if err != nil {
			s.Message = err.Error()
			d.drainTimedOut(ctx, s)
			return
		}
		round, err := kube.Drain(ctx, s.NodeId)
		s.EvictedPods += int32(round.Evicted)
		switch {
		case err != nil:
			s.Message = err.Error()
			d.drainTimedOut(ctx, s)
			return
		case round.Remaining > 0:
			s.Message = fmt.Sprintf("%d pods left, %d held by their disruption budgets", round.Remaining, round.Held)
			d.drainTimedOut(ctx, s)
			return
		}
	}
	if err := d.c.setReleases(ctx, s.NodeId, func(n *private.Node) { n.DesiredRelease, n.ReleaseToStage = d.desired(false), nil }); err != nil {
		s.Message = "giving the node the release: " + err.Error()
		return
	}
	s.Phase = api.StepPhase_STEP_PHASE_UPDATING
	s.Message = "installing " + d.r.Version
}

// drainTimedOut halts the rollout when step s drained for longer than the
// drain timeout, and uncordons its node.
func (d *rolloutDriver) drainTimedOut(ctx context.Context, s *api.RolloutStep) {
	timeout := time.Duration(d.r.DrainTimeoutSeconds) * time.Second
	if d.now.Sub(time.Unix(0, s.StartedUnixNanos)) < timeout {
		return
	}
	d.uncordon(ctx, s)
	why := fmt.Sprintf("drain timed out after %s (%s)", timeout, s.Message)
	d.finish(s, api.StepPhase_STEP_PHASE_FAILED, why)
	d.halt(fmt.Sprintf("node %s: %s", s.NodeId, why))
}

// watchUpdate follows step s's node through its install and trial.
func (d *rolloutDriver) watchUpdate(ctx context.Context, s *api.RolloutStep) {
	n := d.nodes[s.NodeId]
	if n == nil {
		d.finish(s, api.StepPhase_STEP_PHASE_DONE, "skipped: the node left the cluster")
		return
	}
	st := n.GetStatus()
	u := st.GetUpdate()
	health := d.c.heartbeats.health(s.NodeId, d.now)
	// What the node says of its staging ahead of its turn is not the
	// turn's outcome.
	if u.GetRolloutId() == d.r.Id && !u.GetStageOnly() {
		switch u.Phase {
		case api.UpdatePhase_UPDATE_PHASE_FAILED:
			d.fail(ctx, s, u.Reason)
			return
		case api.UpdatePhase_UPDATE_PHASE_DONE:
			if st.GetVersion() == d.r.Version && health == api.NodeHealth_NODE_HEALTH_HEALTHY {
				d.succeed(ctx, s)
				return
			}
			s.Message = "runs " + d.r.Version + ", waiting for its heartbeats"
		case api.UpdatePhase_UPDATE_PHASE_INSTALLING:
			s.Message = "installing " + d.r.Version
		case api.UpdatePhase_UPDATE_PHASE_TRIAL:
			s.Message = "trial boot of " + d.r.Version
		}
	}
	if health == api.NodeHealth_NODE_HEALTH_HEARTBEAT_TIMEOUT {
		s.Message = "not heard from (rebooting?) after: " + s.Message
	}
	deadline := time.Duration(d.r.TrialDeadlineSeconds) * time.Second
	if deadline == 0 {
		deadline = defaultTrialDeadline
	}
	// The step started with its drain, which may have taken up to its
	// timeout.
	limit := time.Duration(d.r.DrainTimeoutSeconds)*time.Second + deadline + installAllowance
	if d.now.Sub(time.Unix(0, s.StartedUnixNanos)) > limit {
		d.fail(ctx, s, fmt.Sprintf("no outcome within %s of the step's start (last: %s)", limit, s.Message))
	}
}

// succeed ends step s: its node runs the release and is uncordoned.
func (d *rolloutDriver) succeed(ctx context.Context, s *api.RolloutStep) {
	if !d.uncordon(ctx, s) {
		return
	}
	if err := d.c.setReleases(ctx, s.NodeId, func(n *private.Node) { n.DesiredRelease = nil }); err != nil {
		s.Message = err.Error()
		return
	}
	d.finish(s, api.StepPhase_STEP_PHASE_DONE, "runs "+d.r.Version)
}

// fail ends step s with why, records the release bad and halts the
// rollout. The node, back on its last good slot, is uncordoned.
func (d *rolloutDriver) fail(ctx context.Context, s *api.RolloutStep, why string) {
	err := d.c.changeBadReleases(ctx, func(b *api.BadReleases) error {
		if slices.ContainsFunc(b.Releases, func(r *api.BadRelease) bool { return r.Digest == d.r.Digest }) {
			return errUnchanged
		}
		b.Releases = append(b.Releases, &api.BadRelease{
			Digest: d.r.Digest, Version: d.r.Version, NodeId: s.NodeId, Reason: why, RecordedUnixNanos: d.now.UnixNano(),
		})
		return nil
	})
	if err != nil {
		s.Message = "recording the release bad: " + err.Error()
		return
	}
	if err := d.c.setReleases(ctx, s.NodeId, func(n *private.Node) { n.DesiredRelease = nil }); err != nil {
		s.Message = err.Error()
		return
	}
	d.uncordon(ctx, s)
	d.finish(s, api.StepPhase_STEP_PHASE_FAILED, why)
	d.halt(fmt.Sprintf("node %s failed to update to %s: %s; the release is recorded bad", s.NodeId, d.r.Version, why))
}

// finish ends step s in phase with message.
func (d *rolloutDriver) finish(s *api.RolloutStep, phase api.StepPhase, message string) {
	s.Phase = phase
	s.Message = message
	s.FinishedUnixNanos = d.now.UnixNano()
}

// halt stops a running rollout for reason.
func (d *rolloutDriver) halt(reason string) {
	if d.r.State != api.RolloutState_ROLLOUT_STATE_RUNNING {
		return
	}
	d.r.State = api.RolloutState_ROLLOUT_STATE_HALTED
	d.r.Reason = reason
	d.r.EndedUnixNanos = d.now.UnixNano()
}

// uncordon makes step s's node schedulable again, if it is a Kubernetes
// worker, and says whether it is (a failure is the step's message, tried
// again next round).
func (d *rolloutDriver) uncordon(ctx context.Context, s *api.RolloutStep) bool {
	if d.nodes[s.NodeId].GetRoles().GetKubernetesWorker() == nil {
		return true
	}
	kube, err := d.drainer(ctx)
	if err == nil {
		err = kube.Cordon(ctx, s.NodeId, false)
	}
	if err != nil {
		s.Message = "uncordoning: " + err.Error()
		return false
	}
	return true
}

// kubeCredentialReuse is how long the leader drains through one
// credential (of one hour) and its connection, before it issues another.
const kubeCredentialReuse = 30 * time.Minute

// drainClient is the leader's client of an apiserver, for draining: kept
// across rounds, so that a drain's rounds every few seconds do not each
// issue a credential and open a connection. Only the rollout runnable
// uses it.
type drainClient struct {
	drainer *kubernetes.Drainer
	server  string
	made    time.Time
}

// drainer returns the test's drainer, else a client of the apiserver of a
// healthy Kubernetes controller, with a credential the curator issues
// itself; the one of an earlier round while it is young enough and its
// apiserver still healthy. It fails when the cluster has no healthy
// controller.
func (d *rolloutDriver) drainer(ctx context.Context) (drainer, error) {
	if d.c.opts.drainer != nil {
		return d.c.opts.drainer, nil
	}
	var servers []string
	for _, id := range slices.Sorted(maps.Keys(d.nodes)) {
		n := d.nodes[id]
		addr := n.GetStatus().GetExternalAddress()
		if n.FsmState == api.NodeState_NODE_STATE_UP && n.GetRoles().GetKubernetesController() != nil && addr != "" &&
			d.c.heartbeats.health(id, d.now) == api.NodeHealth_NODE_HEALTH_HEALTHY {
			servers = append(servers, "https://"+net.JoinHostPort(addr, strconv.Itoa(ports.KubernetesAPI)))
		}
	}
	if len(servers) == 0 {
		return nil, errors.New("no healthy Kubernetes controller to drain through")
	}
	kc := &d.c.drain
	if kc.drainer != nil && slices.Contains(servers, kc.server) && d.now.Sub(kc.made) < kubeCredentialReuse {
		return kc.drainer, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("when making a key for the Kubernetes API: %w", err)
	}
	certDER, caDER, err := d.c.signKubernetes(ctx, kubeClient("cairn:curator", "system:masters"), key.Public(), time.Hour)
	if err != nil {
		return nil, fmt.Errorf("when issuing the curator's Kubernetes credential: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("when reading the Kubernetes CA: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	if kc.drainer != nil {
		kc.drainer.Close()
	}
	*kc = drainClient{
		drainer: kubernetes.NewDrainer(servers[0], tls.Certificate{Certificate: [][]byte{certDER}, PrivateKey: key}, pool),
		server:  servers[0],
		made:    d.now,
	}
	return kc.drainer, nil
}

// setReleases changes what releases node id is given, its desired
// release and its release to stage, with set.
func (c *curator) setReleases(ctx context.Context, id string, set func(*private.Node)) error {
	_, err := c.updateNode(ctx, id, func(n *private.Node) error {
		desired, toStage := n.DesiredRelease, n.ReleaseToStage
		set(n)
		if proto.Equal(n.DesiredRelease, desired) && proto.Equal(n.ReleaseToStage, toStage) {
			return errUnchanged
		}
		return nil
	})
	if err != nil && !errors.Is(err, errUnchanged) {
		return fmt.Errorf("when setting the releases node %s is given: %w", id, err)
	}
	return nil
}

// stateName and phaseName name a rollout's state and a step's phase in
// lower case, as cairnctl shows them.
func stateName(s api.RolloutState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "ROLLOUT_STATE_"))
}

func phaseName(p api.StepPhase) string {
	return strings.ToLower(strings.TrimPrefix(p.String(), "STEP_PHASE_"))
}

// healthName names a node's health in lower case.
func healthName(h api.NodeHealth) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(h.String(), "NODE_HEALTH_")), "_", " ")
}
