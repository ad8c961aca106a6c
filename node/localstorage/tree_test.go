package localstorage

import (
	"path/filepath"
	"testing"
)

// TestTreePaths checks where New places the files other packages rely on:
// their names are fixed (images, tools and earlier versions of the node
// read and write them).
func TestTreePaths(t *testing.T) {
	root := t.TempDir()
	st, err := New(Config{Root: root})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	for _, c := range []struct {
		name string
		got  string
		want string
	}{
		{"parameters", st.Root.ESP.Cairn.Parameters.FullPath(), "esp/cairn/parameters.pb"},
		{"sealed configuration", st.Root.ESP.Cairn.SealedConfiguration.FullPath(), "esp/cairn/sealed_configuration.pb"},
		{"cluster directory", st.Root.ESP.Cairn.ClusterDirectory.FullPath(), "esp/cairn/cluster_directory.pb"},
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
