package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/parameters"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/proto/api"
	private "cairn.dev/cairn/proto/private"
)

// storage is what enrolment needs of the node's disks: the four ways to
// mount the data partition. *localstorage.Storage is one; tests use a fake
// that mounts nothing.
type storage interface {
	MountNew(ctx context.Context, nodeKey, clusterKey []byte) error
	MountExisting(nodeKey, clusterKey []byte) error
	MountNewInsecure(ctx context.Context) error
	MountExistingInsecure() error
}

// writeIdentity stores the node's identity on the data partition,
// atomically and synced.
func writeIdentity(root *localstorage.Root, node *identity.Node) error {
	b, err := node.MarshalPEM()
	if err != nil {
		return fmt.Errorf("when marshalling the identity: %w", err)
	}
	if err := root.Data.Node.MkdirAll(0o700); err != nil {
		return fmt.Errorf("when creating the node directory: %w", err)
	}
	if err := root.Data.Node.Identity.Write(b); err != nil {
		return fmt.Errorf("when writing the identity: %w", err)
	}
	return nil
}

// readIdentity loads the node's identity from the data partition.
func readIdentity(root *localstorage.Root) (*identity.Node, error) {
	b, err := root.Data.Node.Identity.Read()
	if err != nil {
		return nil, fmt.Errorf("when reading the identity: %w", err)
	}
	n, err := identity.ParseNodePEM(b)
	if err != nil {
		return nil, fmt.Errorf("when parsing the identity: %w", err)
	}
	return n, nil
}

// awaitDataModules waits until the data partition's modules are loaded
// (Config.DataModules), and logs how long it waited when that was long
// enough to show in a boot's timeline.
func (s *Service) awaitDataModules(ctx context.Context, log logtree.LeveledLogger) error {
	if s.cfg.DataModules == nil {
		return nil
	}
	start := time.Now()
	if _, err := event.Get(ctx, s.cfg.DataModules, event.Filter(func(loaded bool) bool { return loaded })); err != nil {
		return fmt.Errorf("when waiting for the data partition's modules: %w", err)
	}
	if waited := time.Since(start); waited >= 10*time.Millisecond {
		log.Infof("Waited %v for the data partition's modules", waited.Round(time.Millisecond))
	}
	return nil
}

// mountNew sets up the data partition of a node enrolling for the first
// time, encrypted unless sc says insecure, once its modules are loaded,
// and logs how long it took (a filesystem made under emulation is seconds
// of an enrolment).
func (s *Service) mountNew(ctx context.Context, log logtree.LeveledLogger, sc *private.SealedConfiguration) error {
	if err := s.awaitDataModules(ctx, log); err != nil {
		return err
	}
	start := time.Now()
	var err error
	if sc.GetStorageSecurity() == private.StorageSecurity_STORAGE_SECURITY_INSECURE {
		err = s.storage.MountNewInsecure(ctx)
	} else {
		err = s.storage.MountNew(ctx, sc.GetNodeUnlockKey(), sc.GetClusterUnlockKey())
	}
	if err != nil {
		return err
	}
	log.Infof("Data partition set up and mounted in %s", time.Since(start).Round(time.Millisecond))
	return nil
}

// mountExisting opens the data partition of a node that enrolled before,
// with the cluster's half of the key handed out by a curator (or, on a
// cold start, the copy in the sealed configuration).
func mountExisting(st storage, sc *private.SealedConfiguration, clusterKey []byte) error {
	if sc.GetStorageSecurity() == private.StorageSecurity_STORAGE_SECURITY_INSECURE {
		return st.MountExistingInsecure()
	}
	return st.MountExisting(sc.GetNodeUnlockKey(), clusterKey)
}

// readDirectory reads the cluster directory from the ESP.
func (s *Service) readDirectory() (*api.ClusterDirectory, error) {
	b, err := s.root.ESP.Cairn.ClusterDirectory.Read()
	if errors.Is(err, os.ErrNotExist) {
		return nil, errors.New("there is no cluster directory on the ESP")
	}
	if err != nil {
		return nil, fmt.Errorf("when reading the cluster directory: %w", err)
	}
	var d api.ClusterDirectory
	if err := proto.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("the cluster directory does not parse: %w", err)
	}
	if err := parameters.ValidateDirectory(&d); err != nil {
		return nil, fmt.Errorf("the cluster directory is invalid: %w", err)
	}
	return &d, nil
}
