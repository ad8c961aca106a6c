package roleserve

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// workerRolefetch publishes the node's roles: first the local copy (or
// the initial roles of the Membership), then what the curator says,
// keeping the copy in step. From the same stream it publishes the release
// a cluster rollout gave the node.
type workerRolefetch struct {
	membership  event.Watchable[*Membership]
	credentials event.Watchable[*identity.Node]
	curator     event.Watchable[*curatorConn]
	paths       nodePaths

	roles event.Value[*api.NodeRoles]
	// release is the node's desired release, nil when it has none; set
	// only when it changes.
	release event.Value[*api.DesiredRelease]
	// decommissioned is set when a curator refused the node as
	// decommissioned.
	decommissioned event.Value[bool]
	// cur is the roles last published, kept across restarts of run so
	// that the local copy is published once per boot.
	cur *api.NodeRoles
	// curRelease is the desired release last published, once
	// releaseKnown; both are kept across restarts of run.
	curRelease   *api.DesiredRelease
	releaseKnown bool
}

func (w *workerRolefetch) run(ctx context.Context) error {
	m, err := waitFor(ctx, w.membership, "membership")
	if err != nil {
		return err
	}
	files := w.paths.node
	if w.cur == nil {
		roles, err := localRoles(ctx, m, files, w.paths.etcd)
		if err != nil {
			return err
		}
		w.publish(ctx, roles)
	}
	creds, err := waitFor(ctx, w.credentials, "credentials")
	if err != nil {
		return err
	}
	cc, err := waitFor(ctx, w.curator, "a curator connection")
	if err != nil {
		return err
	}
	stream, err := cc.client().Watch(ctx, &api.WatchRequest{Kind: &api.WatchRequest_NodeInCluster_{
		NodeInCluster: &api.WatchRequest_NodeInCluster{NodeId: creds.ID()},
	}})
	if rpc.IsDecommissioned(err) {
		return w.giveUp(ctx, creds.ID(), err)
	}
	if err != nil {
		return fmt.Errorf("when watching this node: %w", err)
	}
	// onDisk is what roles.pb holds, nil when it holds nothing usable.
	onDisk := readRoles(files)
	healthy := false
	for {
		ev, err := stream.Recv()
		if rpc.IsDecommissioned(err) {
			return w.giveUp(ctx, creds.ID(), err)
		}
		if err != nil {
			return fmt.Errorf("when watching this node: %w", err)
		}
		for _, n := range ev.GetNodes() {
			if n.GetId() != creds.ID() {
				continue
			}
			roles := n.GetRoles()
			if roles == nil {
				roles = &api.NodeRoles{}
			}
			if onDisk == nil || !proto.Equal(roles, onDisk) {
				if err := writeRoles(files, roles); err != nil {
					return err
				}
				onDisk = roles
			}
			if !proto.Equal(roles, w.cur) {
				w.publish(ctx, roles)
			}
			if d := n.GivenRelease(); !w.releaseKnown || !proto.Equal(d, w.curRelease) {
				w.publishRelease(ctx, d)
			}
		}
		if !healthy {
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			healthy = true
		}
	}
}

// giveUp ends the roles of a node the cluster decommissioned while it
// ran, for good: refusal, the curator's answer, says the cluster no longer
// honours the node, so no role will ever come back. Whether the stream
// brought the empty roles of the decommissioning before it ended is a
// race; either way every unit a role started stops (the Kubernetes worker
// among them, whose Node the cluster deletes), and roles.pb says so. Then
// it says the node was decommissioned, so that the connection to the
// curators closes, and waits: asking again would only be refused.
func (w *workerRolefetch) giveUp(ctx context.Context, id string, refusal error) error {
	log := supervisor.Logger(ctx)
	none := &api.NodeRoles{}
	if err := writeRoles(w.paths.node, none); err != nil {
		return err
	}
	if !proto.Equal(w.cur, none) {
		w.publish(ctx, none)
	}
	log.Errorf("The cluster decommissioned this node (%s): it gives up its roles and stops asking; reinstall the machine to enrol it again", status.Convert(refusal).Message())
	marker.Log(log, marker.Decommissioned, "node", id)
	w.decommissioned.Set(true)
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	<-ctx.Done()
	return ctx.Err()
}

