package roleserve

import (
	"context"
	"errors"
	"fmt"
	"os"

	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// nodeFiles is the data partition's node/ directory, which holds the role
// server's copy of the roles (Roles, roles.pb).
func (s *Service) nodeFiles() *localstorage.NodeDirectory {
	return &s.cfg.Storage.Root.Data.Node
}

// runRolefetch publishes the node's roles: first the local copy (or the
// initial roles of the Membership), then what the curator says, keeping the
// copy in step.
func (s *Service) runRolefetch(ctx context.Context) error {
	m, err := s.membership(ctx)
	if err != nil {
		return err
	}
	files := s.nodeFiles()
	if !s.rolesLoaded.Load() {
		roles, err := s.localRoles(ctx, m, files)
		if err != nil {
			return err
		}
		s.roles.Set(roles)
		s.rolesLoaded.Store(true)
	}
	cur, err := get[*api.NodeRoles](ctx, &s.roles, notNil)
	if err != nil {
		return fmt.Errorf("when reading the roles: %w", err)
	}

	creds, err := s.waitCredentials(ctx)
	if err != nil {
		return err
	}
	cc, err := s.waitCurator(ctx)
	if err != nil {
		return err
	}
	stream, err := cc.client().Watch(ctx, &api.WatchRequest{Kind: &api.WatchRequest_NodeInCluster_{
		NodeInCluster: &api.WatchRequest_NodeInCluster{NodeId: creds.ID()},
	}})
	if err != nil {
		return fmt.Errorf("when watching this node: %w", err)
	}
	// onDisk is what roles.pb holds, nil when it holds nothing usable.
	onDisk := readRoles(files)
	healthy := false
	for {
		ev, err := stream.Recv()
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
			if !proto.Equal(roles, cur) {
				supervisor.Logger(ctx).Infof("roleserve: roles now %s", describeRoles(roles))
				s.roles.Set(roles)
				cur = roles
			}
		}
		if !healthy {
			supervisor.Signal(ctx, supervisor.SignalHealthy)
			healthy = true
		}
	}
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
func (s *Service) localRoles(ctx context.Context, m *Membership, files *localstorage.NodeDirectory) (*api.NodeRoles, error) {
	b, err := files.Roles.Read()
	switch {
	case err == nil:
		roles, err := parseRoles(b)
		if err != nil {
			supervisor.Logger(ctx).Warningf("roleserve: ignoring unreadable %s: %v", files.Roles.FullPath(), err)
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
	hasData, err := consensus.HasData(s.etcdDir())
	if err != nil {
		return nil, err
	}
	if hasData {
		supervisor.Logger(ctx).Warning("roleserve: no copy of the roles, but etcd data: starting as a consensus member")
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

// describeRoles names the roles for logs.
func describeRoles(r *api.NodeRoles) string {
	var names string
	add := func(has bool, name string) {
		if !has {
			return
		}
		if names != "" {
			names += ", "
		}
		names += name
	}
	add(r.GetConsensusMember() != nil, "ConsensusMember")
	add(r.GetKubernetesController() != nil, "KubernetesController")
	add(r.GetKubernetesWorker() != nil, "KubernetesWorker")
	if names == "" {
		return "none"
	}
	return names
}
