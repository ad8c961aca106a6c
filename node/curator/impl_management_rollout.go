package curator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"runtime"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/clusterconfig"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/pkg/ociimage"
	"cairn.dev/cairn/pkg/release"
	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/proto/private"
)

// releaseCheckTimeout bounds StartRollout's reading of the release from
// its registry.
const releaseCheckTimeout = time.Minute

// StartRollout implements Management.StartRollout: the release is read
// and checked here, once, so that every node is given the same manifest
// by digest, and a release no node would accept is refused before any
// node is drained. Each node checks it again before it writes a byte.
func (m management) StartRollout(ctx context.Context, req *api.StartRolloutRequest) (*api.Rollout, error) {
	ref, err := ociimage.ParseReference(req.GetReference())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%v", err)
	}
	if req.MaxUnavailable < 0 || req.DrainTimeoutSeconds < 0 || req.TrialDeadlineSeconds < 0 {
		return nil, status.Error(codes.InvalidArgument, "max_unavailable, drain_timeout_seconds and trial_deadline_seconds may not be negative")
	}
	rel, err := m.checkRelease(ctx, ref)
	if err != nil {
		return nil, err
	}
	if r, _, err := m.getRollout(ctx); err != nil {
		return nil, err
	} else if r != nil && rolloutActive(r) {
		// A call retried after its answer was lost finds the rollout it
		// started.
		if r.State == api.RolloutState_ROLLOUT_STATE_RUNNING && r.Digest == rel.Descriptor.Digest {
			return r, nil
		}
		return nil, status.Errorf(codes.FailedPrecondition, "rollout %s of %s is %s: abort it first (cairnctl cluster update abort)", r.Id, r.Version, stateName(r.State))
	}
	bad, _, err := m.getBadReleases(ctx)
	if err != nil {
		return nil, err
	}
	if i := slices.IndexFunc(bad.Releases, func(b *api.BadRelease) bool { return b.Digest == rel.Descriptor.Digest }); i >= 0 {
		b := bad.Releases[i]
		return nil, status.Errorf(codes.FailedPrecondition, "release %s (%s) is recorded bad: node %s: %s (cairnctl cluster update clear-bad %s to try it again)", b.Version, b.Digest, b.NodeId, b.Reason, b.Digest)
	}
	nodes, _, err := m.listNodes(ctx)
	if err != nil {
		return nil, err
	}
	id := make([]byte, 6)
	if _, err := rand.Read(id); err != nil {
		return nil, status.Errorf(codes.Internal, "when naming the rollout: %v", err)
	}
	drain := time.Duration(req.DrainTimeoutSeconds) * time.Second
	if drain == 0 {
		drain = DefaultDrainTimeout
	}
	pinned := ref
	pinned.Tag, pinned.Digest = "", rel.Descriptor.Digest
	r := &api.Rollout{
		Id:                   hex.EncodeToString(id),
		Reference:            pinned.String(),
		Digest:               rel.Descriptor.Digest,
		Version:              rel.Version.String(),
		AllowDowngrade:       req.AllowDowngrade,
		MaxUnavailable:       max(1, req.MaxUnavailable),
		DrainTimeoutSeconds:  int64(drain / time.Second),
		TrialDeadlineSeconds: req.TrialDeadlineSeconds,
		State:                api.RolloutState_ROLLOUT_STATE_RUNNING,
		Steps:                rolloutSteps(nodes, m.cfg.Node.ID()),
		StartedUnixNanos:     time.Now().UnixNano(),
	}
	if len(r.Steps) == 0 {
		return nil, status.Error(codes.FailedPrecondition, "the cluster has no UP node to update")
	}
	for {
		prev, rev, err := m.getRollout(ctx)
		if err != nil {
			return nil, err
		}
		if prev != nil && rolloutActive(prev) {
			return nil, status.Errorf(codes.FailedPrecondition, "rollout %s started meanwhile", prev.Id)
		}
		ok, err := m.putRollout(ctx, r, rev)
		if err != nil {
			return nil, err
		}
		if ok {
			m.log.Infof("The owner starts rollout %s of release %s (%s) over %d nodes", r.Id, r.Version, r.Reference, len(r.Steps))
			return r, nil
		}
	}
}