// publish sets the node's roles and states them on the console.
func (w *workerRolefetch) publish(ctx context.Context, roles *api.NodeRoles) {
	w.roles.Set(roles)
	w.cur = roles
	marker.Log(supervisor.Logger(ctx), marker.Roles, "roles", roleNames(roles))
}

// publishRelease sets the node's desired release, and logs a change.
func (w *workerRolefetch) publishRelease(ctx context.Context, d *api.DesiredRelease) {
	switch {
	case d != nil && d.StageOnly:
		supervisor.Logger(ctx).Infof("Rollout %s gives this node release %s (%s) to stage ahead of its turn", d.RolloutId, d.Version, d.Reference)
	case d != nil:
		supervisor.Logger(ctx).Infof("Rollout %s gives this node release %s (%s)", d.RolloutId, d.Version, d.Reference)
	case w.curRelease != nil:
		supervisor.Logger(ctx).Infof("Rollout %s no longer gives this node a release", w.curRelease.RolloutId)
	}
	w.release.Set(d)
	w.curRelease, w.releaseKnown = d, true
}

// readRoles returns the copy of the roles in roles.pb, nil when there is
// none or it does not parse.
func readRoles(files *localstorage.NodeDirectory) *api.NodeRoles {
	b, err := files.Roles.Read()
	if err != nil {
		return nil
	}
	roles, err := parseRoles(b)
	if err != nil {
		return nil
	}
	return roles
}

// parseRoles parses the content of roles.pb. The file comes from disk, so
// anything may be in it: it is either a NodeRoles or an error.
func parseRoles(b []byte) (*api.NodeRoles, error) {
	roles := &api.NodeRoles{}
	if err := proto.Unmarshal(b, roles); err != nil {
		return nil, fmt.Errorf("when parsing roles: %w", err)
	}
	return roles, nil
}

// localRoles returns the roles the node starts with: the copy in roles.pb,
// else Membership.InitialRoles. A node that has etcd data but neither was a
// consensus member when it lost its copy, and starts as one, so that a cold
// cluster can come back.
func localRoles(ctx context.Context, m *Membership, files *localstorage.NodeDirectory, etcdDir string) (*api.NodeRoles, error) {
	b, err := files.Roles.Read()
	switch {
	case err == nil:
		roles, err := parseRoles(b)
		if err != nil {
			supervisor.Logger(ctx).Warningf("Ignoring unreadable %s: %v", files.Roles.FullPath(), err)
			break
		}
		return roles, nil
	case errors.Is(err, os.ErrNotExist):
	default:
		return nil, fmt.Errorf("when reading the roles copy: %w", err)
	}
	if m.InitialRoles != nil {
		return proto.Clone(m.InitialRoles).(*api.NodeRoles), nil
	}
	hasData, err := consensus.HasData(etcdDir)
	if err != nil {
		return nil, err
	}
	if hasData {
		supervisor.Logger(ctx).Warning("No copy of the roles, but etcd data: starting as a consensus member")
		return &api.NodeRoles{ConsensusMember: &api.NodeRoles_ConsensusMember{}}, nil
	}
	return &api.NodeRoles{}, nil
}

// writeRoles replaces the copy of the roles, atomically and durably.
func writeRoles(files *localstorage.NodeDirectory, roles *api.NodeRoles) error {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(roles)
	if err != nil {
		return fmt.Errorf("when marshalling roles: %w", err)
	}
	if err := files.MkdirAll(0o700); err != nil {
		return fmt.Errorf("when creating %s: %w", files.FullPath(), err)
	}
	if err := files.Roles.Write(b); err != nil {
		return fmt.Errorf("when writing the roles copy: %w", err)
	}
	return nil
}

// roleNames names the roles for markers: comma-separated, "" for none.
func roleNames(r *api.NodeRoles) string {
	var names []string
	if r.GetConsensusMember() != nil {
		names = append(names, "ConsensusMember")
	}
	if r.GetKubernetesController() != nil {
		names = append(names, "KubernetesController")
	}
	if r.GetKubernetesWorker() != nil {
		names = append(names, "KubernetesWorker")
	}
	return strings.Join(names, ",")
}
