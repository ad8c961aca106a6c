package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor"
)

// testSetUpFile is a test-only file on the ESP, next to the node's
// parameters, that says the data partition was set up with the keys of
// cairn.test.storage-keys. It stands in for the sealed configuration,
// which is what tells a real node that MountNew is behind it.
const testSetUpFile = "test-data-partition-set-up"

// mkfsXFS is where the initramfs carries Debian's mkfs.xfs. The core runs
// without a PATH, so it is named in full.
const mkfsXFS = "/usr/sbin/mkfs.xfs"

// testMarkerFile is the file cairn.test.marker writes on the data
// partition.
const testMarkerFile = "marker"

// nodeStorage is what the storage child does to the disks: the methods of
// *localstorage.Storage, and a fake in tests.
type nodeStorage interface {
	MountESP() error
	MountEphemeral() error
	MountNew(ctx context.Context, nodeKey, clusterKey []byte) error
	MountExisting(nodeKey, clusterKey []byte) error
}

// storage is the storage child: it mounts the ESP and /ephemeral and,
// with the test-only keys, the data partition at /data. It remembers what
// it mounted, so that a restart by the supervisor after an error goes on
// from where the last run stopped instead of mounting twice.
type storage struct {
	disks nodeStorage
	// printf writes a phase line to the consoles.
	printf func(format string, args ...any)
	// espCairn is the ESP's cairn/ directory, dataRoot the data
	// partition's mount point.
	espCairn, dataRoot string
	// keys says nodeKey and clusterKey were given (test-only).
	keys                bool
	nodeKey, clusterKey []byte
	// marker is the text of cairn.test.marker; "" for none.
	marker string
	// mounted is set to true once the ESP and /ephemeral are mounted:
	// enrolment and the network wait for it. Nil in tests that do not
	// care.
	mounted event.Value[bool]

	espMounted, ephemeralMounted, dataMounted, markerDone bool
}

// newStorage returns the storage child for the node's disks s, keyed by the
// test-only flag if it was given, which sets mounted once the ESP and
// /ephemeral are mounted.
func newStorage(s *localstorage.Storage, fl flags, mounted event.Value[bool], printf func(string, ...any)) *storage {
	st := &storage{
		disks:    s,
		mounted:  mounted,
		printf:   printf,
		espCairn: s.Root.ESP.Cairn.FullPath(),
		dataRoot: s.Root.Data.FullPath(),
		keys:     fl.testStorageKeys,
		marker:   fl.testMarker,
	}
	if st.keys {
		st.nodeKey = append([]byte(nil), fl.testNodeKey[:]...)
		st.clusterKey = append([]byte(nil), fl.testClusterKey[:]...)
	}
	return st
}

// run is the storage child's runnable. Errors go back to the supervisor,
// which runs it again after a backoff; nothing it does on a retry can
// destroy data (see mountData).
func (s *storage) run(ctx context.Context) error {
	log := supervisor.Logger(ctx)
	if !s.espMounted {
		if err := s.disks.MountESP(); err != nil {
			return fmt.Errorf("when mounting the ESP: %w", err)
		}
		s.espMounted = true
		log.Infof("ESP mounted")
	}
	if !s.ephemeralMounted {
		if err := s.disks.MountEphemeral(); err != nil {
			return fmt.Errorf("when mounting /ephemeral: %w", err)
		}
		s.ephemeralMounted = true
	}
	if s.mounted != nil {
		s.mounted.Set(true)
	}
	if s.keys && !s.dataMounted {
		how, err := s.mountData(ctx, log)
		if err != nil {
			s.printf("data partition not mounted: %v", err)
			return err
		}
		s.dataMounted = true
		s.printf("data partition mounted (%s)", how)
	}
	if s.dataMounted && s.marker != "" && !s.markerDone {
		if err := s.checkMarker(); err != nil {
			return err
		}
		s.markerDone = true
	}
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	<-ctx.Done()
	return ctx.Err()
}

// mountData mounts the data partition and says whether it was "new" or
// "existing". It formats only a partition that was never set up: once the
// ESP says this node set it up, or its header says it was set up with
// other keys, a failure to open it is an error and nothing is written.
func (s *storage) mountData(ctx context.Context, log logtree.LeveledLogger) (string, error) {
	if err := os.MkdirAll(s.espCairn, 0o700); err != nil {
		return "", fmt.Errorf("when creating %s: %w", s.espCairn, err)
	}
	setUp := filepath.Join(s.espCairn, testSetUpFile)
	_, err := os.Stat(setUp)
	switch {
	case err == nil:
		if err := s.disks.MountExisting(s.nodeKey, s.clusterKey); err != nil {
			return "", fmt.Errorf("this node set its data partition up before, and it does not open (not formatting it): %w", err)
		}
		return "existing", nil
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("when looking for %s: %w", setUp, err)
	}
	err = s.disks.MountExisting(s.nodeKey, s.clusterKey)
	switch {
	case err == nil:
		return "existing", writeSynced(setUp, []byte("set up by cairn.test.storage-keys\n"), false)
	case errors.Is(err, localstorage.ErrWrongKey):
		return "", fmt.Errorf("the data partition was set up with other keys (not formatting it): %w", err)
	}
	log.Infof("No usable data partition (%v): setting one up", err)
	if err := s.disks.MountNew(ctx, s.nodeKey, s.clusterKey); err != nil {
		return "", fmt.Errorf("when setting up the data partition: %w", err)
	}
	return "new", writeSynced(setUp, []byte("set up by cairn.test.storage-keys\n"), false)
}

// checkMarker writes the test-only marker file if it is absent and
// reports the marker it finds otherwise.
func (s *storage) checkMarker() error {
	p := filepath.Join(s.dataRoot, testMarkerFile)
	b, err := os.ReadFile(p)
	switch {
	case err == nil:
		s.printf("found marker %s", strings.TrimSpace(string(b)))
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("when reading the marker: %w", err)
	}
	if err := writeSynced(p, []byte(s.marker+"\n"), true); err != nil {
		return err
	}
	s.printf("wrote marker")
	return nil
}

// writeSynced writes data to a new file at path and syncs the file and its
// directory, so that it survives a power cut once written. With exclusive
// set, an existing file is an error; without, it is replaced.
func writeSynced(path string, data []byte, exclusive bool) error {
	flag := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if exclusive {
		flag = os.O_WRONLY | os.O_CREATE | os.O_EXCL
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return fmt.Errorf("when creating %s: %w", path, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("when writing %s: %w", path, err)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("when syncing %s: %w", filepath.Dir(path), err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("when syncing %s: %w", filepath.Dir(path), err)
	}
	return nil
}
