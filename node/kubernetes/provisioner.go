package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"cairn.dev/cairn/node/kubernetes/csiplugin"
	"cairn.dev/cairn/node/kubernetes/localvolume"
	"cairn.dev/cairn/node/kubernetes/quantity"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// The local volumes' StorageClass, the annotation by which the scheduler
// names the node of a claim's first pod, and the label by which each
// worker finds the PersistentVolumes of its own volumes.
const (
	storageClass    = "local"
	annSelectedNode = "volume.kubernetes.io/selected-node"
	labelVolumeNode = csiplugin.DriverName + "/node"
)

// claim is what the provisioner reads of a PersistentVolumeClaim.
type claim struct {
	Metadata struct {
		objectMeta
		Annotations       map[string]string `json:"annotations"`
		DeletionTimestamp string            `json:"deletionTimestamp"`
	} `json:"metadata"`
	Spec struct {
		StorageClassName string   `json:"storageClassName"`
		AccessModes      []string `json:"accessModes"`
		VolumeMode       string   `json:"volumeMode"`
		VolumeName       string   `json:"volumeName"`
		Resources        struct {
			Requests map[string]string `json:"requests"`
		} `json:"resources"`
	} `json:"spec"`
	Status struct {
		Phase              string            `json:"phase"`
		AllocatedResources map[string]string `json:"allocatedResources"`
	} `json:"status"`
}

// persistentVolume is what the provisioner reads of a PersistentVolume.
type persistentVolume struct {
	Metadata struct {
		objectMeta
		DeletionTimestamp string `json:"deletionTimestamp"`
	} `json:"metadata"`
	Spec struct {
		PersistentVolumeReclaimPolicy string `json:"persistentVolumeReclaimPolicy"`
		ClaimRef                      *struct {
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
		} `json:"claimRef"`
	} `json:"spec"`
	Status struct {
		Phase string `json:"phase"`
	} `json:"status"`
}

// provisioner turns the claims of StorageClass local whose first pod the
// scheduler put on this node into volumes of the node and their
// PersistentVolumes; grows the PersistentVolumes of grown claims, so that
// the kubelet grows the volume (NodeExpandVolume); and deletes the
// volumes whose claims are gone.
type provisioner struct {
	node    string
	volumes *localvolume.Manager
	cl      *apiClient
	log     logtree.LeveledLogger
	// refused is, per claim UID, the reason last given in an event, so
	// that a claim that cannot be provisioned gets one event per reason,
	// not one per change of any claim.
	refused map[string]string
	// made holds the UIDs of the claims whose PersistentVolume exists,
	// until they are bound: every change of any claim reaches claims,
	// and a claim provisioned already must not cost calls again.
	made map[string]bool
	// swept is whether the volumes were checked for orphans since the
	// provisioner started (sweep).
	swept bool
}

