package parameters

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"cairn.dev/cairn/node/parameters/parameterstest"
	api "cairn.dev/cairn/proto/api"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(p *api.NodeParameters)
		base   func(testing.TB) *api.NodeParameters
		errHas string // "" means valid
	}{
		{name: "bootstrap", base: parameterstest.Bootstrap},
		{name: "register", base: parameterstest.Register},
		{name: "neither", base: parameterstest.Bootstrap, edit: func(p *api.NodeParameters) { p.Cluster = nil },
			errHas: "neither cluster_bootstrap nor cluster_register"},
		{name: "network configuration alone", base: parameterstest.Bootstrap, edit: func(p *api.NodeParameters) {
			p.Cluster = nil
			p.NetworkConfig = &api.NetworkConfig{Method: &api.NetworkConfig_Static{Static: &api.NetworkConfig_StaticConfig{
				Addresses: []string{"10.0.2.15/24"},
			}}}
		}},
		{name: "short owner key", base: parameterstest.Bootstrap, edit: func(p *api.NodeParameters) {
			p.GetClusterBootstrap().OwnerPublicKey = []byte{1, 2, 3}
		}, errHas: "owner_public_key is 3 bytes"},
		{name: "unknown tpm mode", base: parameterstest.Bootstrap, edit: func(p *api.NodeParameters) {
			p.GetClusterBootstrap().InitialClusterConfiguration = &api.ClusterConfiguration{TpmMode: 42}
		}, errHas: "unknown tpm_mode 42"},
		{name: "unknown storage policy", base: parameterstest.Bootstrap, edit: func(p *api.NodeParameters) {
			p.GetClusterBootstrap().InitialClusterConfiguration = &api.ClusterConfiguration{StorageSecurityPolicy: 7}
		}, errHas: "unknown storage_security_policy 7"},
		{name: "no ticket", base: parameterstest.Register, edit: func(p *api.NodeParameters) {
			p.GetClusterRegister().RegisterTicket = nil
		}, errHas: "register_ticket is empty"},
		{name: "garbage CA", base: parameterstest.Register, edit: func(p *api.NodeParameters) {
			p.GetClusterRegister().CaCertificate = []byte("not a certificate")
		}, errHas: "ca_certificate: does not parse"},
		{name: "empty directory", base: parameterstest.Register, edit: func(p *api.NodeParameters) {
			p.GetClusterRegister().ClusterDirectory = nil
		}, errHas: "lists no node"},
		{name: "ID does not match key", base: parameterstest.Register, edit: func(p *api.NodeParameters) {
			p.GetClusterRegister().ClusterDirectory.Nodes[0].Id = "cairn-0000000000000000"
		}, errHas: "does not match its public key"},
		{name: "no address", base: parameterstest.Register, edit: func(p *api.NodeParameters) {
			p.GetClusterRegister().ClusterDirectory.Nodes[0].Addresses = nil
		}, errHas: "no address"},
		{name: "host with port", base: parameterstest.Register, edit: func(p *api.NodeParameters) {
			p.GetClusterRegister().ClusterDirectory.Nodes[0].Addresses[0].Host = "10.0.2.15:7833"
		}, errHas: "neither an IP address nor a DNS name"},
		{name: "duplicate node", base: parameterstest.Register, edit: func(p *api.NodeParameters) {
			d := p.GetClusterRegister().ClusterDirectory
			d.Nodes = append(d.Nodes, d.Nodes[0])
		}, errHas: "listed twice"},
		{name: "static network", base: parameterstest.Bootstrap, edit: func(p *api.NodeParameters) {
			p.NetworkConfig = &api.NetworkConfig{Method: &api.NetworkConfig_Static{Static: &api.NetworkConfig_StaticConfig{
				HardwareAddress: "52:54:00:12:34:56",
				Addresses:       []string{"10.0.2.15/24"},
				Gateway:         "10.0.2.2",
				Nameservers:     []string{"10.0.2.3"},
			}}}
		}},
		{name: "bad static address", base: parameterstest.Bootstrap, edit: func(p *api.NodeParameters) {
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
			err := Validate(p)
			switch {
			case tc.errHas == "" && err != nil:
				t.Errorf("Validate = %v, want no error", err)
			case tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)):
				t.Errorf("Validate = %v, want an error containing %q", err, tc.errHas)
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

func TestRead(t *testing.T) {
	dir := t.TempDir()
	fwcfg, esp := filepath.Join(dir, "fwcfg"), filepath.Join(dir, "esp")

	p, err := Read(fwcfg, esp)
	if p != nil || err != nil {
		t.Fatalf("Read(no files) = %v, %v, want nil, nil", p, err)
	}

	onESP := parameterstest.Register(t)
	writeParameters(t, esp, onESP)
	p, err = Read(fwcfg, esp)
	if err != nil {
		t.Fatalf("Read(ESP only): %v", err)
	}
	if d := cmp.Diff(onESP, p, protocmp.Transform()); d != "" {
		t.Errorf("Read(ESP only) differs (-want +got):\n%s", d)
	}

	onFWCfg := parameterstest.Bootstrap(t)
	writeParameters(t, fwcfg, onFWCfg)
	p, err = Read(fwcfg, esp)
	if err != nil {
		t.Fatalf("Read(both): %v", err)
	}
	if d := cmp.Diff(onFWCfg, p, protocmp.Transform()); d != "" {
		t.Errorf("Read(both) is not the fw_cfg copy (-want +got):\n%s", d)
	}

	// Garbage in fw_cfg is an error naming fw_cfg, not a fallback to the
	// ESP.
	if err := os.WriteFile(fwcfg, []byte("\xff\xfegarbage, not a protobuf"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err = Read(fwcfg, esp)
	if err == nil || !strings.Contains(err.Error(), "fw_cfg parameters") {
		t.Errorf("Read(garbage fw_cfg) = %v, %v, want an error naming fw_cfg", p, err)
	}

	if err := os.Remove(fwcfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(esp, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p, err = Read(fwcfg, esp)
	if err == nil || !strings.Contains(err.Error(), "ESP parameters") {
		t.Errorf("Read(empty ESP file) = %v, %v, want an error naming the ESP", p, err)
	}
}

func FuzzParse(f *testing.F) {
	for _, p := range []*api.NodeParameters{parameterstest.Bootstrap(f), parameterstest.Register(f)} {
		b, err := proto.Marshal(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b)
		if err != nil {
			return
		}
		// What was accepted once is accepted again after a round trip.
		again, err := proto.Marshal(p)
		if err != nil {
			t.Fatalf("marshalling accepted parameters: %v", err)
		}
		if _, err := Parse(again); err != nil {
			t.Fatalf("Parse(round trip) = %v, want no error", err)
		}
	})
}
