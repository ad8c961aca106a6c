// Package clusterconfig resolves and validates the cluster configuration
// (cairn.api.ClusterConfiguration): the cluster-wide policy a bootstrap
// node starts with and the curator keeps, such as the storage security
// policy, the TPM mode, the registry mirrors and the release keys.
//
//	bootstrap parameters  ─▶ Validate (node/parameters)
//	                      ─▶ Resolve (node/cluster) ─▶ curator (etcd)
//	cairnctl registries   ─▶ ParseMirror, ValidateRegistries
//	                      ─▶ UpdateRegistries ─▶ ValidateRegistries (curator)
//	cairnctl release-keys ─▶ UpdateReleaseKeys ─▶ ParseReleaseKeys (curator)
//	curator Watch         ─▶ DescribeRegistries (node/kubernetes, cairnctl)
//	                      ─▶ ReleaseKeys (the installer's release.Policy)
//
// It is a package of its own, apart from node/parameters, because the
// configuration outlives the parameters that carry it at bootstrap: the
// curator keeps it and operators change it.
package clusterconfig

import (
	"fmt"

	api "cairn.dev/cairn/proto/api"
)

// Validate accepts an unset configuration and unset fields (Resolve turns
// them into the strictest choice) but no value this build does not know:
// a policy it does not understand must not be read as a weaker one.
func Validate(c *api.ClusterConfiguration) error {
	if _, ok := api.StorageSecurityPolicy_name[int32(c.GetStorageSecurityPolicy())]; !ok {
		return fmt.Errorf("unknown storage_security_policy %d", c.GetStorageSecurityPolicy())
	}
	if _, ok := api.TPMMode_name[int32(c.GetTpmMode())]; !ok {
		return fmt.Errorf("unknown tpm_mode %d", c.GetTpmMode())
	}
	if err := ValidateRegistries(c.GetRegistries()); err != nil {
		return fmt.Errorf("registries: %w", err)
	}
	if err := ValidateReleaseKeys(c.GetReleaseKeys()); err != nil {
		return err
	}
	if c.GetBoundSealRequired() {
		if m := c.GetTpmMode(); m != api.TPMMode_TPM_MODE_REQUIRED && m != api.TPMMode_TPM_MODE_UNSPECIFIED {
			return fmt.Errorf("bound_seal_required needs the tpm_mode REQUIRED, not %v: a bound seal is a TPM's", m)
		}
	}
	return nil
}

// Resolve returns c with every unset field at its strictest value, as the
// curator stores it. No release key is already the strictest: a cluster
// without one installs no release. Secure Boot is required only when the
// owner asked for it: clusters made before it existed, and machines
// without it, keep working.
func Resolve(c *api.ClusterConfiguration) *api.ClusterConfiguration {
	r := &api.ClusterConfiguration{
		StorageSecurityPolicy: c.GetStorageSecurityPolicy(),
		TpmMode:               c.GetTpmMode(),
		Registries:            c.GetRegistries(),
		ReleaseKeys:           c.GetReleaseKeys(),
		SecureBootRequired:    c.GetSecureBootRequired() || c.GetBoundSealRequired(),
		BoundSealRequired:     c.GetBoundSealRequired(),
	}
	if r.StorageSecurityPolicy == api.StorageSecurityPolicy_STORAGE_SECURITY_POLICY_UNSPECIFIED {
		r.StorageSecurityPolicy = api.StorageSecurityPolicy_STORAGE_SECURITY_POLICY_ENCRYPTED
	}
	if r.TpmMode == api.TPMMode_TPM_MODE_UNSPECIFIED {
		r.TpmMode = api.TPMMode_TPM_MODE_REQUIRED
	}
	return r
}
