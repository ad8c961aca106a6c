package cluster

import (
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"cairn.dev/cairn/node/identity"
	api "cairn.dev/cairn/proto/api"
)

func testDirectoryNode(t testing.TB, host string) *api.ClusterDirectory_Node {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &api.ClusterDirectory_Node{
		Id:        identity.NodeID(pub),
		PublicKey: pub,
		Addresses: []*api.ClusterDirectory_Node_Address{{Host: host}},
	}
}

func bootstrapParameters(t testing.TB) *api.NodeParameters {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &api.NodeParameters{Cluster: &api.NodeParameters_ClusterBootstrap_{
		ClusterBootstrap: &api.NodeParameters_ClusterBootstrap{OwnerPublicKey: pub},
	}}
}

func registerParameters(t testing.TB) *api.NodeParameters {
	t.Helper()
	return &api.NodeParameters{Cluster: &api.NodeParameters_ClusterRegister_{
		ClusterRegister: &api.NodeParameters_ClusterRegister{
			RegisterTicket: []byte("ticket"),
			CaCertificate:  testCA(t),
			ClusterDirectory: &api.ClusterDirectory{Nodes: []*api.ClusterDirectory_Node{
				testDirectoryNode(t, "10.0.2.15"),
			}},
		},
	}}
}

func TestValidateParameters(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(p *api.NodeParameters)
		base   func(testing.TB) *api.NodeParameters
		errHas string // "" means valid
	}{
		{name: "bootstrap", base: bootstrapParameters},
		{name: "register", base: registerParameters},
		{name: "neither", base: bootstrapParameters, edit: func(p *api.NodeParameters) { p.Cluster = nil },
			errHas: "neither cluster_bootstrap nor cluster_register"},
		{name: "short owner key", base: bootstrapParameters, edit: func(p *api.NodeParameters) {
			p.GetClusterBootstrap().OwnerPublicKey = []byte{1, 2, 3}
		}, errHas: "owner_public_key is 3 bytes"},
		{name: "unknown tpm mode", base: bootstrapParameters, edit: func(p *api.NodeParameters) {
			p.GetClusterBootstrap().InitialClusterConfiguration = &api.ClusterConfiguration{TpmMode: 42}
		}, errHas: "unknown tpm_mode 42"},
		{name: "unknown storage policy", base: bootstrapParameters, edit: func(p *api.NodeParameters) {
			p.GetClusterBootstrap().InitialClusterConfiguration = &api.ClusterConfiguration{StorageSecurityPolicy: 7}
		}, errHas: "unknown storage_security_policy 7"},
		{name: "no ticket", base: registerParameters, edit: func(p *api.NodeParameters) {
			p.GetClusterRegister().RegisterTicket = nil
		}, errHas: "register_ticket is empty"},
		{name: "garbage CA", base: registerParameters, edit: func(p *api.NodeParameters) {
			p.GetClusterRegister().CaCertificate = []byte("not a certificate")
		}, errHas: "ca_certificate: does not parse"},
		{name: "empty directory", base: registerParameters, edit: func(p *api.NodeParameters) {
			p.GetClusterRegister().ClusterDirectory = nil
		}, errHas: "lists no node"},
		{name: "ID does not match key", base: registerParameters, edit: func(p *api.NodeParameters) {
			p.GetClusterRegister().ClusterDirectory.Nodes[0].Id = "cairn-0000000000000000"
		}, errHas: "does not match its public key"},
		{name: "no address", base: registerParameters, edit: func(p *api.NodeParameters) {
			p.GetClusterRegister().ClusterDirectory.Nodes[0].Addresses = nil
		}, errHas: "no address"},
		{name: "host with port", base: registerParameters, edit: func(p *api.NodeParameters) {
			p.GetClusterRegister().ClusterDirectory.Nodes[0].Addresses[0].Host = "10.0.2.15:7833"
		}, errHas: "neither an IP address nor a DNS name"},
		{name: "duplicate node", base: registerParameters, edit: func(p *api.NodeParameters) {
			d := p.GetClusterRegister().ClusterDirectory
			d.Nodes = append(d.Nodes, d.Nodes[0])
		}, errHas: "listed twice"},
		{name: "static network", base: bootstrapParameters, edit: func(p *api.NodeParameters) {
			p.NetworkConfig = &api.NetworkConfig{Method: &api.NetworkConfig_Static{Static: &api.NetworkConfig_StaticConfig{
				HardwareAddress: "52:54:00:12:34:56",
				Addresses:       []string{"10.0.2.15/24"},
				Gateway:         "10.0.2.2",
				Nameservers:     []string{"10.0.2.3"},
			}}}
		}},
		{name: "bad static address", base: bootstrapParameters, edit: func(p *api.NodeParameters) {
			p.NetworkConfig = &api.NetworkConfig{Method: &api.NetworkConfig_Static{Static: &api.NetworkConfig_StaticConfig{
				Addresses: []string{"10.0.2.15"},
			}}}
		}, errHas: "network_config: static address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.base(t)
			if tc.edit != nil {
				tc.edit(p)
			}
			err := ValidateParameters(p)
			switch {
			case tc.errHas == "" && err != nil:
				t.Errorf("ValidateParameters = %v, want no error", err)
			case tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)):
				t.Errorf("ValidateParameters = %v, want an error containing %q", err, tc.errHas)
			}
		})
	}
}

