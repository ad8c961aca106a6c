package main

import (
	"fmt"
	"strings"

	"cairn.dev/cairn/proto/api"
)

// Role names as operators write them (any case).
const (
	roleConsensusMember      = "ConsensusMember"
	roleKubernetesController = "KubernetesController"
	roleKubernetesWorker     = "KubernetesWorker"
)

// roleNames lists the roles r holds, in a fixed order.
func roleNames(r *api.NodeRoles) []string {
	names := []string{}
	if r.GetConsensusMember() != nil {
		names = append(names, roleConsensusMember)
	}
	if r.GetKubernetesController() != nil {
		names = append(names, roleKubernetesController)
	}
	if r.GetKubernetesWorker() != nil {
		names = append(names, roleKubernetesWorker)
	}
	return names
}

// roleUpdate builds the request that sets (add) or clears (!add) the role
// called name, in any case, on node id.
func roleUpdate(id, name string, add bool) (*api.UpdateNodeRolesRequest, error) {
	req := &api.UpdateNodeRolesRequest{NodeId: id}
	switch strings.ToLower(name) {
	case strings.ToLower(roleConsensusMember):
		req.ConsensusMember = &add
	case strings.ToLower(roleKubernetesController):
		req.KubernetesController = &add
	case strings.ToLower(roleKubernetesWorker):
		req.KubernetesWorker = &add
	default:
		return nil, fmt.Errorf("unknown role %q: want %s, %s or %s", name,
			roleConsensusMember, roleKubernetesController, roleKubernetesWorker)
	}
	return req, nil
}
