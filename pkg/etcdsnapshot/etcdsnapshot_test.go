package etcdsnapshot

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"cairn.dev/cairn/pkg/etcdtest"
	"cairn.dev/cairn/pkg/fixture"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, etcdtest.LeakOptions()...)
}

// snapshot writes a snapshot of the etcd behind cl into a file and returns
// its path.
func snapshot(t *testing.T, cl *clientv3.Client) string {
	t.Helper()
	resp, err := cl.SnapshotWithVersion(fixture.Context(t))
	if err != nil {
		t.Fatalf("SnapshotWithVersion: %v", err)
	}
	defer resp.Snapshot.Close()
	path := filepath.Join(t.TempDir(), "backup.db")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, resp.Snapshot); err != nil {
		t.Fatalf("reading the snapshot: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReadSnapshot takes a snapshot of a real etcd and reads it back: the
// latest value of a key written twice, a deleted key, a key never written,
// and the revision.
func TestReadSnapshot(t *testing.T) {
	cl := etcdtest.StartEtcd(t)
	ctx := fixture.Context(t)
	for _, kv := range [][2]string{{"a", "1"}, {"b", "gone"}, {"a", "2"}, {"c", "3"}} {
		if _, err := cl.Put(ctx, kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	del, err := cl.Delete(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	path := snapshot(t, cl)

	f, err := Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer f.Close()
	if f.Revision() != del.Header.Revision {
		t.Errorf("Revision() = %d, want %d", f.Revision(), del.Header.Revision)
	}
	for _, tc := range []struct {
		key, want string
		err       error
	}{
		{"a", "2", nil},
		{"c", "3", nil},
		{"b", "", ErrNotFound},
		{"never", "", ErrNotFound},
	} {
		got, err := f.Get(tc.key)
		if !errors.Is(err, tc.err) || string(got) != tc.want {
			t.Errorf("Get(%q) = %q, %v, want %q, %v", tc.key, got, err, tc.want, tc.err)
		}
	}
}

// TestRevisionAfterCompaction checks the revision of a snapshot whose
// latest write, a deletion, was compacted away: etcd counts on from the
// compaction, and so must Revision.
func TestRevisionAfterCompaction(t *testing.T) {
	cl := etcdtest.StartEtcd(t)
	ctx := fixture.Context(t)
	if _, err := cl.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	del, err := cl.Delete(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	f, err := Open(snapshot(t, cl))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer f.Close()
	if f.Revision() != del.Header.Revision {
		t.Errorf("Revision() = %d, want %d, the compacted deletion's", f.Revision(), del.Header.Revision)
	}
	if _, err := f.Get("k"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of the deleted key = %v, want ErrNotFound", err)
	}
}

// TestDamagedSnapshot checks that a snapshot with a changed byte, or cut
// short, is refused before its database is read.
func TestDamagedSnapshot(t *testing.T) {
	cl := etcdtest.StartEtcd(t)
	if _, err := cl.Put(fixture.Context(t), "k", "v"); err != nil {
		t.Fatal(err)
	}
	path := snapshot(t, cl)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 1
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"flipped", flipped, "does not match"},
		{"cut", good[:len(good)-100], "cut short"},
		{"empty", nil, "cut short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "damaged.db")
			if err := os.WriteFile(p, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			f, err := Open(p)
			if err == nil {
				f.Close()
				t.Fatalf("Open(%s snapshot) succeeded", tc.name)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open(%s snapshot) = %v, want it to say %q", tc.name, err, tc.want)
			}
		})
	}
}

// FuzzParseRevision feeds the parser of the key bucket's keys arbitrary
// bytes: it must never panic, and what it accepts must be a revision.
func FuzzParseRevision(f *testing.F) {
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x00\x05_\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x00\x05_\x00\x00\x00\x00\x00\x00\x00\x01t"))
	f.Add([]byte("short"))
	f.Fuzz(func(t *testing.T, k []byte) {
		main, tombstone, err := parseRevision(k)
		if err != nil {
			return
		}
		if main < 0 || (len(k) != 17 && len(k) != 18) || k[8] != '_' || tombstone != (len(k) == 18) {
			t.Errorf("parseRevision(%x) = %d, %v, nil: not a revision", k, main, tombstone)
		}
	})
}
