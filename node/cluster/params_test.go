package cluster

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/node/parameters"
	"cairn.dev/cairn/node/parameters/parameterstest"
	"cairn.dev/cairn/pkg/logtree"
	api "cairn.dev/cairn/proto/api"
)

// sealFails is a TPM that opens but cannot seal: the node gets as far as
// sealing its configuration, and no further.
type sealFails struct{ *fakeTPM }

func (sealFails) Seal([]byte) ([]byte, error) { return nil, errors.New("simulated TPM failure") }

// TestParametersRemovedOnceSealed checks that the node parameters leave the
// ESP only once the sealed configuration replaces them, whichever side of
// that moment a power cut falls on.
func TestParametersRemovedOnceSealed(t *testing.T) {
	n := newTestNode(t)
	esp := &n.storage.st.Root.ESP.Cairn
	b, err := proto.Marshal(parameterstest.Bootstrap(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := esp.Parameters.Write(b); err != nil {
		t.Fatal(err)
	}
	exists := func(what string, want bool) {
		t.Helper()
		var got bool
		var err error
		switch what {
		case "parameters":
			got, err = esp.Parameters.Exists()
		case "sealed configuration":
			got, err = esp.SealedConfiguration.Exists()
		}
		if err != nil || got != want {
			t.Fatalf("%s on the ESP: %v (%v), want %v", what, got, err, want)
		}
	}

	// Cut before sealing (here: sealing fails): nothing is sealed and the
	// parameters stay for the next boot.
	tpm := newFakeTPM()
	n.tpm = func() (sealer, error) { return sealFails{tpm}, nil }
	n.boot(t, nil, 0)
	n.waitEntry(t, "the failed seal", logtree.INFO, func(msg string) bool {
		return strings.Contains(msg, "simulated TPM failure")
	})
	n.cancel()
	exists("sealed configuration", false)
	exists("parameters", true)

	// The next boot enrols again from them, seals, then removes them.
	n.tpm = tpm.open
	n.boot(t, nil, 0)
	id := n.waitMarker(t, marker.Bootstrapped).Get("node")
	n.waitLog(t, "Removed the node parameters", logtree.INFO)
	n.cancel()
	exists("sealed configuration", true)
	exists("parameters", false)

	// Cut between sealing and removing: the parameters are back on the
	// ESP. The node joins from its sealed configuration, never enrols
	// again, and removes them.
	if err := esp.Parameters.Write(b); err != nil {
		t.Fatal(err)
	}
	n.boot(t, nil, 0)
	n.waitMarker(t, marker.Joined, "node", id)
	n.waitLog(t, "Removed the node parameters", logtree.INFO)
	exists("parameters", false)
}

// TestParametersNetworkKept: parameters that carry a network
// configuration lose their enrolment (the owner's key or the register
// ticket) once the sealed configuration replaces them, and keep the
// network configuration, which the node reads on every boot; later joins
// leave it as it is.
func TestParametersNetworkKept(t *testing.T) {
	n := newTestNode(t)
	esp := &n.storage.st.Root.ESP.Cairn
	network := &api.NetworkConfig{Method: &api.NetworkConfig_Static{Static: &api.NetworkConfig_StaticConfig{
		Addresses: []string{"10.0.2.15/24"},
		Gateway:   "10.0.2.2",
	}}}
	p := parameterstest.Bootstrap(t)
	p.NetworkConfig = network
	b, err := proto.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := esp.Parameters.Write(b); err != nil {
		t.Fatal(err)
	}
	kept := func() {
		t.Helper()
		l := parameters.Load("", esp.Parameters.FullPath())
		if l.Err != nil {
			t.Fatalf("the parameters left on the ESP do not load: %v", l.Err)
		}
		want := &api.NodeParameters{NetworkConfig: network}
		if !proto.Equal(l.Parameters, want) {
			t.Fatalf("parameters left on the ESP: %v, want the network configuration alone: %v", l.Parameters, want)
		}
	}

	n.boot(t, nil, 0)
	id := n.waitMarker(t, marker.Bootstrapped).Get("node")
	n.waitLog(t, "Removed the enrolment from the node parameters", logtree.INFO)
	n.cancel()
	kept()

	// The next boot joins with them (network configuration alone) and
	// leaves them.
	n.boot(t, nil, 0)
	n.waitMarker(t, marker.Joined, "node", id)
	n.cancel()
	kept()
}
