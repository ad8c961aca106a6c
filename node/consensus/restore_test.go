package consensus

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor"
)

// takeSnapshot takes a snapshot through st and returns the file.
func takeSnapshot(ctx context.Context, t *testing.T, st *Status) (*Snapshot, []byte) {
	t.Helper()
	sn, err := st.Snapshot(ctx)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	defer sn.Close()
	file, err := io.ReadAll(sn)
	if err != nil {
		t.Fatalf("reading the snapshot: %v", err)
	}
	return sn, file
}

// clusterCA returns the cluster CA certificate of the cluster st is a
// member of.
func clusterCA(ctx context.Context, t *testing.T, st *Status) []byte {
	t.Helper()
	ca, err := ClusterCA().Ensure(ctx, st.raw)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// TestStageRestoreRefuses hands StageRestore backups it must refuse, and
// checks that each is refused as such and nothing is staged.
func TestStageRestoreRefuses(t *testing.T) {
	ctx := fixture.ContextTimeout(t, testTimeout)
	a, other := newTestNode(t), newTestNode(t)
	a.start(t)
	other.start(t)
	stA, stOther := a.waitVoter(t), other.waitVoter(t)
	ca := clusterCA(ctx, t, stA)
	sn, file := takeSnapshot(ctx, t, stA)
	otherSn, otherFile := takeSnapshot(ctx, t, stOther)
	damaged := bytes.Clone(file)
	damaged[len(damaged)/3] ^= 1
	damagedSn := sha(damaged)

	for _, tc := range []struct {
		name    string
		dataDir string
		file    []byte
		size    int64
		sum     []byte
		want    error
	}{
		{"another cluster's", a.cfg.DataDir, otherFile, otherSn.Size, otherSn.SHA256, ErrBadBackup},
		{"cut short", a.cfg.DataDir, file[:len(file)-1], sn.Size, sn.SHA256, ErrBadBackup},
		{"longer than announced", a.cfg.DataDir, append(bytes.Clone(file), 0), sn.Size, sn.SHA256, ErrBadBackup},
		{"another SHA-256", a.cfg.DataDir, file, sn.Size, otherSn.SHA256, ErrBadBackup},
		{"damaged", a.cfg.DataDir, damaged, sn.Size, damagedSn, ErrBadBackup},
		{"no etcd data", t.TempDir(), file, sn.Size, sn.SHA256, ErrNoData},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := StageRestore(tc.dataDir, bytes.NewReader(tc.file), tc.size, tc.sum, ca)
			if !errors.Is(err, tc.want) {
				t.Errorf("StageRestore of a %s backup = %v, want %v", tc.name, err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(tc.dataDir, restoreDir, stagedBackup)); err == nil {
				t.Errorf("StageRestore of a %s backup staged it", tc.name)
			}
		})
	}
	rev, err := StageRestore(a.cfg.DataDir, bytes.NewReader(file), sn.Size, sn.SHA256, ca)
	if err != nil || rev != sn.Revision {
		t.Errorf("StageRestore of the good backup = %d, %v, want %d", rev, err, sn.Revision)
	}
}

// TestRestore restores a backup of a two-member cluster on one of them,
// with a crash in the middle of putting the restored data in place: the
// member comes back alone, in a new cluster with a new peer CA, with the
// backup's data and a record naming the lost member.
func TestRestore(t *testing.T) {
	ctx := fixture.ContextTimeout(t, testTimeout)
	a, b := newTestNode(t), newTestNode(t)
	a.start(t)
	stA := a.waitVoter(t)
	join(t, ctx, stA, b)
	b.waitVoter(t)
	if _, err := stA.Client().Put(ctx, "before", "1"); err != nil {
		t.Fatal(err)
	}
	sn, file := takeSnapshot(ctx, t, stA)
	if _, err := stA.Client().Put(ctx, "after", "2"); err != nil {
		t.Fatal(err)
	}
	list, err := stA.raw.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	oldCluster := list.Header.ClusterId
	oldPeerCA, err := os.ReadFile(a.svc.tlsPath(caFile))
	if err != nil {
		t.Fatal(err)
	}
	ca := clusterCA(ctx, t, stA)
	b.stop()
	a.stop()

	if _, err := StageRestore(a.cfg.DataDir, bytes.NewReader(file), sn.Size, sn.SHA256, ca); err != nil {
		t.Fatalf("StageRestore: %v", err)
	}
	// A crash after the restore was prepared and the member's data was
	// set aside, before the restored data took its place.
	svc := New(a.cfg)
	if err := runOnce(t, func(ctx context.Context) error { return svc.prepareRestore(ctx) }); err != nil {
		t.Fatalf("prepareRestore: %v", err)
	}
	aside := filepath.Join(a.cfg.DataDir, beforeRestoreDir)
	if err := os.MkdirAll(aside, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(svc.etcdDir(), filepath.Join(aside, "etcd")); err != nil {
		t.Fatal(err)
	}

	a.start(t)
	stA = a.waitVoter(t)
	if members, err := stA.Members(ctx); err != nil || !slices.Equal(members, []string{a.cfg.Name}) {
		t.Errorf("members after the restore = %v, %v, want only %s", members, err, a.cfg.Name)
	}
	list, err = stA.raw.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if list.Header.ClusterId == oldCluster {
		t.Errorf("the restored cluster kept the cluster ID %x of the lost one", oldCluster)
	}
	if resp, err := stA.Client().Get(ctx, "before"); err != nil || len(resp.Kvs) != 1 {
		t.Errorf("key written before the backup: %v, %v, want it", resp, err)
	}
	resp, err := stA.Client().Get(ctx, "after")
	if err != nil || len(resp.Kvs) != 0 {
		t.Errorf("key written after the backup: %v, %v, want none", resp, err)
	}
	if resp.Header.Revision < sn.Revision+restoreRevisionBump {
		t.Errorf("revision after the restore is %d, want it moved on to at least %d", resp.Header.Revision, sn.Revision+restoreRevisionBump)
	}
	if peerCA, err := os.ReadFile(a.svc.tlsPath(caFile)); err != nil || bytes.Equal(peerCA, oldPeerCA) {
		t.Errorf("peer CA file after the restore: %v, want a new peer CA", err)
	}
	r, _, err := PendingRestore(ctx, stA.Client())
	if err != nil || r == nil {
		t.Fatalf("PendingRestore = %v, %v, want the record of the restore", r, err)
	}
	if r.Member != a.cfg.Name || !slices.Equal(r.LostMembers, []string{b.cfg.Name}) || r.BackupRevision != sn.Revision {
		t.Errorf("restore record = %+v, want member %s, lost %s, revision %d", r, a.cfg.Name, b.cfg.Name, sn.Revision)
	}
	for _, p := range []string{filepath.Join(aside, "etcd", "member"), filepath.Join(aside, "peer-tls", peerCertFile)} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("former data not kept: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(a.cfg.DataDir, restoreDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("restore directory after the restore: %v, want it gone", err)
	}
}

// runOnce runs f once under a supervisor of its own, as the member's own
// runnables run, and returns its error.
func runOnce(t *testing.T, f func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errC := make(chan error, 1)
	sup := supervisor.New(ctx, func(ctx context.Context) error {
		errC <- f(ctx)
		supervisor.Signal(ctx, supervisor.SignalHealthy)
		supervisor.Signal(ctx, supervisor.SignalDone)
		return nil
	}, supervisor.WithLogTree(logtree.New()), supervisor.WithPropagatePanic())
	err := <-errC
	cancel()
	sup.Wait()
	return err
}

func sha(b []byte) []byte {
	sum := sha256.Sum256(b)
	return sum[:]
}
