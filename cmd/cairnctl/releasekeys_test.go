package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cairn.dev/cairn/pkg/release"
	"cairn.dev/cairn/pkg/release/releasetest"
)

// writeReleaseKey writes k's text form into a file, as make release
// writes out/release.pub, and returns the file's path.
func writeReleaseKey(t *testing.T, k release.PublicKey) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "release.pub")
	if err := os.WriteFile(path, []byte(k.String()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestParamsBootstrapReleaseKeys: --release-key takes a key's text or
// @FILE, and the bootstrap configuration trusts exactly those keys.
func TestParamsBootstrapReleaseKeys(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cfg")
	out := filepath.Join(t.TempDir(), "params.pb")
	a, b := releasetest.PublicKey(1), releasetest.PublicKey(2)
	stdout := mustRun(t, dir, "params", "bootstrap", "--out", out, "--release-key", a.String(), "--release-key", "@"+writeReleaseKey(t, b))
	for _, k := range []release.PublicKey{a, b} {
		if !strings.Contains(stdout, "release key "+k.ID()) {
			t.Errorf("params bootstrap printed %q, want it to name release key %s", stdout, k.ID())
		}
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got := readParams(t, data).GetClusterBootstrap().GetInitialClusterConfiguration().GetReleaseKeys()
	if diff := cmp.Diff([]string{a.String(), b.String()}, got); diff != "" {
		t.Errorf("release keys with --release-key (-want +got):\n%s", diff)
	}

	stdout = mustRun(t, dir, "params", "bootstrap", "--out", out)
	if !strings.Contains(stdout, "no release key") {
		t.Errorf("params bootstrap without --release-key printed %q, want it to say no release key", stdout)
	}
	if data, err = os.ReadFile(out); err != nil {
		t.Fatal(err)
	}
	if got := readParams(t, data).GetClusterBootstrap().GetInitialClusterConfiguration().GetReleaseKeys(); len(got) != 0 {
		t.Errorf("release keys without --release-key = %q, want none", got)
	}
}

// TestReleaseKeyErrors: bad keys are refused before anything is written
// or dialled, naming the key.
func TestReleaseKeyErrors(t *testing.T) {
	dir := t.TempDir()
	a := releasetest.PublicKey(1).String()
	bad := filepath.Join(t.TempDir(), "bad.pub")
	if err := os.WriteFile(bad, []byte("ssh-ed25519 AAAA\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"params", "bootstrap", "--out", "x", "--release-key", "cairn-release-ed25519:AAAA"}, `--release-key "cairn-release-ed25519:AAAA": release key "cairn-release-ed25519:AAAA" has 3 bytes`},
		{[]string{"params", "bootstrap", "--out", "x", "--release-key", "@" + filepath.Join(dir, "missing.pub")}, "when reading the release key"},
		{[]string{"params", "bootstrap", "--out", "x", "--release-key", "@" + bad}, "in " + bad + `: release key "ssh-ed25519 AAAA\n" does not start with`},
		{[]string{"params", "bootstrap", "--out", "x", "--release-key", a, "--release-key", a}, "--release-key: release_keys[1]"},
		{[]string{"cluster", "release-keys", "add"}, "requires at least 1 arg"},
		{[]string{"cluster", "release-keys", "remove", "nonsense"}, `release key "nonsense"`},
	} {
		_, err := run(t, dir, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("cairnctl %s = %v, want an error containing %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

// TestReleaseKeysAgainstCurator: the owner adds, lists and removes
// release keys of a real curator, and cluster info shows them.
func TestReleaseKeysAgainstCurator(t *testing.T) {
	dir := t.TempDir()
	c := ownedControlPlane(t, dir)
	mustRun(t, dir, "--endpoint", c.Addr, "takeownership")
	a, b := releasetest.PublicKey(1), releasetest.PublicKey(2)

	if out := runUntilOK(t, dir, "cluster", "release-keys", "list"); !strings.Contains(out, "none") {
		t.Errorf("release-keys list on a new cluster printed %q, want none", out)
	}
	out := mustRun(t, dir, "cluster", "release-keys", "add", a.String(), "@"+writeReleaseKey(t, b))
	if want := a.ID() + "  " + a.String() + "\n" + b.ID() + "  " + b.String() + "\n"; out != want {
		t.Errorf("release-keys add printed %q, want %q", out, want)
	}
	var keys []releaseKeyView
	if err := json.Unmarshal([]byte(mustRun(t, dir, "-o", "json", "cluster", "release-keys", "list")), &keys); err != nil {
		t.Fatalf("release-keys list -o json: %v", err)
	}
	if diff := cmp.Diff([]releaseKeyView{{ID: a.ID(), Key: a.String()}, {ID: b.ID(), Key: b.String()}}, keys); diff != "" {
		t.Errorf("release-keys list -o json (-want +got):\n%s", diff)
	}
	if out := mustRun(t, dir, "cluster", "info"); !strings.Contains(out, "Release keys:") || !strings.Contains(out, b.ID()) {
		t.Errorf("cluster info printed %q, want the release keys", out)
	}

	if _, err := run(t, dir, "cluster", "release-keys", "remove", releasetest.PublicKey(3).String()); err == nil || !strings.Contains(err.Error(), "not trusted") {
		t.Errorf("removing an untrusted key = %v, want an error saying it is not trusted", err)
	}
	mustRun(t, dir, "cluster", "release-keys", "remove", a.String())
	var info clusterView
	if err := json.Unmarshal([]byte(mustRun(t, dir, "-o", "json", "cluster", "info")), &info); err != nil {
		t.Fatalf("cluster info -o json: %v", err)
	}
	if !slices.Equal(info.ReleaseKeys, []releaseKeyView{{ID: b.ID(), Key: b.String()}}) {
		t.Errorf("cluster info after removing a = %+v, want only b", info.ReleaseKeys)
	}
}
