package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"cairn.dev/cairn/node/curator/curatortest"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/test/launch/cluster"
)

// TestFreshDir checks that a new run empties only a directory that an
// earlier run made, and refuses any other that holds something.
func TestFreshDir(t *testing.T) {
	base := t.TempDir()

	made := filepath.Join(base, "new")
	if err := freshDir(made); err != nil {
		t.Fatalf("freshDir(missing dir) = %v", err)
	}
	if _, err := os.Stat(filepath.Join(made, dirMarker)); err != nil {
		t.Errorf("freshDir did not mark its directory: %v", err)
	}
	old := filepath.Join(made, "node0.img")
	if err := os.WriteFile(old, []byte("old disk"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := freshDir(made); err != nil {
		t.Fatalf("freshDir(earlier run's dir) = %v", err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the earlier run's disk survived a new run: %v", err)
	}

	foreign := filepath.Join(base, "mine")
	keep := filepath.Join(foreign, "precious")
	if err := os.MkdirAll(foreign, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := freshDir(foreign); err == nil {
		t.Errorf("freshDir emptied a directory it did not make")
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("a file of a foreign directory is gone: %v", err)
	}
}

func TestParseFlags(t *testing.T) {
	cfg, grace, err := parseFlags([]string{"-n", "2", "-dir", "d", "-port-base", "0"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Nodes != 2 || cfg.Dir != "d" || cfg.HostPortBase != 0 || cfg.Context != defaultContextName || grace != 2*time.Minute {
		t.Errorf("parseFlags = %+v, %v; want 2 nodes in d on free ports, context %q", cfg, grace, defaultContextName)
	}
	if cfg, _, _ := parseFlags([]string{"-context", ""}); cfg.Context != "" {
		t.Errorf("-context '' gives context %q, want none", cfg.Context)
	}
	if _, _, err := parseFlags([]string{"stray"}); err == nil {
		t.Error("parseFlags with a stray argument succeeded")
	}
	if cfg, _, _ := parseFlags(nil); cfg.Switch != nil {
		t.Errorf("without -net-chaos the switch profile is %v, want none (the kernel's bridge)", cfg.Switch)
	}
	cfg, _, err = parseFlags([]string{"-net-chaos", "delay=50ms,loss=2%,seed=42"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.Switch.String(), "delay=50ms,loss=2%,seed=42"; got != want {
		t.Errorf("-net-chaos delay=50ms,loss=2%%,seed=42 gives the profile %q, want %q", got, want)
	}
	if _, _, err := parseFlags([]string{"-net-chaos", "loss=200%"}); err == nil {
		t.Error("-net-chaos loss=200% was accepted")
	}
}

// buildCairnctl builds cairnctl into the test's directory.
func buildCairnctl(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "cairnctl")
	if out, err := exec.Command("go", "build", "-o", bin, "cairn.dev/cairn/cmd/cairnctl").CombinedOutput(); err != nil {
		t.Fatalf("building cairnctl: %v\n%s", err, out)
	}
	return bin
}

// cairnctl runs bin with args and returns its output.
func cairnctl(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("cairnctl %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return string(out)
}

// TestAnnounceWritesContext forms the owner's side of a cluster as Form
// does, against an in-process curator instead of qemu nodes, and checks
// the context launch-cluster adds to the user's cairnctl configuration (a
// temporary XDG_CONFIG_HOME): selected, a copy of the cluster's own
// credentials and endpoints, replaced by the next cluster, and the
// user's other contexts and the cluster's own directory untouched.
func TestAnnounceWritesContext(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the cluster's network namespace needs root")
	}
	bin := buildCairnctl(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	cairnctl(t, bin, "config", "add-context", "prod")
	ctx := fixture.Context(t)

	var current string
	for round := range 2 {
		cfg, _, err := parseFlags([]string{"-n", "2", "-dir", t.TempDir(), "-port-base", "0", "-cairnctl", bin, "-image", "unused.img"})
		if err != nil {
			t.Fatal(err)
		}
		c, err := cluster.New(cfg)
		if err != nil {
			t.Fatalf("cluster.New: %v", err)
		}
		defer c.Close()
		if _, err := c.BootstrapParams(ctx); err != nil {
			t.Fatal(err)
		}
		cp := curatortest.StartControlPlane(t, curatortest.WithOwnerKey(ownerKey(t, c.ConfigDir())))
		cairnctl(t, bin, "--config", c.ConfigDir(), "--endpoint", cp.Addr, "takeownership")

		var out bytes.Buffer
		announce(ctx, c, &out)
		if want := "  " + bin + " node list\n"; !strings.Contains(out.String(), want) {
			t.Errorf("round %d: announce printed\n%s\nwant the plain line %q", round, out.String(), want)
		}
		var views []struct {
			Name          string   `json:"name"`
			Current       bool     `json:"current"`
			CAFingerprint string   `json:"ca_fingerprint"`
			Endpoints     []string `json:"endpoints"`
		}
		if err := json.Unmarshal([]byte(cairnctl(t, bin, "config", "contexts", "-o", "json")), &views); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(cp.CA)
		wantEPs := []string{c.Node(0).CuratorAddr(), c.Node(1).CuratorAddr()}
		var names []string
		for _, v := range views {
			names = append(names, v.Name)
			if v.Name != defaultContextName {
				continue
			}
			if !v.Current || v.CAFingerprint != hex.EncodeToString(sum[:]) || !slices.Equal(v.Endpoints, wantEPs) {
				t.Errorf("round %d: context %s = %+v, want it current, with the cluster's CA and endpoints %v", round, defaultContextName, v, wantEPs)
			}
			current = v.CAFingerprint
		}
		if !slices.Equal(names, []string{defaultContextName, "prod"}) {
			t.Errorf("round %d: contexts %v, want %s and the user's prod", round, names, defaultContextName)
		}
		// The copied credentials work without naming any directory, and
		// the cluster's own directory still does.
		for _, args := range [][]string{
			{"--endpoint", cp.Addr, "cluster", "info"},
			{"--config", c.ConfigDir(), "--endpoint", cp.Addr, "cluster", "info"},
		} {
			if out := cairnctl(t, bin, args...); !strings.Contains(out, current[:16]) {
				t.Errorf("round %d: cairnctl %s printed %q, want the cluster's CA", round, strings.Join(args, " "), out)
			}
		}
	}
}

// ownerKey reads the owner key that cairnctl made in dir.
func ownerKey(t *testing.T, dir string) ed25519.PrivateKey {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "owner-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s holds no PEM block", dir)
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return key.(ed25519.PrivateKey)
}
