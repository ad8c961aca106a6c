package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"cairn.dev/cairn/node/identity"
)

// Files of a context's directory (see the package documentation).
const (
	ownerKeyFile  = "owner-key.pem"
	ownerCertFile = "owner-certificate.pem"
	caCertFile    = "ca-certificate.pem"
	settingsFile  = "config.json"
	// ownerKeyNewFile holds the new owner key while `owner rotate-key`
	// has not finished; ownerKeyOldFile the old one while it installs the
	// new (owner.go).
	ownerKeyNewFile = "owner-key.new.pem"
	ownerKeyOldFile = "owner-key.old.pem"
)

// settings is config.json: what cairnctl remembers besides keys and
// certificates.
type settings struct {
	// Endpoints are curators' HOST:PORT, tried in turn.
	Endpoints []string `json:"endpoints,omitempty"`
	// NodeEndpoints map node IDs to the HOST:PORT of their management
	// port, where the node's own address is not reachable from here.
	NodeEndpoints map[string]string `json:"node_endpoints,omitempty"`
}

// writeFileAtomic writes data to name in dir with mode perm, through a
// temporary file synced to disk, a rename and a sync of dir, so that a
// crash never leaves half a key, nor loses one written before.
func writeFileAtomic(dir, name string, data []byte, perm os.FileMode) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("when creating %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return fmt.Errorf("when writing %s: %w", name, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return fmt.Errorf("when writing %s: %w", name, err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("when writing %s: %w", name, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("when writing %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("when writing %s: %w", name, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("when writing %s: %w", name, err)
	}
	if err := fsyncDir(dir); err != nil {
		return fmt.Errorf("when writing %s: %w", name, err)
	}
	return nil
}

// fsyncDir syncs the directory dir, so that renames in it survive a
// crash.
func fsyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("when syncing %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("when syncing %s: %w", dir, err)
	}
	return nil
}

// readOwnerKey reads the owner key of dir. A missing key is os.ErrNotExist.
func readOwnerKey(dir string) (ed25519.PrivateKey, error) {
	return readKeyFile(dir, ownerKeyFile)
}

// readKeyFile reads the ed25519 key in the file name of dir. A missing
// file is os.ErrNotExist.
func readKeyFile(dir, name string) (ed25519.PrivateKey, error) {
	p := filepath.Join(dir, name)
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("when reading the owner key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%s holds no PEM PRIVATE KEY block", p)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("when parsing %s: %w", p, err)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s holds a %T, want an ed25519 key", p, k)
	}
	return key, nil
}

// ensureOwnerKey returns the owner key of dir, creating it when there is
// none; created says whether it did.
func ensureOwnerKey(dir string) (key ed25519.PrivateKey, created bool, err error) {
	key, err = readOwnerKey(dir)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return key, false, err
	}
	if key, err = newKeyFile(dir, ownerKeyFile); err != nil {
		return nil, false, err
	}
	return key, true, nil
}

// newKeyFile generates an owner key and writes it, PKCS #8 PEM, mode
// 0600, to the file name of dir.
func newKeyFile(dir, name string) (ed25519.PrivateKey, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("when generating the owner key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("when encoding the owner key: %w", err)
	}
	data := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err := writeFileAtomic(dir, name, data, 0o600); err != nil {
		return nil, err
	}
	return key, nil
}

// readCertificate reads one PEM certificate of dir and returns its DER.
func readCertificate(dir, name string) ([]byte, error) {
	p := filepath.Join(dir, name)
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("when reading %s: %w", name, err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s holds no PEM CERTIFICATE block", p)
	}
	return block.Bytes, nil
}

func writeCertificate(dir, name string, der []byte) error {
	return writeFileAtomic(dir, name, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// readSettings reads config.json of a context's directory; a missing file
// is empty settings.
func readSettings(dir string) (*settings, error) {
	s := &settings{}
	data, err := os.ReadFile(filepath.Join(dir, settingsFile))
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("when reading %s: %w", settingsFile, err)
	}
	if err := json.Unmarshal(data, s); err != nil {
		return nil, fmt.Errorf("when parsing %s: %w", filepath.Join(dir, settingsFile), err)
	}
	return s, nil
}

func writeSettings(dir string, s *settings) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("when encoding %s: %w", settingsFile, err)
	}
	return writeFileAtomic(dir, settingsFile, append(data, '\n'), 0o644)
}

// addEndpoints puts eps first in the settings' endpoints, keeping the
// others after them, without duplicates.
func (s *settings) addEndpoints(eps []string) {
	merged := slices.Clone(eps)
	for _, ep := range s.Endpoints {
		if !slices.Contains(merged, ep) {
			merged = append(merged, ep)
		}
	}
	s.Endpoints = slices.Compact(merged)
}

// checkHostPort accepts HOST:PORT with a non-empty host and a port number.
func checkHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not HOST:PORT: %w", s, err)
	}
	if host == "" {
		return fmt.Errorf("%q has no host", s)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("%q has no valid port", s)
	}
	return nil
}

// parseNodeEndpoint parses ID=HOST:PORT.
func parseNodeEndpoint(s string) (id, endpoint string, err error) {
	id, endpoint, ok := strings.Cut(s, "=")
	if !ok {
		return "", "", fmt.Errorf("--node-endpoint %q: want ID=HOST:PORT", s)
	}
	if !identity.ValidNodeID(id) {
		return "", "", fmt.Errorf("--node-endpoint %q: %q is not a node ID (%s and 16 hex digits)", s, id, identity.NodeIDPrefix)
	}
	if err := checkHostPort(endpoint); err != nil {
		return "", "", fmt.Errorf("--node-endpoint: %w", err)
	}
	return id, endpoint, nil
}

func parseNodeEndpoints(flags []string) (map[string]string, error) {
	m := map[string]string{}
	for _, f := range flags {
		id, ep, err := parseNodeEndpoint(f)
		if err != nil {
			return nil, err
		}
		m[id] = ep
	}
	return m, nil
}
