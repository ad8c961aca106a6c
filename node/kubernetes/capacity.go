package kubernetes

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"cairn.dev/cairn/node/kubernetes/localvolume"
	"cairn.dev/cairn/pkg/supervisor"
)

// Where each worker publishes what it has left for local volumes: one
// CSIStorageCapacity per worker, in kube-system.
const capacityNamespace = "kube-system"

// capacityInterval is how often a worker publishes its capacity when
// nothing changed, which also restores an object deleted by hand;
// capacityRetry is how soon it publishes again while its Node is not
// registered yet, to make the Node the object's owner.
const (
	capacityInterval = time.Minute
	capacityRetry    = 5 * time.Second
)

// capacityName is the name of node's CSIStorageCapacity.
func capacityName(node string) string { return "local-" + node }

// runCapacity keeps this node's CSIStorageCapacity telling what is left
// for volumes, at once when changed says the volumes changed: the
// scheduler puts a pod whose claims of StorageClass local are not bound
// yet only on a node with room for them, and on no node without such an
// object. The object belongs to the node's Node, so it goes with it.
func (p *provisioner) runCapacity(ctx context.Context, changed <-chan struct{}) error {
	published := uint64(1<<64 - 1)
	for i := 0; ; i++ {
		free, owned, err := p.publishCapacity(ctx)
		if err != nil {
			return err
		}
		if i == 0 {
			// Not before: an apiserver away must not reset the
			// restart backoff.
			supervisor.Signal(ctx, supervisor.SignalHealthy)
		}
		if free != published {
			p.log.Infof("Published %s left for volumes on node %s (CSIStorageCapacity %s/%s)", localvolume.SizeText(free), p.node, capacityNamespace, capacityName(p.node))
			published = free
		}
		wait := capacityInterval
		if !owned {
			wait = capacityRetry
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-time.After(wait):
		}
	}
}

// publishCapacity applies this node's CSIStorageCapacity, and returns what
// it says is free and whether its Node owns it.
func (p *provisioner) publishCapacity(ctx context.Context) (free uint64, owned bool, err error) {
	room, err := p.volumes.Capacity()
	if err != nil {
		return 0, false, err
	}
	free = room.Free()
	meta := map[string]any{
		"name":      capacityName(p.node),
		"namespace": capacityNamespace,
		"labels":    map[string]string{labelVolumeNode: p.node},
	}
	var node struct {
		Metadata struct {
			UID string `json:"uid"`
		} `json:"metadata"`
	}
	switch err := p.cl.get(ctx, "/api/v1/nodes/"+p.node, &node); {
	case err == nil:
		meta["ownerReferences"] = []any{map[string]string{"apiVersion": "v1", "kind": "Node", "name": p.node, "uid": node.Metadata.UID}}
	case !answered(err, http.StatusNotFound):
		return 0, false, fmt.Errorf("when reading the Node of %s: %w", p.node, err)
	}
	bytes := strconv.FormatUint(free, 10)
	obj := map[string]any{
		"apiVersion":       "storage.k8s.io/v1",
		"kind":             "CSIStorageCapacity",
		"metadata":         meta,
		"storageClassName": storageClass,
		"nodeTopology":     map[string]any{"matchLabels": map[string]string{"kubernetes.io/hostname": p.node}},
		// One volume may take all that is left.
		"capacity":          bytes,
		"maximumVolumeSize": bytes,
	}
	path := "/apis/storage.k8s.io/v1/namespaces/" + capacityNamespace + "/csistoragecapacities/" + capacityName(p.node)
	if err := p.cl.apply(ctx, path, obj); err != nil {
		return 0, false, fmt.Errorf("when publishing the capacity of %s: %w", p.node, err)
	}
	return free, node.Metadata.UID != "", nil
}
