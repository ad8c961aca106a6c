package cluster

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cairn.dev/cairn/node/parameters"
	"cairn.dev/cairn/node/parameters/parameterstest"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/pkg/logtree"
	api "cairn.dev/cairn/proto/api"
)

// TestUnusableInputsDestroyNothing boots nodes with bad inputs: each must
// say what is wrong on its console, keep retrying, and mount nothing.
func TestUnusableInputsDestroyNothing(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sealed   []byte // written as the sealed configuration, when set
		espParam []byte // written as the ESP parameters, when set
		params   *api.NodeParameters
		noTPM    bool
		line     string
	}{
		{
			name:   "corrupt sealed configuration beside bootstrap parameters",
			sealed: []byte("CAIRNSCF but then nothing that makes sense"),
			params: parameterstest.Bootstrap(t),
			line:   "Sealed configuration is unusable: ",
		},
		{
			name:     "garbage parameters",
			espParam: []byte("\x0a\xff\xff\xff\xff garbage"),
			line:     "Node parameters are invalid: ",
		},
		{
			name:     "empty parameters",
			espParam: []byte{},
			line:     "Node parameters are invalid: ",
		},
		{
			name:   "TPM required without a TPM",
			params: parameterstest.Bootstrap(t),
			noTPM:  true,
			line:   "Cannot bootstrap: the cluster's TPM mode is REQUIRED",
		},
		{
			name:   "Secure Boot required, booted without it",
			params: secureBootRequired(parameterstest.Bootstrap(t)),
			line:   "Cannot bootstrap: the cluster's configuration requires Secure Boot",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNode(t)
			if tc.noTPM {
				n.tpm = noTPM
			}
			esp := n.storage.st.Root.ESP.Cairn
			if tc.sealed != nil {
				if err := esp.SealedConfiguration.Write(tc.sealed); err != nil {
					t.Fatal(err)
				}
			}
			if tc.espParam != nil {
				if err := esp.Parameters.Write(tc.espParam); err != nil {
					t.Fatal(err)
				}
			}
			n.boot(t, tc.params, fixture.FreePort(t))
			t.Logf("%s", n.waitLog(t, tc.line, logtree.ERROR))
			// Give it time to retry, then check it still has not mounted
			// anything nor changed the ESP.
			time.Sleep(time.Second)
			n.cancel()
			if calls := n.storage.mountCalls(); len(calls) != 0 {
				t.Errorf("mounts = %v, want none", calls)
			}
			if tc.sealed != nil {
				b, err := esp.SealedConfiguration.Read()
				if err != nil || !bytes.Equal(b, tc.sealed) {
					t.Errorf("sealed configuration changed: %q, %v", b, err)
				}
			}
		})
	}
}

// TestWaitsForParameters boots a node with nothing to do; once
// parameters arrive, it bootstraps.
func TestWaitsForParameters(t *testing.T) {
	n := newTestNode(t)
	n.boot(t, nil, 0)
	n.waitLog(t, "No sealed configuration and no node parameters", logtree.INFO)
	n.params.Set(&parameters.Loaded{Parameters: parameterstest.Bootstrap(t)})
	m := n.waitMembership(t)
	if m.Bootstrap == nil {
		t.Errorf("Membership after parameters arrived = %+v, want a bootstrap", m)
	}
	if d := cmp.Diff([]string{"MountNew"}, n.storage.mountCalls()); d != "" {
		t.Errorf("mounts differ (-want +got):\n%s", d)
	}
	if _, err := os.Stat(n.storage.st.Root.Data.FullPath()); err != nil {
		t.Errorf("data partition not mounted: %v", err)
	}
}

// secureBootRequired makes bootstrap parameters p require Secure Boot of
// the cluster's nodes, and returns them.
func secureBootRequired(p *api.NodeParameters) *api.NodeParameters {
	p.GetClusterBootstrap().InitialClusterConfiguration = &api.ClusterConfiguration{SecureBootRequired: true}
	return p
}
