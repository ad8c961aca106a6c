package clusterconfig

import (
	"strings"
	"testing"

	"cairn.dev/cairn/pkg/release/releasetest"
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
		{"release key", &api.ClusterConfiguration{ReleaseKeys: []string{releasetest.PublicKey(1).String()}}, ""},
		{"bad release key", &api.ClusterConfiguration{ReleaseKeys: []string{releasetest.PublicKey(1).String(), "cairn-release-ed25519:AAAA"}}, `release_keys[1]: release key "cairn-release-ed25519:AAAA" has 3 bytes`},
		{"bound seal", &api.ClusterConfiguration{BoundSealRequired: true}, ""},
		{"bound seal without a TPM", &api.ClusterConfiguration{BoundSealRequired: true, TpmMode: api.TPMMode_TPM_MODE_BEST_EFFORT}, "bound_seal_required needs the tpm_mode REQUIRED"},
		{"release key twice", &api.ClusterConfiguration{ReleaseKeys: []string{releasetest.PublicKey(1).String(), releasetest.PublicKey(1).String()}}, "release_keys[1]"},
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

// TestResolveKeeps: resolving the bootstrap configuration fills in the
// policies and keeps the registry settings and the release keys.
func TestResolveKeeps(t *testing.T) {
	r := &api.Registries{Mirrors: []*api.Registries_Mirror{{Registry: "docker.io", Endpoints: []string{"https://a.example"}}}}
	keys := []string{releasetest.PublicKey(1).String()}
	got := Resolve(&api.ClusterConfiguration{Registries: r, ReleaseKeys: keys})
	if got.GetRegistries() != r || len(got.GetReleaseKeys()) != 1 || got.GetReleaseKeys()[0] != keys[0] || got.GetTpmMode() != api.TPMMode_TPM_MODE_REQUIRED {
		t.Fatalf("Resolve = %v, want the registries and release keys kept and TPM required", got)
	}
	if got := Resolve(nil); len(got.GetReleaseKeys()) != 0 || got.GetSecureBootRequired() {
		t.Fatalf("Resolve(nil) = %v, want no release key, and Secure Boot not required", got)
	}
	if got := Resolve(&api.ClusterConfiguration{SecureBootRequired: true}); !got.GetSecureBootRequired() {
		t.Fatalf("Resolve = %v, want Secure Boot required kept", got)
	}
	if got := Resolve(&api.ClusterConfiguration{BoundSealRequired: true}); !got.GetSecureBootRequired() || !got.GetBoundSealRequired() {
		t.Fatalf("Resolve = %v, want a bound seal and Secure Boot required", got)
	}
}
