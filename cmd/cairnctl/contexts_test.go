package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"cairn.dev/cairn/proto/api"
)

// contexts runs `config contexts -o json` on the configuration directory
// root ("" for the default one).
func contexts(t *testing.T, root string) []contextView {
	t.Helper()
	var views []contextView
	if err := json.Unmarshal([]byte(mustRun(t, root, "-o", "json", "config", "contexts")), &views); err != nil {
		t.Fatalf("config contexts -o json: %v", err)
	}
	return views
}

// shown runs `config show -o json` with extra arguments.
func shown(t *testing.T, root string, args ...string) configView {
	t.Helper()
	var v configView
	if err := json.Unmarshal([]byte(mustRun(t, root, append([]string{"-o", "json", "config", "show"}, args...)...)), &v); err != nil {
		t.Fatalf("config show -o json: %v", err)
	}
	return v
}

// TestContexts adds contexts to a user's configuration directory, copied
// from a directory of the old layout (files at its top, as the cluster
// harness keeps them) and empty, replaces one, and switches between them.
func TestContexts(t *testing.T) {
	// The old layout: what takeownership wrote before contexts existed.
	harness, s := bootstrapped(t, testNode(t, api.NodeState_NODE_STATE_UP, nil, nil, testNow))
	mustRun(t, harness, "--endpoint", s.addr, "takeownership")
	if got := contexts(t, harness); len(got) != 1 || got[0].Name != defaultContext || !got[0].Current || got[0].Dir != harness {
		t.Errorf("contexts of a directory of the old layout = %+v, want the default one, current, in %s", got, harness)
	}
	if out := mustRun(t, harness, "node", "list"); !strings.Contains(out, "UP") {
		t.Errorf("node list in a directory of the old layout printed %q", out)
	}

	// The user's directory, by XDG_CONFIG_HOME, holds a context of its
	// own in the old layout too.
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	root := filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "cairnctl")
	mustRun(t, "", "config", "set-endpoints", "10.0.0.1:7833")

	out := mustRun(t, "", "config", "add-context", "local", "--from", harness, "--use")
	if !strings.Contains(out, "Using context local") {
		t.Errorf("add-context --use printed %q", out)
	}
	want := []contextView{
		{Name: defaultContext, Dir: root, Endpoints: []string{"10.0.0.1:7833"}},
		{Name: "local", Current: true, Dir: filepath.Join(root, contextsDir, "local"), OwnerCertificate: true,
			CAFingerprint: fingerprint(s.ca.DER()), Endpoints: []string{s.addr}},
	}
	if diff := cmp.Diff(want, contexts(t, ""), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("contexts after add-context local --from --use (-want +got):\n%s", diff)
	}
	// Plain commands reach the cluster of the context in use.
	if out := mustRun(t, "", "node", "list"); !strings.Contains(out, "UP") {
		t.Errorf("node list in context local printed %q", out)
	}
	if st, err := os.Stat(filepath.Join(root, contextsDir, "local", ownerKeyFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("owner key of the copied context: %v, %v; want mode 0600", st, err)
	}
	// The harness's directory is untouched and still works.
	if got := shown(t, harness); got.Context != defaultContext || got.Dir != harness || len(got.Endpoints) != 1 {
		t.Errorf("config show of the harness's directory after the copy = %+v", got)
	}

	// Replacing: the copy follows the source again.
	mustRun(t, harness, "config", "set-endpoints", s.addr, "127.0.0.1:1")
	mustRun(t, "", "config", "add-context", "local", "--from", harness)
	if got := shown(t, ""); got.Context != "local" || !cmp.Equal(got.Endpoints, []string{s.addr, "127.0.0.1:1"}) {
		t.Errorf("config show after replacing context local = %+v, want its new endpoints", got)
	}

	// An empty context, filled once in use.
	mustRun(t, "", "config", "add-context", "prod")
	if _, err := run(t, "", "config", "add-context", "prod"); err == nil || !strings.Contains(err.Error(), "already has a context") {
		t.Errorf("adding an existing context without --from = %v, want a refusal", err)
	}
	mustRun(t, "", "config", "use-context", "prod")
	mustRun(t, "", "params", "bootstrap", "--out", filepath.Join(t.TempDir(), "p.pb"))
	if got := shown(t, ""); got.Context != "prod" || got.OwnerPublicKey == "" || got.Dir != filepath.Join(root, contextsDir, "prod") {
		t.Errorf("config show in the new context prod after params bootstrap = %+v, want its own owner key", got)
	}
	if _, err := run(t, "", "node", "list"); err == nil || !strings.Contains(err.Error(), "takeownership") {
		t.Errorf("node list in an empty context = %v, want it to say to take ownership", err)
	}

	// --context picks one for a command; use-context default goes back to
	// the files at the top.
	if got := shown(t, "", "--context", "local"); got.Context != "local" {
		t.Errorf("config show --context local = %+v", got)
	}
	mustRun(t, "", "config", "use-context", defaultContext)
	if got := shown(t, ""); got.Context != defaultContext || got.Dir != root || !cmp.Equal(got.Endpoints, []string{"10.0.0.1:7833"}) {
		t.Errorf("config show after use-context default = %+v, want the files at the top of %s", got, root)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"config", "use-context", "staging"}, `no context "staging"`},
		{[]string{"--context", "staging", "node", "list"}, `no context "staging"`},
		{[]string{"--context", "../x", "node", "list"}, "not a context name"},
		{[]string{"config", "add-context", defaultContext, "--from", harness}, "choose another name"},
		{[]string{"config", "add-context", "empty", "--from", t.TempDir()}, "holds no owner key"},
	} {
		if _, err := run(t, "", tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("cairnctl %s = %v, want an error containing %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
	// A current context that vanished says so.
	mustRun(t, "", "config", "use-context", "prod")
	if err := os.RemoveAll(filepath.Join(root, contextsDir, "prod")); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "", "node", "list"); err == nil || !strings.Contains(err.Error(), `no context "prod"`) {
		t.Errorf("node list with a vanished current context = %v, want it named", err)
	}
}
