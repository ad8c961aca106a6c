package fsquota

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"cairn.dev/cairn/pkg/fixture"
)

// quotaDir returns a fresh directory of project on a filesystem with
// project quotas (the temporary directory's), and removes the project's
// limits when the test ends. Where there are none (a machine whose kernel
// lacks quotas), it skips the test, unless it runs inside a node.
func quotaDir(t *testing.T, project uint32) string {
	t.Helper()
	dir := t.TempDir()
	err := SetProject(dir, project)
	if err == nil {
		_, _, err = Get(dir, project)
	}
	if errors.Is(err, ErrUnsupported) {
		fixture.SkipOutsideNode(t, fmt.Sprintf("%s has no project quotas (%v)", dir, err))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := SetLimits(dir, project, Limits{}); err != nil {
			t.Errorf("removing the limits of project %d: %v", project, err)
		}
	})
	return dir
}

// write writes n bytes to a new file at path and syncs it.
func write(path string, n int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = f.Write(bytes.Repeat([]byte{0xa5}, n))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// full reports whether err is how a filesystem refuses what goes past a
// project's limit: EDQUOT, or ENOSPC, which XFS answers for projects so
// that a directory looks like a filesystem of its own.
func full(err error) bool {
	return errors.Is(err, unix.EDQUOT) || errors.Is(err, unix.ENOSPC)
}

// statfsSize returns the size statfs(2) reports for path.
func statfsSize(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatalf("statfs %s: %v", path, err)
	}
	return st.Blocks * uint64(st.Bsize)
}

const mib = 1 << 20

// TestSpaceLimit limits a directory to 4 MiB: the project's usage counts
// what is written, statfs reports the limit as the size, a write past it
// fails, and raising the limit makes room at once.
func TestSpaceLimit(t *testing.T) {
	const project = 0x7ca1_0001
	dir := quotaDir(t, project)
	if err := SetLimits(dir, project, Limits{Bytes: 4 * mib, Inodes: 1000}); err != nil {
		t.Fatal(err)
	}
	l, u, err := Get(dir, project)
	if err != nil {
		t.Fatal(err)
	}
	if l != (Limits{Bytes: 4 * mib, Inodes: 1000}) {
		t.Errorf("Get after SetLimits: limits %+v, want 4 MiB and 1000 inodes", l)
	}
	if u.Inodes < 1 {
		t.Errorf("usage %+v counts no inode, want at least the directory", u)
	}
	if got := statfsSize(t, dir); got != 4*mib {
		t.Errorf("statfs of the directory: size %d, want the limit, %d", got, 4*mib)
	}

	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if p, inherit, err := Project(sub); err != nil || p != project || !inherit {
		t.Errorf("Project of a new subdirectory = %d, inherit %v, %v; want %d, inherited", p, inherit, err, project)
	}
	if err := write(filepath.Join(sub, "a"), 3*mib); err != nil {
		t.Fatalf("writing 3 MiB under a limit of 4 MiB: %v", err)
	}
	if _, u, err = Get(dir, project); err != nil || u.Bytes < 3*mib {
		t.Errorf("usage after writing 3 MiB: %+v, %v; want at least 3 MiB", u, err)
	}
	if err := write(filepath.Join(dir, "b"), 2*mib); !full(err) {
		t.Errorf("writing 2 MiB more past a limit of 4 MiB: %v, want EDQUOT or ENOSPC", err)
	}

	if err := SetLimits(dir, project, Limits{Bytes: 8 * mib, Inodes: 1000}); err != nil {
		t.Fatal(err)
	}
	if got := statfsSize(t, dir); got != 8*mib {
		t.Errorf("statfs after raising the limit: size %d, want %d", got, 8*mib)
	}
	if err := write(filepath.Join(dir, "b"), 2*mib); err != nil {
		t.Errorf("writing 2 MiB after raising the limit to 8 MiB: %v", err)
	}
}

// TestInodeLimit limits a directory to a few inodes: creating one more
// fails.
func TestInodeLimit(t *testing.T) {
	const project = 0x7ca1_0002
	dir := quotaDir(t, project)
	_, u, err := Get(dir, project)
	if err != nil {
		t.Fatal(err)
	}
	const room = 5
	if err := SetLimits(dir, project, Limits{Inodes: u.Inodes + room}); err != nil {
		t.Fatal(err)
	}
	for i := range room {
		if err := write(filepath.Join(dir, fmt.Sprint(i)), 1); err != nil {
			t.Fatalf("creating file %d of %d allowed: %v", i+1, room, err)
		}
	}
	if err := write(filepath.Join(dir, "one-more"), 1); !full(err) {
		t.Errorf("creating a file past the inode limit: %v, want EDQUOT or ENOSPC", err)
	}
}

// TestNoLimits removes a project's limits: what was refused is allowed,
// and Get reports no limit.
func TestNoLimits(t *testing.T) {
	const project = 0x7ca1_0003
	dir := quotaDir(t, project)
	if err := SetLimits(dir, project, Limits{Bytes: mib}); err != nil {
		t.Fatal(err)
	}
	if err := write(filepath.Join(dir, "a"), 2*mib); !full(err) {
		t.Fatalf("writing 2 MiB under a limit of 1 MiB: %v, want EDQUOT or ENOSPC", err)
	}
	if err := SetLimits(dir, project, Limits{}); err != nil {
		t.Fatal(err)
	}
	if l, _, err := Get(dir, project); err != nil || l != (Limits{}) {
		t.Errorf("Get after removing the limits: %+v, %v; want none", l, err)
	}
	if err := write(filepath.Join(dir, "a"), 2*mib); err != nil {
		t.Errorf("writing 2 MiB without limits: %v", err)
	}
}

// TestErrors checks what the functions say about what is not a directory
// and about a directory that does not exist.
func TestErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	for _, path := range []string{file, missing} {
		if err := SetProject(path, 1); err == nil {
			t.Errorf("SetProject(%s) succeeded", path)
		}
		if err := SetLimits(path, 1, Limits{Bytes: mib}); err == nil {
			t.Errorf("SetLimits(%s) succeeded", path)
		}
		if _, _, err := Get(path, 1); err == nil {
			t.Errorf("Get(%s) succeeded", path)
		}
	}
	if _, _, err := Get(missing, 1); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Get of a missing directory = %v, want os.ErrNotExist", err)
	}
}
