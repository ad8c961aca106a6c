package clusterconfig

import (
	"strings"
	"testing"

	api "cairn.dev/cairn/proto/api"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    *api.ClusterConfiguration
		want string // part of the error; empty: valid
	}{
		{"unset", nil, ""},
		{"known values", &api.ClusterConfiguration{StorageSecurityPolicy: api.StorageSecurityPolicy_STORAGE_SECURITY_POLICY_ENCRYPTED, TpmMode: api.TPMMode_TPM_MODE_REQUIRED}, ""},
		{"unknown storage policy", &api.ClusterConfiguration{StorageSecurityPolicy: 7}, "unknown storage_security_policy 7"},
		{"unknown tpm mode", &api.ClusterConfiguration{TpmMode: 42}, "unknown tpm_mode 42"},
		{"bad registries", &api.ClusterConfiguration{Registries: &api.Registries{PlainHttp: []string{""}}}, "registries: plain_http"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.c)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate = %v, want no error", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestResolveKeepsRegistries: resolving the bootstrap configuration fills
// in the policies and keeps the registry settings.
func TestResolveKeepsRegistries(t *testing.T) {
	r := &api.Registries{Mirrors: []*api.Registries_Mirror{{Registry: "docker.io", Endpoints: []string{"https://a.example"}}}}
	got := Resolve(&api.ClusterConfiguration{Registries: r})
	if got.GetRegistries() != r || got.GetTpmMode() != api.TPMMode_TPM_MODE_REQUIRED {
		t.Fatalf("Resolve = %v, want the registries kept and TPM required", got)
	}
}