// runProvisioner runs the provisioner of m with a credential of its own
// (cairn:volumes:<node>), until ctx ends or the credential is due for
// renewal. changed tells it that what the volumes take changed.
func (w *Worker) runProvisioner(m *localvolume.Manager, changed <-chan struct{}) supervisor.Runnable {
	return func(ctx context.Context) error {
		cl, cred, err := issueClient(ctx, w.cfg.Curator, api.CertificateKind_CERTIFICATE_KIND_KUBERNETES_VOLUMES, w.dir("volumes"), w.balancerURL())
		if err != nil {
			return err
		}
		// Its three followers would otherwise each ask a starting
		// apiserver again and again, a new TLS connection each while it
		// is too busy to finish handshakes, restarted with a backoff
		// from 100 ms: in a start of make cluster, a worker's followers
		// failed 33 times before the apiserver was ready, 21 of them in
		// their first 8 s.
		if err := cl.waitReady(ctx, w.cfg.Readiness, supervisor.Logger(ctx).Infof); err != nil {
			return err
		}
		rctx, cancel := context.WithDeadlineCause(ctx, cred.renewAt, errRenew)
		defer cancel()
		p := &provisioner{node: w.cfg.NodeID, volumes: m, cl: cl, log: supervisor.Logger(ctx), refused: map[string]string{}, made: map[string]bool{}}
		if err := supervisor.Run(rctx, "capacity", func(ctx context.Context) error { return p.runCapacity(ctx, changed) }); err != nil {
			return fmt.Errorf("when starting the capacity: %w", err)
		}
		if err := supervisor.Run(rctx, "claims", func(ctx context.Context) error {
			return follow(ctx, cl, "/api/v1/persistentvolumeclaims", healthyAfter(ctx, func(cs map[string]claim) error { return p.claims(ctx, cs) }))
		}); err != nil {
			return fmt.Errorf("when following the claims: %w", err)
		}
		path := "/api/v1/persistentvolumes?labelSelector=" + url.QueryEscape(labelVolumeNode+"="+w.cfg.NodeID)
		if err := supervisor.Run(rctx, "reclaim", func(ctx context.Context) error {
			return follow(ctx, cl, path, healthyAfter(ctx, func(pvs map[string]persistentVolume) error { return p.reclaim(ctx, pvs) }))
		}); err != nil {
			return fmt.Errorf("when following the volumes: %w", err)
		}
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		<-rctx.Done()
		return stopped(ctx)
	}
}

// claims provisions and grows what the claims ask of this node. An error
// of the apiserver ends the follow, whose runnable starts again (with
// backoff) and lists every claim anew: that retries what failed.
func (p *provisioner) claims(ctx context.Context, cs map[string]claim) error {
	if !p.swept {
		if err := p.sweep(ctx, cs); err != nil {
			return err
		}
		p.swept = true
	}
	keys := make([]string, 0, len(cs))
	for k := range cs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	// Forget what was said of claims that are gone, and what was made
	// for claims no longer waiting for it.
	seen, pending := map[string]bool{}, map[string]bool{}
	for _, c := range cs {
		seen[c.Metadata.UID] = true
		pending[c.Metadata.UID] = c.Status.Phase == "Pending"
	}
	for uid := range p.refused {
		if !seen[uid] {
			delete(p.refused, uid)
		}
	}
	for uid := range p.made {
		if !pending[uid] {
			delete(p.made, uid)
		}
	}
	for _, k := range keys {
		c := cs[k]
		if c.Spec.StorageClassName != storageClass || c.Metadata.DeletionTimestamp != "" {
			continue
		}
		switch {
		case c.Status.Phase == "Pending" && c.Spec.VolumeName == "" && c.Metadata.Annotations[annSelectedNode] == p.node && !p.made[c.Metadata.UID]:
			if err := p.provision(ctx, c); err != nil {
				return err
			}
		case c.Status.Phase == "Bound" && c.Spec.VolumeName != "":
			if err := p.grow(ctx, c); err != nil {
				return err
			}
		}
	}
	return nil
}

// volumeName is the name of the volume, and of its PersistentVolume, of
// claim c: fixed by the claim, so that a provisioner that stopped half-way
// finishes the same volume.
func volumeName(c claim) string { return "pvc-" + c.Metadata.UID }

