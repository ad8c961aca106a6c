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
	"sync"
	"testing"

	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/update"
	"cairn.dev/cairn/pkg/ociimage/ocitest"
	"cairn.dev/cairn/pkg/release"
	"cairn.dev/cairn/pkg/release/releasetest"
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
	n := &Node{Storage: st, Slots: map[localstorage.Slot]string{}, Registry: ocitest.New(t, "cairn/release"), Key: key, trusted: true}
	for _, s := range []localstorage.Slot{localstorage.SlotA, localstorage.SlotB} {
		n.Slots[s] = filepath.Join(dir, "system-"+string(s))
		if err := os.WriteFile(n.Slots[s], make([]byte, SlotSize), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	v, err := release.ParseVersion(Running)
	if err != nil {
		t.Fatal(err)
	}
	n.Installer = update.New(update.Config{
		Running:      localstorage.SlotA,
		Version:      v,
		Architecture: "amd64",
		Partition:    func(s localstorage.Slot) (string, uint64, error) { return n.Slots[s], SlotSize, nil },
		Trust:        n.trust,
		Spool:        &st.Root.Data.Update,
		Slots:        &st.Root.ESP.Cairn.SystemSlots,
		UKIs:         &st.Root.ESP.EFI.Cairn,
		Client:       n.Registry.Client(),
	})
	return n
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
