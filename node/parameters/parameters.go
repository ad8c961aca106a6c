// Package parameters reads and validates the node parameters: what an
// operator hands a node before its first boot (bootstrap or register, and
// an optional network configuration), through qemu's fw_cfg or the ESP
// file cairn/parameters.pb. They are read once per boot (Load), and the
// outcome, parameters or the reason they cannot be used, is handed as a
// value to the network and to enrolment.
package parameters

import (
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"

	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/clusterconfig"
	"cairn.dev/cairn/node/identity"
	api "cairn.dev/cairn/proto/api"
)

// FWCfgName is the qemu fw_cfg entry that hands a node its node
// parameters: what the host names on qemu's command line.
const FWCfgName = "opt/dev.cairn/parameters.pb"

// FWCfgPath is where qemu's fw_cfg shows the node parameters (the entry
// FWCfgName) on a node.
const FWCfgPath = "/sys/firmware/qemu_fw_cfg/by_name/" + FWCfgName + "/raw"

// maxSize bounds what Read reads from one source: real
// parameters are a few KiB, and a file of garbage must not eat the node's
// memory.
const maxSize = 1 << 20

// Read reads the node parameters from fwcfgPath (qemu's fw_cfg
// entry) and, when that does not exist, from espPath (the ESP file
// cairn/parameters.pb). The fw_cfg copy wins: an operator who hands a node
// parameters through the hypervisor means them, and a broken fw_cfg copy is
// an error rather than a reason to fall back to the ESP. It returns nil and
// no error when neither file exists. Parameters that do not parse or do
// not pass Validate give an error naming the source.
func Read(fwcfgPath, espPath string) (*api.NodeParameters, error) {
	for _, src := range []struct{ name, path string }{
		{"fw_cfg", fwcfgPath},
		{"ESP", espPath},
	} {
		if src.path == "" {
			continue
		}
		b, err := readLimited(src.path, maxSize)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("when reading %s parameters %s: %w", src.name, src.path, err)
		}
		p, err := Parse(b)
		if err != nil {
			return nil, fmt.Errorf("%s parameters %s: %w", src.name, src.path, err)
		}
		return p, nil
	}
	return nil, nil
}

// readLimited reads the file at path, refusing one larger than limit.
func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return b, nil
}