// provision makes the volume of c and its PersistentVolume, or tells why
// not in an event on c.
func (p *provisioner) provision(ctx context.Context, c claim) error {
	for _, m := range c.Spec.AccessModes {
		if m != "ReadWriteOnce" && m != "ReadWriteOncePod" {
			return p.refuse(ctx, c, "ProvisioningFailed", fmt.Sprintf("access mode %s is not possible: a local volume is on one node (ReadWriteOnce, ReadWriteOncePod)", m))
		}
	}
	size, err := quantity.ParseBytes(c.Spec.Resources.Requests["storage"])
	if err != nil || size == 0 {
		return p.refuse(ctx, c, "ProvisioningFailed", fmt.Sprintf("the claim requests no usable storage size: %v", err))
	}
	mode := localvolume.Filesystem
	if c.Spec.VolumeMode == "Block" {
		mode = localvolume.Block
	}
	name := volumeName(c)
	v, err := p.volumes.Create(name, size, mode)
	switch {
	case errors.Is(err, localvolume.ErrNoSpace):
		// The scheduler chose this node from a capacity that was
		// out of date: it chooses again once the claim names no node.
		if err := p.refuse(ctx, c, "ProvisioningFailed", err.Error()); err != nil {
			return err
		}
		return p.unselect(ctx, c)
	case errors.Is(err, localvolume.ErrInvalid), errors.Is(err, localvolume.ErrExists):
		return p.refuse(ctx, c, "ProvisioningFailed", err.Error())
	case err != nil:
		return p.refuse(ctx, c, "ProvisioningFailed", fmt.Sprintf("node %s could not create the volume: %v", p.node, err))
	}
	pv := map[string]any{
		"apiVersion": "v1",
		"kind":       "PersistentVolume",
		"metadata": map[string]any{
			"name":        name,
			"labels":      map[string]string{labelVolumeNode: p.node},
			"annotations": map[string]string{"pv.kubernetes.io/provisioned-by": csiplugin.DriverName},
		},
		"spec": map[string]any{
			"capacity":                      map[string]string{"storage": quantity.FormatBytes(v.Bytes)},
			"accessModes":                   c.Spec.AccessModes,
			"volumeMode":                    map[localvolume.Mode]string{localvolume.Filesystem: "Filesystem", localvolume.Block: "Block"}[v.Mode],
			"persistentVolumeReclaimPolicy": "Delete",
			"storageClassName":              storageClass,
			"claimRef": map[string]string{
				"apiVersion": "v1", "kind": "PersistentVolumeClaim",
				"namespace": c.Metadata.Namespace, "name": c.Metadata.Name, "uid": c.Metadata.UID,
			},
			"csi": map[string]any{"driver": csiplugin.DriverName, "volumeHandle": name},
			"nodeAffinity": map[string]any{"required": map[string]any{"nodeSelectorTerms": []any{
				map[string]any{"matchExpressions": []any{
					map[string]any{"key": "kubernetes.io/hostname", "operator": "In", "values": []string{p.node}},
				}},
			}}},
		},
	}
	err = p.cl.do(ctx, http.MethodPost, "/api/v1/persistentvolumes", "application/json", pv, nil)
	if err != nil && !answered(err, http.StatusConflict) {
		return fmt.Errorf("when creating the PersistentVolume %s: %w", name, err)
	}
	p.made[c.Metadata.UID] = true
	if err != nil {
		return nil // made before, by a run that stopped before this
	}
	delete(p.refused, c.Metadata.UID)
	msg := fmt.Sprintf("made volume %s of %s on node %s", name, localvolume.SizeText(v.Bytes), p.node)
	p.log.Infof("Claim %s/%s: %s (%s)", c.Metadata.Namespace, c.Metadata.Name, msg, v.Path)
	return p.event(ctx, c, "Normal", "ProvisioningSucceeded", msg)
}

// unselect takes the scheduler's choice of node off claim c, so that the
// scheduler puts its pod elsewhere.
func (p *provisioner) unselect(ctx context.Context, c claim) error {
	path := "/api/v1/namespaces/" + c.Metadata.Namespace + "/persistentvolumeclaims/" + c.Metadata.Name
	patch := map[string]any{"metadata": map[string]any{"annotations": map[string]any{annSelectedNode: nil}}}
	if err := p.cl.do(ctx, http.MethodPatch, path, "application/merge-patch+json", patch, nil); err != nil && !answered(err, http.StatusNotFound) {
		return fmt.Errorf("when giving claim %s/%s back to the scheduler: %w", c.Metadata.Namespace, c.Metadata.Name, err)
	}
	return nil
}

