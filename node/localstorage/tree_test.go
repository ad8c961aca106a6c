package localstorage

import (
	"path/filepath"
	"testing"

	"cairn.dev/cairn/node/esp"
)

// TestTreePaths checks where New places the files other packages rely on:
// their names are fixed (images, tools and earlier versions of the node
// read and write them). The ESP's agree with node/esp, which the struct
// tags of the tree cannot name.
func TestTreePaths(t *testing.T) {
	root := t.TempDir()
	st, err := New(Config{Root: root})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	// onESP is where a file of node/esp lies below root.
	onESP := func(name string) string { return filepath.Join("esp", esp.Dir, name) }
	for _, c := range []struct {
		name string
		got  string
		want string
	}{
		{"ESP cairn directory", st.Root.ESP.Cairn.FullPath(), filepath.Join("esp", esp.Dir)},
		{"parameters", st.Root.ESP.Cairn.Parameters.FullPath(), onESP(esp.Parameters)},
		{"sealed configuration", st.Root.ESP.Cairn.SealedConfiguration.FullPath(), onESP(esp.SealedConfiguration)},
		{"cluster directory", st.Root.ESP.Cairn.ClusterDirectory.FullPath(), onESP(esp.ClusterDirectory)},
		{"registration keys", st.Root.ESP.Cairn.RegistrationKeys.FullPath(), onESP(esp.RegistrationKeys)},
		{"refusal", st.Root.ESP.Cairn.Refusal.FullPath(), onESP(esp.Refusal)},
		{"system slots", st.Root.ESP.Cairn.SystemSlots.FullPath(), onESP(esp.SystemSlots)},
		{"slot a's UKI", st.Root.ESP.EFI.Cairn.For(SlotA).FullPath(), filepath.Join("esp", esp.UKIDir, esp.UKIName(string(SlotA)))},
		{"slot b's UKI", st.Root.ESP.EFI.Cairn.For(SlotB).FullPath(), filepath.Join("esp", esp.UKIDir, esp.UKIName(string(SlotB)))},
		{"node directory", st.Root.Data.Node.FullPath(), "data/node"},
		{"roles", st.Root.Data.Node.Roles.FullPath(), "data/node/roles.pb"},
		{"identity", st.Root.Data.Node.Identity.FullPath(), "data/node/identity.pem"},
		{"owner trust", st.Root.Data.Node.OwnerTrust.FullPath(), "data/node/owner_trust.pb"},
		{"etcd", st.Root.Data.Etcd.FullPath(), "data/etcd"},
	} {
		if want := filepath.Join(root, c.want); c.got != want {
			t.Errorf("%s: FullPath() = %q, want %q", c.name, c.got, want)
		}
	}
}
