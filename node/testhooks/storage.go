//go:build cairntest

package testhooks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/pkg/logtree"
)

// Storage are the storage child's test hooks: the flags that ask for
// them, the disks and places they work on, and what they did so far. The
// zero Storage does nothing.
type Storage struct {
	flags Flags
	disks Disks
	// espCairn is the ESP's cairn/ directory, dataRoot the data
	// partition's mount point.
	espCairn, dataRoot string
	// printf writes a phase line to the consoles.
	printf func(format string, args ...any)

	dataMounted, markerDone, testRan bool
}

// Storage returns the storage child's test hooks, working on disks, with
// the ESP's cairn/ directory at espCairn and the data partition mounted
// at dataRoot; printf writes phase lines.
func (f Flags) Storage(disks Disks, espCairn, dataRoot string, printf func(string, ...any)) Storage {
	return Storage{flags: f, disks: disks, espCairn: espCairn, dataRoot: dataRoot, printf: printf}
}

// Run sets the data partition up with cairn.test.storage-keys, writes or
// reports cairn.test.marker and runs the tests of cairn.test.run. The
// storage child runs it once its own mounts are done, on every run: what
// succeeded is not done again.
func (h *Storage) Run(ctx context.Context, log logtree.LeveledLogger) error {
	if h.flags.storageKeys && !h.dataMounted {
		how, err := h.mountData(ctx, log)
		if err != nil {
			h.printf("data partition not mounted: %v", err)
			return err
		}
		h.dataMounted = true
		h.printf("data partition mounted (%s)", how)
	}
	if h.dataMounted && h.flags.marker != "" && !h.markerDone {
		if err := h.checkMarker(); err != nil {
			return err
		}
		h.markerDone = true
	}
	if h.dataMounted && h.flags.run != "" && !h.testRan {
		// Once per boot, even if it fails: the host reads the outcome.
		h.testRan = true
		h.runNodeTests(ctx, h.flags.run)
	}
	return nil
}

// testSetUpFile is a test-only file on the ESP, next to the node's
// parameters, that says the data partition was set up with the keys of
// cairn.test.storage-keys. It stands in for the sealed configuration,
// which is what tells a real node that MountNew is behind it.
const testSetUpFile = "test-data-partition-set-up"

// testMarkerFile is the file cairn.test.marker writes on the data
// partition.
const testMarkerFile = "marker"

// mountData mounts the data partition and says whether it was "new" or
// "existing". It formats only a partition that was never set up: once the
// ESP says this node set it up, or its header says it was set up with
// other keys, a failure to open it is an error and nothing is written.
func (s *Storage) mountData(ctx context.Context, log logtree.LeveledLogger) (string, error) {
	if err := os.MkdirAll(s.espCairn, 0o700); err != nil {
		return "", fmt.Errorf("when creating %s: %w", s.espCairn, err)
	}
	setUp := filepath.Join(s.espCairn, testSetUpFile)
	_, err := os.Stat(setUp)
	switch {
	case err == nil:
		if err := s.disks.MountExisting(s.flags.nodeKey[:], s.flags.clusterKey[:]); err != nil {
			return "", fmt.Errorf("this node set its data partition up before, and it does not open (not formatting it): %w", err)
		}
		return "existing", nil
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("when looking for %s: %w", setUp, err)
	}
	err = s.disks.MountExisting(s.flags.nodeKey[:], s.flags.clusterKey[:])
	switch {
	case err == nil:
		return "existing", writeSynced(setUp, []byte("set up by cairn.test.storage-keys\n"), false)
	case errors.Is(err, localstorage.ErrWrongKey):
		return "", fmt.Errorf("the data partition was set up with other keys (not formatting it): %w", err)
	}
	log.Infof("No usable data partition (%v): setting one up", err)
	if err := s.disks.MountNew(ctx, s.flags.nodeKey[:], s.flags.clusterKey[:]); err != nil {
		return "", fmt.Errorf("when setting up the data partition: %w", err)
	}
	return "new", writeSynced(setUp, []byte("set up by cairn.test.storage-keys\n"), false)
}

// checkMarker writes the test-only marker file if it is absent and
// reports the marker it finds otherwise.
func (s *Storage) checkMarker() error {
	p := filepath.Join(s.dataRoot, testMarkerFile)
	b, err := os.ReadFile(p)
	switch {
	case err == nil:
		s.printf("found marker %s", strings.TrimSpace(string(b)))
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("when reading the marker: %w", err)
	}
	if err := writeSynced(p, []byte(s.flags.marker+"\n"), true); err != nil {
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
