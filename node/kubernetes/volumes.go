package kubernetes

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"

	"cairn.dev/cairn/node/kubernetes/csiplugin"
	"cairn.dev/cairn/node/kubernetes/localvolume"
	"cairn.dev/cairn/pkg/supervisor"
)

// The space of the data partition that local volumes never get, for what
// shares it (etcd, containerd's images and containers, the logs): a
// quarter of the partition, and at least volumeReserveMin.
const (
	volumeReserveMin      = 2 << 30
	volumeReserveFraction = 4
)

// volumeReserve is the reserve of a data partition of size bytes.
func volumeReserve(size uint64) uint64 {
	return max(size/volumeReserveFraction, volumeReserveMin)
}

// runVolumes keeps the node's local volumes (<data>/volumes): it serves
// the node half of the CSI driver local.cairn.dev to the kubelet, which
// finds it through its plugin registration directory, and runs the
// provisioner of the claims scheduled to this node.
func (w *Worker) runVolumes(ctx context.Context) error {
	root := w.cfg.Layout.data("volumes")
	if err := mkdirs(root); err != nil {
		return err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return fmt.Errorf("when reading the size of the data partition: %w", err)
	}
	size := st.Blocks * uint64(st.Bsize)
	changed := make(chan struct{}, 1)
	m, err := localvolume.New(localvolume.Config{Root: root, Reserve: volumeReserve(size), Changed: func() {
		select {
		case changed <- struct{}{}:
		default: // told already
		}
	}})
	if err != nil {
		return err
	}
	c, err := m.Capacity()
	if err != nil {
		return err
	}
	supervisor.Logger(ctx).Infof("Local volumes in %s: %d MiB for volumes (the data partition's %d MiB less %d MiB kept for the rest), %d MiB given", root, c.Total>>20, size>>20, volumeReserve(size)>>20, c.Committed>>20)
	p := &csiplugin.Plugin{NodeID: w.cfg.NodeID, Volumes: m}
	if err := supervisor.Run(ctx, "plugin", func(ctx context.Context) error {
		return p.Serve(ctx, csiplugin.KubeletSockets(w.cfg.Layout.data("kubelet")))
	}); err != nil {
		return fmt.Errorf("when starting the CSI plugin: %w", err)
	}
	if err := supervisor.Run(ctx, "provisioner", w.runProvisioner(m, changed)); err != nil {
		return fmt.Errorf("when starting the provisioner: %w", err)
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	<-ctx.Done()
	return ctx.Err()
}
