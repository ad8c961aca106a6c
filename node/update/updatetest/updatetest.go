// Package updatetest gives tests an installer (node/update) of a node
// whose storage is a directory and whose system slots are files, with a
// test registry to push signed releases to. Like pkg/fixture, only tests
// should import it.
package updatetest

import (
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/update"
	"cairn.dev/cairn/pkg/efivar"
	"cairn.dev/cairn/pkg/ociimage/ocitest"
	"cairn.dev/cairn/pkg/release"
	"cairn.dev/cairn/pkg/release/releasetest"
	"cairn.dev/cairn/proto/private"
)

const (
	// Running is the version the test node runs, from slot a.
	Running = "0.0.0-20260101000000-0123456789ab"
	// SlotSize is the size of each of its system slots.
	SlotSize = 1 << 20
)

// Node is a test node with its installer.
type Node struct {
	Installer *update.Installer
	Storage   *localstorage.Storage
	// Slots are the files of the system slots.
	Slots    map[localstorage.Slot]string
	Registry *ocitest.Registry
	// Key signs what Push pushes; the node trusts it unless Distrust.
	Key release.PrivateKey
	// Vars is the directory that stands for efivarfs, where the
	// installer's firmware keeps its boot entries.
	Vars string

	mu      sync.Mutex
	trusted bool
}

// New makes a Node running slot a.
func New(t testing.TB) *Node {
	t.Helper()
	dir := t.TempDir()
	st, err := localstorage.New(localstorage.Config{Root: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Root.ESP.Cairn.MkdirAll(0o700); err != nil {
		t.Fatal(err)
	}
	key, err := release.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{Storage: st, Slots: map[localstorage.Slot]string{}, Registry: ocitest.New(t, "cairn/release"), Key: key, trusted: true,
		Vars: filepath.Join(dir, "efivars")}
	if err := os.Mkdir(n.Vars, 0o700); err != nil {
		t.Fatal(err)
	}
	// The image build's UKI, already kept at slot a's place, and at the
	// removable media path.
	for _, f := range []interface{ FullPath() string }{st.Root.ESP.EFI.Cairn.For(localstorage.SlotA), &st.Root.ESP.EFI.Boot.BootX64} {
		if err := os.MkdirAll(filepath.Dir(f.FullPath()), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f.FullPath(), []byte("MZ the UKI of "+Running), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []localstorage.Slot{localstorage.SlotA, localstorage.SlotB} {
		n.Slots[s] = filepath.Join(dir, "system-"+string(s))
		if err := os.WriteFile(n.Slots[s], make([]byte, SlotSize), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n.Installer = n.Boot(t, localstorage.SlotA, Running)
	return n
}

// Boot returns the installer of the node as if it had booted slot,
// running version: what a reboot into the slot gives.
func (n *Node) Boot(t testing.TB, slot localstorage.Slot, version string) *update.Installer {
	t.Helper()
	v, err := release.ParseVersion(version)
	if err != nil {
		t.Fatal(err)
	}
	st := n.Storage
	return update.New(update.Config{
		Running:      slot,
		Version:      v,
		Architecture: "amd64",
		Partition:    func(s localstorage.Slot) (string, uint64, error) { return n.Slots[s], SlotSize, nil },
		Trust:        n.trust,
		Spool:        &st.Root.Data.Update,
		Slots:        &st.Root.ESP.Cairn.SystemSlots,
		UKIs:         &st.Root.ESP.EFI.Cairn,
		Fallback:     &st.Root.ESP.EFI.Boot.BootX64,
		Firmware: &update.Firmware{Vars: n.Vars, Path: func(file string) (efivar.DevicePath, error) {
			return efivar.DevicePath{efivar.FilePath{Path: `\` + strings.ReplaceAll(file, "/", `\`)}}, nil
		}},
		Client: n.Registry.Client(),
	})
}

func (n *Node) trust(context.Context) (update.Trust, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	t := update.Trust{PlainHTTP: []string{n.Registry.Host()}}
	if n.trusted {
		t.Keys = []release.PublicKey{n.Key.Public()}
	}
	return t, nil
}

// Trust says whether the cluster trusts Key.
func (n *Node) Trust(trusted bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.trusted = trusted
}

// Push pushes a release of version for amd64, signed with Key, whose
// system image has 16 data blocks.
func (n *Node) Push(t testing.TB, version string) *releasetest.Release {
	t.Helper()
	return n.PushFor(t, version, "amd64", 16)
}

// PushFor pushes a release of version for arch, signed with Key, whose
// system image has dataBlocks data blocks (a slot holds SlotSize bytes).
func (n *Node) PushFor(t testing.TB, version, arch string, dataBlocks int) *releasetest.Release {
	t.Helper()
	sys, params := releasetest.SystemImage(t, dataBlocks, []byte("salt"))
	m := release.Metadata{Version: version, Architecture: arch, Verity: params.String()}
	return releasetest.Push(t, n.Registry, n.Key, m, []byte("MZ the UKI of "+version), sys)
}

// Hashes returns the SHA-256 of each system slot's file, for tests that
// nothing changed.
func (n *Node) Hashes(t testing.TB) map[localstorage.Slot][32]byte {
	t.Helper()
	h := map[localstorage.Slot][32]byte{}
	for s, p := range n.Slots {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		h[s] = sha256.Sum256(b)
	}
	return h
}

// Record reads the installer's record of the node's system slots.
func (n *Node) Record(t testing.TB) *private.SystemSlots {
	t.Helper()
	s, err := update.ReadSlots(&n.Storage.Root.ESP.Cairn.SystemSlots)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
