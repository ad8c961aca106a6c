package consensus

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/logtree"
)

// TestRemoveRunningMember removes a running member: its etcd stops, its
// Service returns ErrMemberRemoved (now and on every restart) and the
// process, this test, goes on. The remaining member keeps working.
func TestRemoveRunningMember(t *testing.T) {
	ctx := fixture.ContextTimeout(t, testTimeout)
	a, b := newTestNode(t), newTestNode(t)
	a.start(t)
	stA := a.waitVoter(t)
	join(t, ctx, stA, b)
	b.waitVoter(t)

	if err := stA.RemoveMember(ctx, b.cfg.Name); err != nil {
		t.Fatalf("RemoveMember: %v", err)
	}
	b.waitStatus(t, "stopped", func(s *Status) bool { return !s.Running })
	if _, err := os.Stat(b.svc.removedMarker()); err != nil {
		t.Errorf("removed member's data is not marked removed: %v", err)
	}
	// The supervisor was told why, and keeps getting told on restarts.
	deadline := time.Now().Add(time.Minute)
	for !b.logged(t, ErrMemberRemoved.Error(), 2) {
		if time.Now().After(deadline) {
			t.Fatalf("removed member's runnable did not return ErrMemberRemoved twice")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := stA.RemoveMember(ctx, b.cfg.Name); !errors.Is(err, ErrNoMember) {
		t.Errorf("RemoveMember(%q) of a removed member = %v, want ErrNoMember", b.cfg.Name, err)
	}

	list, err := stA.raw.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Members) != 1 || list.Members[0].Name != a.cfg.Name {
		t.Errorf("members after removal: %v, want only %s", list.Members, a.cfg.Name)
	}
	if _, err := stA.Client().Put(ctx, "still", "here"); err != nil {
		t.Errorf("Put on the remaining member: %v", err)
	}
	// b's peer certificate is revoked and gone.
	if _, err := peerCA().CRL(ctx, stA.raw); err != nil {
		t.Fatal(err)
	}
	resp, err := stA.raw.Get(ctx, PeerPKINamespace.CertificateKey(peerCertificateName(b.cfg.Name)))
	if err != nil || len(resp.Kvs) != 0 {
		t.Errorf("peer certificate of removed member still stored: %v, %v", resp, err)
	}
	resp, err = stA.raw.Get(ctx, peerCA().RevocationPrefix(), clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("revocations after removal: %v, %v, want one", resp, err)
	}
	// The remaining member's peer CRL file follows, after the grace.
	serial := string(resp.Kvs[0].Key[len(peerCA().RevocationPrefix()):])
	deadline = time.Now().Add(time.Minute)
	for {
		der, err := os.ReadFile(a.svc.tlsPath(crlFile))
		if err != nil {
			t.Fatal(err)
		}
		crl, err := x509.ParseRevocationList(der)
		if err != nil {
			t.Fatalf("peer CRL file: %v", err)
		}
		if len(crl.RevokedCertificateEntries) == 1 && crl.RevokedCertificateEntries[0].SerialNumber.Text(16) == serial {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("peer CRL file does not list the removed member's serial %s", serial)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestRemoveStoppedMember removes a member while its etcd is down, waits
// until the cluster's CRL refuses its certificate, and starts it again: it
// learns from its peers that it is out, and its Service returns
// ErrMemberRemoved instead of waiting for a leader forever.
func TestRemoveStoppedMember(t *testing.T) {
	ctx := fixture.ContextTimeout(t, testTimeout)
	a, b, c := newTestNode(t), newTestNode(t), newTestNode(t)
	a.start(t)
	stA := a.waitVoter(t)
	join(t, ctx, stA, b)
	b.waitVoter(t)
	join(t, ctx, stA, c)
	c.waitVoter(t)

	c.stop()
	if err := stA.RemoveMember(ctx, c.cfg.Name); err != nil {
		t.Fatalf("RemoveMember(%q): %v", c.cfg.Name, err)
	}
	// Both remaining members refuse c's certificate from now on.
	for _, n := range []*testNode{a, b} {
		waitRevoked(t, n, c)
	}

	start := time.Now()
	c.start(t)
	deadline := time.Now().Add(2 * time.Minute)
	for !c.logged(t, ErrMemberRemoved.Error(), 1) {
		if time.Now().After(deadline) {
			t.Fatalf("member removed while down did not return ErrMemberRemoved on its next start")
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("removal noticed %v after the start", time.Since(start))
	if _, err := os.Stat(c.svc.removedMarker()); err != nil {
		t.Errorf("removed member's data is not marked removed: %v", err)
	}
	if _, err := stA.Client().Put(ctx, "still", "here"); err != nil {
		t.Errorf("Put on a remaining member: %v", err)
	}
}

// waitRevoked waits until n's peer CRL file lists the peer certificate of
// removed.
func waitRevoked(t *testing.T, n, removed *testNode) {
	t.Helper()
	pemBytes, err := os.ReadFile(removed.svc.tlsPath(peerCertFile))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		t.Fatalf("no PEM in the peer certificate file of %s", removed.cfg.Name)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		der, err := os.ReadFile(n.svc.tlsPath(crlFile))
		if err != nil {
			t.Fatal(err)
		}
		crl, err := x509.ParseRevocationList(der)
		if err != nil {
			t.Fatalf("peer CRL file of %s: %v", n.cfg.Name, err)
		}
		for _, e := range crl.RevokedCertificateEntries {
			if e.SerialNumber.Cmp(cert.SerialNumber) == 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("peer CRL file of %s does not list the certificate of %s", n.cfg.Name, removed.cfg.Name)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestFatalTrap checks that etcd's Fatal and Panic log calls end only the
// goroutine that made them, and are reported.
func TestFatalTrap(t *testing.T) {
	for _, level := range []string{"fatal", "panic"} {
		t.Run(level, func(t *testing.T) {
			trap := newFatalTrap()
			lg := newZapLogger(logtree.New().LeveledFor("etcd"), trap)
			done := make(chan struct{})
			go func() {
				defer close(done)
				if level == "fatal" {
					lg.Fatal("disk on fire")
				} else {
					lg.Panic("disk on fire")
				}
				t.Errorf("%s log call returned", level)
			}()
			<-done
			<-trap.trapped()
			if msg := trap.message(); !strings.Contains(msg, "disk on fire") {
				t.Errorf("trapped message = %q, want it to say what happened", msg)
			}
		})
	}
	t.Run("while starting", func(t *testing.T) {
		trap := newFatalTrap()
		lg := newZapLogger(logtree.New().LeveledFor("etcd"), trap)
		start := func() (err error) {
			trap.setStarting(true)
			defer trap.setStarting(false)
			defer trap.catch(&err, "starting")
			lg.Fatal("bad flag")
			t.Errorf("Fatal on the starting goroutine returned")
			return nil
		}
		const want = "etcd failed fatally while starting: "
		if err := start(); err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "bad flag") {
			t.Errorf("start() = %v, want %q and the message", err, want)
		}
	})
	t.Run("other panic while starting", func(t *testing.T) {
		trap := newFatalTrap()
		defer func() {
			if r := recover(); r != "bug" {
				t.Errorf("recovered %v, want the panic that catch is not for: bug", r)
			}
		}()
		func() (err error) {
			trap.setStarting(true)
			defer trap.setStarting(false)
			defer trap.catch(&err, "starting")
			panic("bug")
		}()
	})
}

// logged tells whether n's supervisor logged an error containing s at least
// count times.
func (n *testNode) logged(t *testing.T, s string, count int) bool {
	r, err := n.lt.Read("", logtree.WithChildren(), logtree.WithBacklog(logtree.BacklogAll))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	found := 0
	for _, e := range r.Backlog {
		if strings.Contains(e.Message, s) {
			found++
		}
	}
	return found >= count
}