// refuse tells, once per reason, why c does not get what it asks of this
// node: in the node's log and as a Warning event on c. It fails only when
// the event cannot be sent.
func (p *provisioner) refuse(ctx context.Context, c claim, reason, why string) error {
	if p.refused[c.Metadata.UID] == why {
		return nil
	}
	p.log.Warningf("Claim %s/%s, on node %s: %s: %s", c.Metadata.Namespace, c.Metadata.Name, p.node, reason, why)
	if err := p.event(ctx, c, "Warning", reason, why); err != nil {
		return err
	}
	p.refused[c.Metadata.UID] = why
	return nil
}

// grow makes the PersistentVolume of the bound claim c as large as c now
// asks, when it is a volume of this node, and tells the kubelet to grow
// the volume itself: NodeExpandVolume, while the pod runs.
func (p *provisioner) grow(ctx context.Context, c claim) error {
	v, err := p.volumes.Get(c.Spec.VolumeName)
	if errors.Is(err, localvolume.ErrNotFound) || errors.Is(err, localvolume.ErrInvalid) {
		return nil // another node's, or not a local volume
	}
	if err != nil {
		return err
	}
	want, err := quantity.ParseBytes(c.Spec.Resources.Requests["storage"])
	if err != nil {
		return nil // the apiserver validates requests; nothing to grow to
	}
	if allocated, err := quantity.ParseBytes(c.Status.AllocatedResources["storage"]); err == nil && allocated >= want {
		return nil // asked for already
	}
	if want <= v.Bytes {
		return nil
	}
	if room, err := p.volumes.Capacity(); err != nil {
		return err
	} else if want-v.Bytes > room.Free() {
		return p.refuse(ctx, c, "VolumeResizeFailed", fmt.Sprintf("volume %s cannot grow from %s to %s: node %s has %s left for volumes",
			v.Name, localvolume.SizeText(v.Bytes), localvolume.SizeText(want), p.node, localvolume.SizeText(room.Free())))
	}
	size := quantity.FormatBytes(want)
	if err := p.cl.do(ctx, http.MethodPatch, "/api/v1/persistentvolumes/"+c.Spec.VolumeName, "application/merge-patch+json",
		map[string]any{"spec": map[string]any{"capacity": map[string]string{"storage": size}}}, nil); err != nil {
		return fmt.Errorf("when growing the PersistentVolume %s: %w", c.Spec.VolumeName, err)
	}
	status := map[string]any{"status": map[string]any{
		"allocatedResources":        map[string]string{"storage": size},
		"allocatedResourceStatuses": map[string]string{"storage": "NodeResizePending"},
		"conditions": []any{map[string]any{
			"type": "FileSystemResizePending", "status": "True", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
			"message": "Waiting for the node to grow the volume while the pod runs",
		}},
	}}
	path := "/api/v1/namespaces/" + c.Metadata.Namespace + "/persistentvolumeclaims/" + c.Metadata.Name + "/status"
	if err := p.cl.do(ctx, http.MethodPatch, path, "application/merge-patch+json", status, nil); err != nil {
		return fmt.Errorf("when marking claim %s/%s for growth: %w", c.Metadata.Namespace, c.Metadata.Name, err)
	}
	p.log.Infof("Claim %s/%s: volume %s grows from %s to %s on the node", c.Metadata.Namespace, c.Metadata.Name, v.Name, localvolume.SizeText(v.Bytes), localvolume.SizeText(want))
	return p.event(ctx, c, "Normal", "Resizing", fmt.Sprintf("volume %s grows from %s to %s on node %s", v.Name, localvolume.SizeText(v.Bytes), localvolume.SizeText(want), p.node))
}

