package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/localstorage"
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

// identityFile is the name, in the data partition's node directory, of the
// node's identity bundle (identity.Node.MarshalPEM).
const identityFile = "identity.pem"

// identityPath is where the node's identity bundle lives.
func identityPath(root *localstorage.Root) string {
	return filepath.Join(root.Data.Node.FullPath(), identityFile)
}

// writeIdentity stores the node's identity on the data partition.
func writeIdentity(root *localstorage.Root, node *identity.Node) error {
	b, err := node.MarshalPEM()
	if err != nil {
		return fmt.Errorf("when marshalling the identity: %w", err)
	}
	if err := root.Data.Node.MkdirAll(0o700); err != nil {
		return fmt.Errorf("when creating the node directory: %w", err)
	}
	if err := writeFileSync(identityPath(root), b); err != nil {
		return fmt.Errorf("when writing the identity: %w", err)
	}
	return nil
}

// readIdentity loads the node's identity from the data partition.
func readIdentity(root *localstorage.Root) (*identity.Node, error) {
	b, err := os.ReadFile(identityPath(root))
	if err != nil {
		return nil, fmt.Errorf("when reading the identity: %w", err)
	}
	n, err := identity.ParseNodePEM(b)
	if err != nil {
		return nil, fmt.Errorf("when parsing the identity: %w", err)
	}
	return n, nil
}

// writeFileSync replaces path atomically (temporary file, fsync, rename,
// fsync of the directory), readable by its owner only.
func writeFileSync(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // fails harmlessly once renamed
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// mountNew sets up the data partition of a node enrolling for the first
// time, encrypted unless sc says insecure.
func mountNew(ctx context.Context, st storage, sc *private.SealedConfiguration) error {
	if sc.GetStorageSecurity() == private.StorageSecurity_STORAGE_SECURITY_INSECURE {
		return st.MountNewInsecure(ctx)
	}
	return st.MountNew(ctx, sc.GetNodeUnlockKey(), sc.GetClusterUnlockKey())
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
