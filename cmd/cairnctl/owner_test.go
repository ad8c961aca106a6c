package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"cairn.dev/cairn/node/curator"
	"cairn.dev/cairn/node/curator/curatortest"
	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/fixture"
)

func TestRenewalDue(t *testing.T) {
	ca := identitytest.NewCA(t, "cluster CA")
	key := identitytest.NewKey(t)
	pub := key.Public().(ed25519.PublicKey)
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	issue := func(pub ed25519.PublicKey, notBefore, notAfter time.Time) []byte {
		der, err := ca.Sign(identity.OwnerCertificateTemplate(), pub, notBefore, notAfter)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	day := 24 * time.Hour
	for _, tc := range []struct {
		name string
		cert []byte
		want string // a word of the reason, "" for not due
	}{
		{"fresh", issue(pub, now.Add(-day), now.Add(6*day)), ""},
		{"just over a third left", issue(pub, now.Add(-4*day), now.Add(3*day+time.Hour)), ""},
		{"less than a third left", issue(pub, now.Add(-5*day), now.Add(2*day)), "third"},
		{"expired", issue(pub, now.Add(-8*day), now.Add(-day)), "expired"},
		{"another key", issue(identitytest.NewKey(t).Public().(ed25519.PublicKey), now.Add(-day), now.Add(6*day)), "not for the owner key"},
	} {
		got, err := renewalDue(key, tc.cert, now)
		if err != nil {
			t.Fatalf("%s: renewalDue: %v", tc.name, err)
		}
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("renewalDue of a %s certificate = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestParseSerial(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []byte // nil: refused
	}{
		{"1a2b", []byte{0x1a, 0x2b}},
		{"1A:2B", []byte{0x1a, 0x2b}},
		{"0x01a2b", []byte{0x1a, 0x2b}},
		{"00ff", []byte{0xff}},
		{"", nil},
		{"0", nil},
		{"zz", nil},
		{"-1", nil},
		{strings.Repeat("ff", 21), nil},
	} {
		got, err := parseSerial(tc.in)
		if (err != nil) != (tc.want == nil) || !bytes.Equal(got, tc.want) {
			t.Errorf("parseSerial(%q) = %x, %v, want %x", tc.in, got, err, tc.want)
		}
	}
}

// runStderr runs cairnctl like run, and also returns what it wrote to
// stderr.
func runStderr(t *testing.T, dir string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := runApp(ctx, &out, dir, func(a *app) { a.errOut = &errOut }, args...)
	return out.String(), errOut.String(), err
}

// ownerCertificateOf reads the owner certificate of the configuration dir.
func ownerCertificateOf(t *testing.T, dir string) *x509.Certificate {
	t.Helper()
	der, err := readCertificate(dir, ownerCertFile)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// copyContext copies the files of the context in dir to a new directory.
func copyContext(t *testing.T, dir string) string {
	t.Helper()
	to := t.TempDir()
	for _, f := range contextFiles {
		data, err := os.ReadFile(filepath.Join(dir, f.name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, f.name), data, f.perm); err != nil {
			t.Fatal(err)
		}
	}
	return to
}

// TestOwnerCommands runs owner show, rotate-key, revoke and renew against a
// real curator, and the commands of a configuration whose key was rotated
// away or whose certificate was revoked.
func TestOwnerCommands(t *testing.T) {
	dir := t.TempDir()
	c := ownedControlPlane(t, dir)
	mustRun(t, dir, "--endpoint", c.Addr, "takeownership")
	runUntilOK(t, dir, "node", "list")
	before := copyContext(t, dir)
	oldKey, err := readOwnerKey(dir)
	if err != nil {
		t.Fatal(err)
	}

	var v ownerView
	if err := json.Unmarshal([]byte(mustRun(t, dir, "-o", "json", "owner", "show")), &v); err != nil {
		t.Fatalf("owner show -o json: %v", err)
	}
	held := ownerCertificateOf(t, dir)
	serial := rpc.FormatSerial(held.SerialNumber.Bytes())
	if v.Key != v.ClusterKey || v.Certificate.Serial != serial || v.Certificate.State != "valid" || len(v.Certificates) != 1 || !v.Certificates[0].Held {
		t.Errorf("owner show = %+v, want the held certificate %s, valid, of the cluster's key, as the one issued", v, serial)
	}
	if _, err := run(t, dir, "owner", "revoke", serial); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("owner revoke of the certificate held = %v, want a refusal naming --force", err)
	}
	if _, err := run(t, dir, "owner", "revoke", "not-hex"); err == nil || !strings.Contains(err.Error(), "not a certificate serial") {
		t.Errorf("owner revoke not-hex = %v, want it refused as no serial", err)
	}

	out := mustRun(t, dir, "owner", "rotate-key")
	if !strings.Contains(out, "Rotated the owner key") {
		t.Errorf("owner rotate-key printed %q, want it to say it rotated", out)
	}
	newKey, err := readOwnerKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if newKey.Equal(oldKey) {
		t.Fatal("owner-key.pem holds the old key after rotate-key")
	}
	for _, f := range []string{ownerKeyNewFile, ownerKeyOldFile} {
		if exists(filepath.Join(dir, f)) {
			t.Errorf("%s is left after rotate-key", f)
		}
	}
	mustRun(t, dir, "node", "list")
	if _, err := run(t, before, "node", "list"); err == nil || !strings.Contains(err.Error(), "was rotated") || !strings.Contains(err.Error(), "add-context") {
		t.Errorf("node list with the configuration from before the rotation = %v, want the refusal explained", err)
	}

	// Revoking the certificate held, then renewing it.
	serial = rpc.FormatSerial(ownerCertificateOf(t, dir).SerialNumber.Bytes())
	out = mustRun(t, dir, "owner", "revoke", "--force", serial)
	if !strings.Contains(out, "Revoked owner certificate "+serial) || !strings.Contains(out, "owner renew") {
		t.Errorf("owner revoke --force printed %q, want it to name %s and owner renew", out, serial)
	}
	if _, err := run(t, dir, "node", "list"); err == nil || !strings.Contains(err.Error(), "revoked") || !strings.Contains(err.Error(), "cairnctl owner renew") {
		t.Errorf("node list with the revoked certificate = %v, want the refusal explained", err)
	}
	_, stderr, err := runStderr(t, dir, "owner", "renew")
	if err != nil || !strings.Contains(stderr, "Renewed the owner certificate") {
		t.Fatalf("owner renew = %v, printing %q to stderr", err, stderr)
	}
	mustRun(t, dir, "node", "list")
	if err := json.Unmarshal([]byte(mustRun(t, dir, "-o", "json", "owner", "show")), &v); err != nil {
		t.Fatalf("owner show -o json: %v", err)
	}
	states := map[string]string{}
	for _, c := range v.Certificates {
		states[c.Serial] = c.State
	}
	if states[serial] != "revoked" || states[v.Certificate.Serial] != "valid" || len(states) != 3 {
		t.Errorf("owner show lists %v, want %s revoked, %s valid and the first one of the old key", states, serial, v.Certificate.Serial)
	}
}

// TestRotateKeyStopped stops a rotation at each point where cairnctl could
// die, by leaving the files as it would, and checks that the next commands
// finish it without losing the key the cluster trusts.
func TestRotateKeyStopped(t *testing.T) {
	dir := t.TempDir()
	c := ownedControlPlane(t, dir)
	mustRun(t, dir, "--endpoint", c.Addr, "takeownership")
	runUntilOK(t, dir, "node", "list")
	ctx := fixture.Context(t)

	// rotateBehindItsBack rotates the cluster to a new key, as a
	// rotate-key that stopped before it heard the answer, and returns it.
	rotateBehindItsBack := func() ed25519.PrivateKey {
		t.Helper()
		a := newApp(os.Stdout, os.Stderr)
		a.configDir = dir
		a.timeout = time.Minute
		o, err := a.owner()
		if err != nil {
			t.Fatal(err)
		}
		next, err := newKeyFile(dir, ownerKeyNewFile)
		if err != nil {
			t.Fatal(err)
		}
		if err := o.curator(ctx, "rotating", func(ctx context.Context, conn *grpc.ClientConn) error {
			_, err := rotateOwnerKeyOn(ctx, conn, o.key, next)
			return err
		}); err != nil {
			t.Fatalf("rotating the owner key: %v", err)
		}
		return next
	}

	t.Run("before the cluster heard of it", func(t *testing.T) {
		next, err := newKeyFile(dir, ownerKeyNewFile)
		if err != nil {
			t.Fatal(err)
		}
		if _, stderr, err := runStderr(t, dir, "node", "list"); err != nil || !strings.Contains(stderr, "rotation is unfinished") {
			t.Errorf("node list with a rotation not sent = %v, stderr %q, want it to work and say so", err, stderr)
		}
		out := mustRun(t, dir, "owner", "rotate-key")
		if !strings.Contains(out, "unfinished rotation") || !strings.Contains(out, "Rotated the owner key") {
			t.Errorf("owner rotate-key printed %q, want it to resume, then rotate", out)
		}
		if key, err := readOwnerKey(dir); err != nil || !key.Equal(next) {
			t.Errorf("owner key after the resumed rotation = %v, want the key of the unfinished one", err)
		}
		mustRun(t, dir, "node", "list")
	})

	t.Run("before the answer came", func(t *testing.T) {
		next := rotateBehindItsBack()
		if _, err := run(t, dir, "node", "list"); err == nil || !strings.Contains(err.Error(), "unfinished rotation") {
			t.Errorf("node list with the old key = %v, want it to say how to finish the rotation", err)
		}
		mustRun(t, dir, "owner", "rotate-key")
		if key, err := readOwnerKey(dir); err != nil || !key.Equal(next) {
			t.Errorf("owner key after finishing = %v, want the key the cluster took", err)
		}
		mustRun(t, dir, "node", "list")
	})

	t.Run("between the key and the certificate", func(t *testing.T) {
		next := rotateBehindItsBack()
		if err := os.Rename(filepath.Join(dir, ownerKeyNewFile), filepath.Join(dir, ownerKeyFile)); err != nil {
			t.Fatal(err)
		}
		_, stderr, err := runStderr(t, dir, "node", "list")
		if err != nil || !strings.Contains(stderr, "Renewed the owner certificate (it is not for the owner key held)") {
			t.Errorf("node list with a certificate of the old key = %v, stderr %q, want it renewed", err, stderr)
		}
		if pub := ownerCertificateOf(t, dir).PublicKey.(ed25519.PublicKey); !pub.Equal(next.Public()) {
			t.Errorf("owner certificate is not for the new key after the renewal")
		}
	})
}

// TestOwnerRenewal runs a curator whose owner certificates live 15 s:
// once less than a third of that is left, the next command renews the
// certificate first and says so on stderr.
func TestOwnerRenewal(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for an owner certificate to near its end; skipped under -short")
	}
	dir := t.TempDir()
	mustRun(t, dir, "params", "bootstrap", "--out", filepath.Join(dir, "bootstrap.pb"))
	key, err := readOwnerKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := curatortest.StartControlPlane(t, curatortest.WithOwnerKey(key),
		curatortest.WithCuratorOptions(curator.WithCertificateLifetimes(0, 15*time.Second)))
	mustRun(t, dir, "--endpoint", c.Addr, "takeownership")
	runUntilOK(t, dir, "node", "list")
	first := ownerCertificateOf(t, dir)
	due := first.NotAfter.Add(-first.NotAfter.Sub(first.NotBefore) / 3)
	time.Sleep(time.Until(due.Add(time.Second)))

	_, stderr, err := runStderr(t, dir, "node", "list")
	if err != nil {
		t.Fatalf("node list once the certificate is due: %v", err)
	}
	if !strings.Contains(stderr, "Renewed the owner certificate (less than a third of its lifetime is left)") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("node list printed %q to stderr, want one line saying it renewed", stderr)
	}
	if renewed := ownerCertificateOf(t, dir); !renewed.NotAfter.After(first.NotAfter) {
		t.Errorf("owner certificate ends at %v after the renewal, want later than %v", renewed.NotAfter, first.NotAfter)
	}
}
