package consensus

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"cairn.dev/cairn/pkg/etcdsnapshot"
)

// Snapshot is a consistent copy of etcd's database, as Status.Snapshot took
// it: the file etcd's Maintenance API streams (the database, then its
// SHA-256), to be read from the start with Read. Close it when done.
type Snapshot struct {
	// Size is the size of the file in bytes.
	Size int64
	// SHA256 is the SHA-256 of the whole file.
	SHA256 []byte
	// Revision is the etcd revision of the snapshot: every write up to it
	// is in it, none after.
	Revision int64
	// Version is the storage version of the etcd that took it.
	Version string

	file *os.File
}

// Read reads the snapshot file.
func (sn *Snapshot) Read(p []byte) (int, error) { return sn.file.Read(p) }

// Close releases the snapshot's file.
func (sn *Snapshot) Close() error { return sn.file.Close() }

// snapshotPattern names the files in which Snapshot keeps snapshots while
// it takes them, in DataDir.
const snapshotPattern = "snapshot-*.tmp"

// Snapshot takes a snapshot of etcd through the local member: first a
// linearizable read, so that the member has applied every write the
// cluster acknowledged before the call, then etcd's own snapshot of its
// database, copied into a file on the data partition. Reading from that
// file, not from etcd, means a slow reader never holds etcd's database
// transaction open (which keeps etcd from reusing the pages freed
// meanwhile). The file has no name once Snapshot returns: closing the
// Snapshot frees its space.
func (s *Status) Snapshot(ctx context.Context) (*Snapshot, error) {
	if !s.Running {
		return nil, errors.New("etcd is not running")
	}
	if _, err := s.raw.Get(ctx, "snapshot-barrier"); err != nil {
		return nil, fmt.Errorf("when catching up with the cluster: %w", err)
	}
	resp, err := s.raw.SnapshotWithVersion(ctx)
	if err != nil {
		return nil, fmt.Errorf("when starting etcd's snapshot: %w", err)
	}
	defer resp.Snapshot.Close()

	tmp, err := os.CreateTemp(s.dataDir, snapshotPattern)
	if err != nil {
		return nil, fmt.Errorf("when creating the snapshot file: %w", err)
	}
	path := tmp.Name()
	defer os.Remove(path)
	h := sha256.New()
	size, err := io.Copy(io.MultiWriter(tmp, h), resp.Snapshot)
	if err == nil {
		err = tmp.Close()
	} else {
		tmp.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("when copying etcd's snapshot: %w", err)
	}
	f, err := etcdsnapshot.Open(path)
	if err != nil {
		return nil, fmt.Errorf("when checking etcd's snapshot: %w", err)
	}
	rev := f.Revision()
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("when checking etcd's snapshot: %w", err)
	}
	file, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("when opening the snapshot file: %w", err)
	}
	return &Snapshot{Size: size, SHA256: h.Sum(nil), Revision: rev, Version: resp.Version, file: file}, nil
}

// removeStaleSnapshots removes the files of snapshots that were being taken
// when the node went down.
func (s *Service) removeStaleSnapshots() error {
	stale, err := filepath.Glob(filepath.Join(s.cfg.DataDir, snapshotPattern))
	if err != nil {
		return fmt.Errorf("when looking for stale snapshots: %w", err)
	}
	for _, p := range stale {
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("when removing a stale snapshot: %w", err)
		}
	}
	return nil
}