// reclaim deletes the volumes of this node whose claims are gone
// (Released, with reclaim policy Delete), then their PersistentVolumes. A
// volume of policy Retain stays, with its data.
func (p *provisioner) reclaim(ctx context.Context, pvs map[string]persistentVolume) error {
	for _, pv := range pvs {
		if pv.Status.Phase != "Released" || pv.Spec.PersistentVolumeReclaimPolicy != "Delete" || pv.Metadata.DeletionTimestamp != "" {
			continue
		}
		name := pv.Metadata.Name
		v, err := p.volumes.Get(name)
		if err != nil && !errors.Is(err, localvolume.ErrNotFound) {
			return err
		}
		if err := p.volumes.Delete(name); err != nil {
			return err
		}
		claim := "a deleted claim"
		if r := pv.Spec.ClaimRef; r != nil {
			claim = "claim " + r.Namespace + "/" + r.Name
		}
		if v.Path != "" {
			p.log.Infof("Deleted volume %s of %s: removed %s and its quota", name, claim, v.Path)
		}
		err = p.cl.do(ctx, http.MethodDelete, "/api/v1/persistentvolumes/"+name, "", nil, nil)
		if err != nil && !answered(err, http.StatusNotFound) {
			return fmt.Errorf("when deleting the PersistentVolume %s: %w", name, err)
		}
	}
	return nil
}

// sweep deletes the volumes that no claim and no PersistentVolume has: a
// provisioner stopped between making a volume and making its
// PersistentVolume, and the claim went meanwhile. cs are all the claims.
func (p *provisioner) sweep(ctx context.Context, cs map[string]claim) error {
	vols, err := p.volumes.List()
	if err != nil {
		return err
	}
	orphans, err := p.orphans(ctx, vols, cs)
	if err != nil {
		return err
	}
	for _, v := range orphans {
		if err := p.volumes.Delete(v.Name); err != nil {
			return err
		}
		p.log.Infof("Deleted volume %s: its claim is gone and it never got a PersistentVolume; removed %s and its quota", v.Name, v.Path)
	}
	return nil
}

// orphans are the volumes of vols that no claim of cs has and no
// PersistentVolume names, asked of the apiserver one by one: a volume
// whose PersistentVolume exists is the PersistentVolume's, whatever
// happened to its claim.
func (p *provisioner) orphans(ctx context.Context, vols []localvolume.Volume, cs map[string]claim) ([]localvolume.Volume, error) {
	claimed := map[string]bool{}
	for _, c := range cs {
		claimed[volumeName(c)] = true
	}
	var orphans []localvolume.Volume
	for _, v := range vols {
		if claimed[v.Name] {
			continue
		}
		err := p.cl.get(ctx, "/api/v1/persistentvolumes/"+v.Name, &persistentVolume{})
		switch {
		case answered(err, http.StatusNotFound):
			orphans = append(orphans, v)
		case err != nil:
			return nil, fmt.Errorf("when looking for the PersistentVolume of volume %s: %w", v.Name, err)
		}
	}
	return orphans, nil
}

// event records an event of type (Normal, Warning) on claim c.
func (p *provisioner) event(ctx context.Context, c claim, typ, reason, message string) error {
	now := time.Now().UTC().Format(time.RFC3339)
	ev := map[string]any{
		"apiVersion": "v1",
		"kind":       "Event",
		"metadata":   map[string]any{"generateName": c.Metadata.Name + ".", "namespace": c.Metadata.Namespace},
		"involvedObject": map[string]string{
			"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": c.Metadata.Namespace,
			"name": c.Metadata.Name, "uid": c.Metadata.UID, "resourceVersion": c.Metadata.ResourceVersion,
		},
		"type":               typ,
		"reason":             reason,
		"message":            message,
		"source":             map[string]string{"component": csiplugin.DriverName, "host": p.node},
		"reportingComponent": csiplugin.DriverName,
		"reportingInstance":  p.node,
		"firstTimestamp":     now,
		"lastTimestamp":      now,
		"count":              1,
	}
	if err := p.cl.do(ctx, http.MethodPost, "/api/v1/namespaces/"+c.Metadata.Namespace+"/events", "application/json", ev, nil); err != nil {
		return fmt.Errorf("when telling claim %s/%s %q: %w", c.Metadata.Namespace, c.Metadata.Name, message, err)
	}
	return nil
}