// checkRelease reads the release ref names and checks it as a node would,
// but for its version, which each node compares with its own.
func (m management) checkRelease(ctx context.Context, ref ociimage.Reference) (*release.Release, error) {
	conf, _, err := m.configurationAt(ctx)
	if err != nil {
		return nil, err
	}
	keys, err := clusterconfig.ReleaseKeys(conf)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "the cluster's release keys: %v", err)
	}
	if len(keys) == 0 {
		return nil, status.Error(codes.FailedPrecondition, "the cluster trusts no release key: add one with cairnctl cluster release-keys add")
	}
	ctx, cancel := context.WithTimeout(ctx, releaseCheckTimeout)
	defer cancel()
	reg := ref.Registry(nil, slices.Contains(conf.GetRegistries().GetPlainHttp(), ref.Host))
	rel, err := release.Fetch(ctx, reg, ref.Name(), release.Policy{Keys: keys, Architecture: runtime.GOARCH, AllowDowngrade: true})
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "release %s: %v", ref, err)
	}
	return rel, nil
}

// rolloutSteps orders the UP nodes for a rollout: the consensus members
// first, the leader's own node (self) last among them so that the lead
// moves once, then the others; by ID within each.
func rolloutSteps(nodes []*private.Node, self string) []*api.RolloutStep {
	rank := func(n *private.Node) int {
		switch {
		case n.GetRoles().GetConsensusMember() == nil:
			return 2
		case identity.NodeID(n.PublicKey) == self:
			return 1
		}
		return 0
	}
	var up []*private.Node
	for _, n := range nodes {
		if n.FsmState == api.NodeState_NODE_STATE_UP {
			up = append(up, n)
		}
	}
	slices.SortStableFunc(up, func(a, b *private.Node) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(identity.NodeID(a.PublicKey), identity.NodeID(b.PublicKey))
	})
	steps := make([]*api.RolloutStep, len(up))
	for i, n := range up {
		steps[i] = &api.RolloutStep{NodeId: identity.NodeID(n.PublicKey), Phase: api.StepPhase_STEP_PHASE_PENDING}
	}
	return steps
}

// GetRollout implements Management.GetRollout.
func (m management) GetRollout(ctx context.Context, _ *api.GetRolloutRequest) (*api.GetRolloutResponse, error) {
	r, _, err := m.getRollout(ctx)
	if err != nil {
		return nil, err
	}
	bad, _, err := m.getBadReleases(ctx)
	if err != nil {
		return nil, err
	}
	return &api.GetRolloutResponse{Rollout: r, BadReleases: bad.Releases}, nil
}

// AbortRollout implements Management.AbortRollout. The leader's next
// round uncordons a node that drained but was not given the release; a
// node already given it finishes or rolls back by itself, and the leader
// follows it to its end.
func (m management) AbortRollout(ctx context.Context, _ *api.AbortRolloutRequest) (*api.Rollout, error) {
	for {
		r, rev, err := m.getRollout(ctx)
		if err != nil {
			return nil, err
		}
		if r != nil && r.State == api.RolloutState_ROLLOUT_STATE_ABORTED && rolloutActive(r) {
			// Aborted already, maybe by this call retried: its nodes
			// under way are still followed.
			return r, nil
		}
		if r == nil || r.State != api.RolloutState_ROLLOUT_STATE_RUNNING {
			return nil, status.Error(codes.FailedPrecondition, "no rollout runs")
		}
		r.State = api.RolloutState_ROLLOUT_STATE_ABORTED
		r.Reason = "aborted by the owner"
		r.EndedUnixNanos = time.Now().UnixNano()
		ok, err := m.putRollout(ctx, r, rev)
		if err != nil {
			return nil, err
		}
		if ok {
			m.log.Infof("The owner aborts rollout %s of %s", r.Id, r.Version)
			return r, nil
		}
	}
}

// ClearBadRelease implements Management.ClearBadRelease.
func (m management) ClearBadRelease(ctx context.Context, req *api.ClearBadReleaseRequest) (*api.ClearBadReleaseResponse, error) {
	found := false
	err := m.changeBadReleases(ctx, func(b *api.BadReleases) error {
		n := len(b.Releases)
		b.Releases = slices.DeleteFunc(b.Releases, func(r *api.BadRelease) bool { return r.Digest == req.GetDigest() })
		found = len(b.Releases) < n
		if !found {
			return errUnchanged
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, status.Errorf(codes.NotFound, "release %q is not recorded bad", req.GetDigest())
	}
	m.log.Infof("The owner clears bad release %s", req.GetDigest())
	return &api.ClearBadReleaseResponse{}, nil
}
