package kubernetes

import (
	"os"
	"path/filepath"
	"testing"

	"cairn.dev/cairn/proto/api"
)

// TestWriteHosts: containerd's host directories follow the registry
// settings, stale ones are removed, and mirrors come before the upstream.
func TestWriteHosts(t *testing.T) {
	dir := t.TempDir()
	r := &api.Registries{
		Mirrors: []*api.Registries_Mirror{
			{Registry: "docker.io", Endpoints: []string{"http://10.42.0.1:5000", "https://mirror.example"}},
			{Registry: "10.42.0.1:5999", Endpoints: []string{"https://mirror.example"}},
		},
		PlainHttp: []string{"10.42.0.1:5000", "10.42.0.1:5999"},
	}
	if err := writeHosts(dir, r); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"docker.io": `server = "https://registry-1.docker.io"

[host."http://10.42.0.1:5000"]
  capabilities = ["pull", "resolve"]

[host."https://mirror.example"]
  capabilities = ["pull", "resolve"]
`,
		"10.42.0.1:5999": `server = "http://10.42.0.1:5999"

[host."https://mirror.example"]
  capabilities = ["pull", "resolve"]
`,
		"10.42.0.1:5000": `server = "http://10.42.0.1:5000"
`,
	}
	check := func(want map[string]string) {
		t.Helper()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != len(want) {
			t.Errorf("%s holds %d entries, want %d", dir, len(entries), len(want))
		}
		for host, content := range want {
			got, err := os.ReadFile(filepath.Join(dir, host, "hosts.toml"))
			if err != nil || string(got) != content {
				t.Errorf("%s/hosts.toml = %q, %v; want %q", host, got, err, content)
			}
		}
	}
	check(want)

	// A change removes what is no longer configured.
	r = &api.Registries{Mirrors: []*api.Registries_Mirror{{Registry: "registry.k8s.io", Endpoints: []string{"https://mirror.example"}}}}
	if err := writeHosts(dir, r); err != nil {
		t.Fatal(err)
	}
	check(map[string]string{"registry.k8s.io": `server = "https://registry.k8s.io"

[host."https://mirror.example"]
  capabilities = ["pull", "resolve"]
`})
	if err := writeHosts(dir, nil); err != nil {
		t.Fatal(err)
	}
	check(map[string]string{})
}
