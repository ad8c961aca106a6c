package roleserve

import (
	"bytes"
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

// workerClusterdir is the one writer of the cluster directory on the ESP
// (cairn/cluster_directory.pb): the curators a rebooting node dials
// first. It stores Membership.ClusterDirectory at once, so that a newly
// enrolled node has one before its configuration is sealed, then keeps
// the file in step with the directory clusterwatch publishes.
type workerClusterdir struct {
	membership event.Watchable[*Membership]
	// directory is the cluster's directory as clusterwatch learns it.
	directory event.Watchable[*api.ClusterDirectory]
	// file is the ESP's cairn/ directory, which holds the directory.
	file *localstorage.ESPCairnDirectory

	// stored is the directory last written (or found) on the ESP.
	stored event.Value[*api.ClusterDirectory]
}

func (w *workerClusterdir) run(ctx context.Context) error {
	m, err := waitFor(ctx, w.membership, "membership")
	if err != nil {
		return err
	}
	written, _ := w.file.ClusterDirectory.Read()
	if len(m.ClusterDirectory.GetNodes()) > 0 {
		if written, err = w.store(ctx, m.ClusterDirectory, written); err != nil {
			return err
		}
	}
	dw := w.directory.Watch()
	defer dw.Close()
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	for {
		dir, err := dw.Get(ctx)
		if err != nil {
			return fmt.Errorf("when watching the cluster directory: %w", err)
		}
		if len(dir.GetNodes()) == 0 {
			// Never replace a directory by one that leads nowhere.
			continue
		}
		if written, err = w.store(ctx, dir, written); err != nil {
			return err
		}
	}
}

// store writes dir to the ESP unless it holds those bytes already
// (written), publishes it on stored, and returns what the file holds now.
func (w *workerClusterdir) store(ctx context.Context, dir *api.ClusterDirectory, written []byte) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(dir)
	if err != nil {
		return nil, fmt.Errorf("when marshalling the cluster directory: %w", err)
	}
	if !bytes.Equal(b, written) {
		if err := w.file.MkdirAll(0o700); err != nil {
			return nil, fmt.Errorf("when creating the ESP directory: %w", err)
		}
		if err := w.file.ClusterDirectory.Write(b); err != nil {
			return nil, fmt.Errorf("when writing the cluster directory: %w", err)
		}
		supervisor.Logger(ctx).Infof("Cluster directory now lists %d consensus members", len(dir.Nodes))
	}
	w.stored.Set(dir)
	return b, nil
}
