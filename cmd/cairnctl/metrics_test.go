package main

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/identity/identitytest"
)

// TestMetricsCredential has a real curator certify a scraper's key: the
// files make a metrics client configuration of the cluster CA, and the
// key is the owner's to read alone.
func TestMetricsCredential(t *testing.T) {
	dir := t.TempDir()
	c := ownedControlPlane(t, dir)
	mustRun(t, dir, "--endpoint", c.Addr, "takeownership")
	out := filepath.Join(t.TempDir(), "prom")
	printed := mustRun(t, dir, "metrics", "credential", "--name", "prom-1", "--out", out, "--lifetime", "2h")
	if !strings.Contains(printed, "server_name") {
		t.Errorf("metrics credential printed %q, want how to scrape", printed)
	}
	key, cert, ca := identitytest.ReadMetricsCredential(t, out)
	parsed, err := x509.ParseCertificate(cert)
	if err != nil {
		t.Fatal(err)
	}
	if life := time.Until(parsed.NotAfter); parsed.Subject.CommonName != "prom-1" || life > 2*time.Hour+time.Minute || life < 2*time.Hour-time.Minute {
		t.Errorf("certificate for %q ends in %v, want prom-1 in 2h", parsed.Subject.CommonName, life)
	}
	if _, err := identity.MetricsClientTLSConfig(key, cert, ca); err != nil {
		t.Errorf("the written credential is no metrics client of the cluster CA: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(out, "key.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key.pem mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	if _, err := run(t, dir, "metrics", "credential", "--name", "Bad/Name", "--out", out); err == nil {
		t.Error("metrics credential took a bad name")
	}
}
