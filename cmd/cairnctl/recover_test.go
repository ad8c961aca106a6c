package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"math/big"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cairn.dev/cairn/node/consensus"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/nodemanagement"
	"cairn.dev/cairn/pkg/etcdsnapshot"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/logtree"
)

// TestBackupKeys checks that cairnctl looks for the cluster CA of a
// backup where node/consensus keeps it.
func TestBackupKeys(t *testing.T) {
	if want := consensus.PKINamespace.CertificateKey(consensus.ClusterCA().Name); backupCACertificateKey != want {
		t.Errorf("backupCACertificateKey = %q, want %q", backupCACertificateKey, want)
	}
	if want := strings.TrimSuffix(backupCACertificateKey, "/cert") + "/key"; backupCAKeyKey != want {
		t.Errorf("backupCAKeyKey = %q, want %q", backupCAKeyKey, want)
	}
}

// TestBackupAndRecover takes a backup of a real control plane with
// cairnctl, is refused a recovery while the curator answers, then loses
// the control plane's etcd and the owner certificate's validity, and
// recovers through the node's real NodeManagement: cairnctl issues itself
// an owner certificate from the backup, the node keeps the backup and
// reboots, and its etcd comes back restored.
func TestBackupAndRecover(t *testing.T) {
	dir := t.TempDir()
	c := ownedControlPlane(t, dir)
	mustRun(t, dir, "--endpoint", c.Addr, "takeownership")
	backup := filepath.Join(t.TempDir(), "cluster.backup")
	runUntilOK(t, dir, "cluster", "backup", "--out", backup)
	f, err := etcdsnapshot.Open(backup)
	if err != nil {
		t.Fatalf("the backup is no etcd snapshot: %v", err)
	}
	ca, err := f.Get(backupCACertificateKey)
	f.Close()
	if err != nil || !sameDER(ca, c.CA) {
		t.Fatalf("cluster CA in the backup: %v, want the cluster's", err)
	}

	rebooted := make(chan struct{})
	addr := serveNodeManagement(t, c.Node, nodemanagement.Config{
		LogTree:     logtree.New(),
		Reboot:      func() { close(rebooted) },
		EtcdDataDir: c.Member.Config.DataDir,
		ClusterCA:   c.CA,
	})
	recoverArgs := []string{"--node-endpoint", c.Node.ID() + "=" + addr, "cluster", "recover", "--from", backup, "--node", c.Node.ID()}

	if _, err := run(t, dir, recoverArgs...); err == nil || !strings.Contains(err.Error(), "still has a leader") {
		t.Errorf("cluster recover while the curator answers = %v, want it refused", err)
	}
	other := filepath.Join(t.TempDir(), "other.backup")
	if err := writeFileAtomic(filepath.Dir(other), filepath.Base(other), fakeSnapshot(t), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, dir, "--node-endpoint", c.Node.ID()+"="+addr, "cluster", "recover", "--from", other, "--node", c.Node.ID()); err == nil || !strings.Contains(err.Error(), "not a usable backup") {
		t.Errorf("cluster recover from a file that is no backup = %v, want it refused", err)
	}

	// Quorum is lost, and with it the curator; the owner certificate
	// expires meanwhile.
	c.Member.Stop()
	b, err := openBackup(backup, c.CA)
	if err != nil {
		t.Fatal(err)
	}
	expired := identity.OwnerCertificateTemplate()
	expired.SerialNumber = big.NewInt(42)
	expired.NotBefore, expired.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, &expired, b.ca, c.OwnerKey.Public().(ed25519.PublicKey), b.caKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeCertificate(dir, ownerCertFile, der); err != nil {
		t.Fatal(err)
	}

	out := mustRun(t, dir, recoverArgs...)
	for _, want := range []string{"issued with the backup's CA key", "reboots"} {
		if !strings.Contains(out, want) {
			t.Errorf("cluster recover printed %q, want it to say %q", out, want)
		}
	}
	select {
	case <-rebooted:
	case <-time.After(30 * time.Second):
		t.Fatal("cluster recover: the node did not reboot")
	}
	c.Member.Start(t)
	st := c.Member.WaitVoter(t)
	if r, _, err := consensus.PendingRestore(fixture.Context(t), st.Client()); err != nil || r == nil || r.Member != c.Node.ID() {
		t.Errorf("after the reboot, PendingRestore = %+v, %v, want the restore by %s", r, err, c.Node.ID())
	}
}