func writeParameters(t *testing.T, path string, p *api.NodeParameters) {
	t.Helper()
	b, err := proto.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestReadParameters(t *testing.T) {
	dir := t.TempDir()
	fwcfg, esp := filepath.Join(dir, "fwcfg"), filepath.Join(dir, "esp")

	p, err := ReadParameters(fwcfg, esp)
	if p != nil || err != nil {
		t.Fatalf("ReadParameters(no files) = %v, %v, want nil, nil", p, err)
	}

	onESP := registerParameters(t)
	writeParameters(t, esp, onESP)
	p, err = ReadParameters(fwcfg, esp)
	if err != nil {
		t.Fatalf("ReadParameters(ESP only): %v", err)
	}
	if d := cmp.Diff(onESP, p, protocmp.Transform()); d != "" {
		t.Errorf("ReadParameters(ESP only) differs (-want +got):\n%s", d)
	}

	onFWCfg := bootstrapParameters(t)
	writeParameters(t, fwcfg, onFWCfg)
	p, err = ReadParameters(fwcfg, esp)
	if err != nil {
		t.Fatalf("ReadParameters(both): %v", err)
	}
	if d := cmp.Diff(onFWCfg, p, protocmp.Transform()); d != "" {
		t.Errorf("ReadParameters(both) is not the fw_cfg copy (-want +got):\n%s", d)
	}

	// Garbage in fw_cfg is an error naming fw_cfg, not a fallback to the
	// ESP.
	if err := os.WriteFile(fwcfg, []byte("\xff\xfegarbage, not a protobuf"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err = ReadParameters(fwcfg, esp)
	if err == nil || !strings.Contains(err.Error(), "fw_cfg parameters") {
		t.Errorf("ReadParameters(garbage fw_cfg) = %v, %v, want an error naming fw_cfg", p, err)
	}

	if err := os.Remove(fwcfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(esp, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p, err = ReadParameters(fwcfg, esp)
	if err == nil || !strings.Contains(err.Error(), "ESP parameters") {
		t.Errorf("ReadParameters(empty ESP file) = %v, %v, want an error naming the ESP", p, err)
	}
}

func FuzzParseParameters(f *testing.F) {
	for _, p := range []*api.NodeParameters{bootstrapParameters(f), registerParameters(f)} {
		b, err := proto.Marshal(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseParameters(b)
		if err != nil {
			return
		}
		// What was accepted once is accepted again after a round trip.
		again, err := proto.Marshal(p)
		if err != nil {
			t.Fatalf("marshalling accepted parameters: %v", err)
		}
		if _, err := ParseParameters(again); err != nil {
			t.Fatalf("ParseParameters(round trip) = %v, want no error", err)
		}
	})
}
