package clusterconfig

import (
	"strings"
	"testing"

	"cairn.dev/cairn/proto/api"
)

func TestValidateRegistries(t *testing.T) {
	mirror := func(reg string, urls ...string) *api.Registries_Mirror {
		return &api.Registries_Mirror{Registry: reg, Endpoints: urls}
	}
	for _, tc := range []struct {
		name string
		r    *api.Registries
		want string // part of the error; empty: valid
	}{
		{"none", nil, ""},
		{"plain mirror", &api.Registries{Mirrors: []*api.Registries_Mirror{mirror("docker.io", "http://10.42.0.1:5000")}, PlainHttp: []string{"10.42.0.1:5000"}}, ""},
		{"https mirrors", &api.Registries{Mirrors: []*api.Registries_Mirror{mirror("registry.k8s.io", "https://mirror.example:8443", "https://m2.example/")}}, ""},
		{"path", &api.Registries{Mirrors: []*api.Registries_Mirror{mirror("docker.io", "https://a.example/base")}}, "carries a path"},
		{"plain without permission", &api.Registries{Mirrors: []*api.Registries_Mirror{mirror("docker.io", "http://10.42.0.1:5000")}}, "not among the plain-HTTP hosts"},
		{"twice", &api.Registries{Mirrors: []*api.Registries_Mirror{mirror("docker.io", "https://a.example"), mirror("docker.io", "https://b.example")}}, "named twice"},
		{"no endpoint", &api.Registries{Mirrors: []*api.Registries_Mirror{mirror("docker.io")}}, "no endpoint"},
		{"scheme", &api.Registries{Mirrors: []*api.Registries_Mirror{mirror("docker.io", "ftp://a.example")}}, "not an http"},
		{"query", &api.Registries{Mirrors: []*api.Registries_Mirror{mirror("docker.io", "https://a.example/?x=1")}}, "query"},
		{"upper case", &api.Registries{Mirrors: []*api.Registries_Mirror{mirror("Docker.io", "https://a.example")}}, "lower case"},
		{"path as registry", &api.Registries{Mirrors: []*api.Registries_Mirror{mirror("docker.io/library", "https://a.example")}}, "not a host"},
		{"bad port", &api.Registries{PlainHttp: []string{"10.42.0.1:http"}}, "not a number"},
		{"empty plain", &api.Registries{PlainHttp: []string{""}}, "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateRegistries(tc.r)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("want valid, got %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("want an error with %q, got %v", tc.want, err)
			}
		})
	}
}

func TestParseMirror(t *testing.T) {
	m, err := ParseMirror("docker.io=http://10.42.0.1:5000,https://b.example")
	if err != nil {
		t.Fatal(err)
	}
	if m.GetRegistry() != "docker.io" || len(m.GetEndpoints()) != 2 || m.GetEndpoints()[1] != "https://b.example" {
		t.Fatalf("got %v", m)
	}
	for _, bad := range []string{"docker.io", "=http://a", "docker.io="} {
		if _, err := ParseMirror(bad); err == nil {
			t.Errorf("ParseMirror(%q) succeeded", bad)
		}
	}
}