// Parse decodes and validates marshalled node parameters.
func Parse(b []byte) (*api.NodeParameters, error) {
	var p api.NodeParameters
	if err := proto.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("not a cairn.api.NodeParameters message: %w", err)
	}
	if err := Validate(&p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Validate checks node parameters strictly, so that a mistake
// shows at boot with a message naming it, not later as a confusing failure:
// exactly one of bootstrap and register (or neither, with a network
// configuration alone: what a node keeps once it enrolled), keys of the
// right length, an
// initial cluster configuration that clusterconfig.Validate accepts, a CA
// certificate that parses, directory entries whose IDs match their keys, a
// network configuration that parses.
func Validate(p *api.NodeParameters) error {
	if p == nil {
		return errors.New("no parameters")
	}
	switch c := p.GetCluster().(type) {
	case *api.NodeParameters_ClusterBootstrap_:
		if err := validateBootstrap(c.ClusterBootstrap); err != nil {
			return fmt.Errorf("cluster_bootstrap: %w", err)
		}
	case *api.NodeParameters_ClusterRegister_:
		if err := validateRegister(c.ClusterRegister); err != nil {
			return fmt.Errorf("cluster_register: %w", err)
		}
	default:
		if p.GetNetworkConfig() == nil {
			return errors.New("neither cluster_bootstrap nor cluster_register is set")
		}
	}
	if err := validateNetwork(p.GetNetworkConfig()); err != nil {
		return fmt.Errorf("network_config: %w", err)
	}
	return nil
}

func validateBootstrap(b *api.NodeParameters_ClusterBootstrap) error {
	if b == nil {
		return errors.New("empty")
	}
	if n := len(b.GetOwnerPublicKey()); n != ed25519.PublicKeySize {
		return fmt.Errorf("owner_public_key is %d bytes, want %d", n, ed25519.PublicKeySize)
	}
	return clusterconfig.Validate(b.GetInitialClusterConfiguration())
}

func validateRegister(r *api.NodeParameters_ClusterRegister) error {
	if r == nil {
		return errors.New("empty")
	}
	if len(r.GetRegisterTicket()) == 0 {
		return errors.New("register_ticket is empty")
	}
	if err := ValidateCA(r.GetCaCertificate()); err != nil {
		return fmt.Errorf("ca_certificate: %w", err)
	}
	if err := ValidateDirectory(r.GetClusterDirectory()); err != nil {
		return fmt.Errorf("cluster_directory: %w", err)
	}
	if len(r.GetClusterDirectory().GetNodes()) == 0 {
		return errors.New("cluster_directory lists no node")
	}
	return nil
}

// ValidateCA checks that der is a CA certificate.
func ValidateCA(der []byte) error {
	if len(der) == 0 {
		return errors.New("empty")
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return fmt.Errorf("does not parse: %w", err)
	}
	if !c.IsCA {
		return errors.New("not a CA certificate")
	}
	return nil
}

// ValidateDirectory checks every entry of a cluster directory: a valid
// node ID derived from a 32-byte key, and addresses that are hosts without
// a port. An empty directory is valid here; callers that need entries say
// so.
func ValidateDirectory(d *api.ClusterDirectory) error {
	seen := make(map[string]bool)
	for i, n := range d.GetNodes() {
		if len(n.GetPublicKey()) != ed25519.PublicKeySize {
			return fmt.Errorf("node %d: public_key is %d bytes, want %d", i, len(n.GetPublicKey()), ed25519.PublicKeySize)
		}
		want := identity.NodeID(ed25519.PublicKey(n.GetPublicKey()))
		if n.GetId() != want {
			return fmt.Errorf("node %d: id %q does not match its public key (%q)", i, n.GetId(), want)
		}
		if seen[want] {
			return fmt.Errorf("node %d: %s listed twice", i, want)
		}
		seen[want] = true
		if len(n.GetAddresses()) == 0 {
			return fmt.Errorf("node %s: no address", want)
		}
		for _, a := range n.GetAddresses() {
			if err := validateHost(a.GetHost()); err != nil {
				return fmt.Errorf("node %s: %w", want, err)
			}
		}
	}
	return nil
}

// validateHost accepts an IP address or a DNS name, without a port.
func validateHost(h string) error {
	if h == "" {
		return errors.New("empty host")
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return nil
	}
	if len(h) > 253 || strings.ContainsAny(h, ":/[] \t\r\n") {
		return fmt.Errorf("host %q is neither an IP address nor a DNS name", h)
	}
	for _, r := range h {
		if r < 0x21 || r > 0x7e {
			return fmt.Errorf("host %q is neither an IP address nor a DNS name", h)
		}
	}
	return nil
}

func validateNetwork(n *api.NetworkConfig) error {
	s := n.GetStatic()
	if s == nil {
		return nil
	}
	if s.GetHardwareAddress() != "" {
		if _, err := net.ParseMAC(s.GetHardwareAddress()); err != nil {
			return fmt.Errorf("static hardware_address: %w", err)
		}
	}
	if len(s.GetAddresses()) == 0 {
		return errors.New("static configuration without addresses")
	}
	for _, a := range s.GetAddresses() {
		if _, err := netip.ParsePrefix(a); err != nil {
			return fmt.Errorf("static address: %w", err)
		}
	}
	if s.GetGateway() != "" {
		if _, err := netip.ParseAddr(s.GetGateway()); err != nil {
			return fmt.Errorf("static gateway: %w", err)
		}
	}
	for _, ns := range s.GetNameservers() {
		if _, err := netip.ParseAddr(ns); err != nil {
			return fmt.Errorf("static nameserver: %w", err)
		}
	}
	return nil
}

// Loaded is the outcome of reading the node parameters at boot: the
// parameters, none, or why the ones there cannot be used. Readers take it
// from an event value and must not change it.
type Loaded struct {
	// Parameters are the validated parameters; nil when there are none or
	// Err is set.
	Parameters *api.NodeParameters
	// Err says why the parameters present cannot be used: they do not
	// read, parse or validate. Nil otherwise.
	Err error
}

// Load reads the node parameters once, as Read does, and returns the
// outcome.
func Load(fwcfgPath, espPath string) *Loaded {
	p, err := Read(fwcfgPath, espPath)
	return &Loaded{Parameters: p, Err: err}
}

// NetworkConfig returns the operator's network configuration, or nil (DHCP)
// when there are no usable parameters: a node with bad parameters still
// brings its network up, so that it can be reached and its error seen.
func (l *Loaded) NetworkConfig() *api.NetworkConfig {
	if l == nil || l.Err != nil {
		return nil
	}
	return l.Parameters.GetNetworkConfig()
}
