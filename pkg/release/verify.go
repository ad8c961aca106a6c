package release

import (
	"errors"
	"fmt"

	"cairn.dev/cairn/pkg/ociimage"
	"cairn.dev/cairn/pkg/verity"
)

// The refusals of verification, one per check, for errors.Is. Each error
// returned wraps one of them and says what failed and why.
var (
	// ErrMalformed: a manifest, config or signature is not what a release
	// has.
	ErrMalformed = errors.New("not a valid Cairn release")
	// ErrDigestMismatch: content differs from the digest or size that
	// names it.
	ErrDigestMismatch = errors.New("content does not match its digest")
	// ErrUnsigned: no signature was found for the release.
	ErrUnsigned = errors.New("release is not signed")
	// ErrUnknownKey: no signature is by a trusted key.
	ErrUnknownKey = errors.New("release is not signed by a trusted key")
	// ErrBadSignature: a trusted key's signature does not verify.
	ErrBadSignature = errors.New("release signature is invalid")
	// ErrArchitecture: the release is for other machines.
	ErrArchitecture = errors.New("release is for another architecture")
	// ErrDowngrade: the release is older than the running version.
	ErrDowngrade = errors.New("refusing to downgrade")
)

// A Policy is what a node accepts.
type Policy struct {
	// Keys are the release keys the cluster configuration trusts.
	Keys []PublicKey
	// Architecture is the node's, in GOARCH spelling.
	Architecture string
	// Running is the version the node runs.
	Running Version
	// AllowDowngrade accepts a release older than Running (the
	// operator's --allow-downgrade).
	AllowDowngrade bool
}

// A Release is a release manifest that passed VerifyManifest, and, once
// VerifyConfig passed too, its metadata.
type Release struct {
	// Descriptor is the release manifest's.
	Descriptor ociimage.Descriptor
	Manifest   Manifest
	// Metadata, Version and Verity are set by VerifyConfig. Verity is
	// the system image's verity parameters (Metadata.Verity), checked:
	// its tree ends where the system image does.
	Metadata Metadata
	Version  Version
	Verity   verity.Params
}

// UKI and System are the descriptors of the release's two layers.
func (r *Release) UKI() ociimage.Descriptor    { return r.Manifest.Layers[0] }
func (r *Release) System() ociimage.Descriptor { return r.Manifest.Layers[1] }

// VerifyManifest runs the first two checks of a release, before anything
// else of it is read: that manifest's bytes match its descriptor's digest
// and size, and that one of signatures (signature blobs) is by a key of
// keys over that digest. Then it decodes the manifest.
func VerifyManifest(manifest ociimage.Blob, signatures [][]byte, keys []PublicKey) (*Release, error) {
	d := manifest.Descriptor
	if err := checkBytes("release manifest", d, manifest.Data); err != nil {
		return nil, err
	}
	var sigs []Signature
	var malformed error
	for _, data := range signatures {
		s, err := DecodeSignature(data)
		if err != nil {
			malformed = err
			continue
		}
		sigs = append(sigs, s)
	}
	if len(sigs) == 0 && malformed != nil {
		return nil, malformed
	}
	if err := verifySignatures(d.Digest, sigs, keys); err != nil {
		return nil, err
	}
	m, err := decodeManifest(manifest.Data, ArtifactType, MediaTypeConfig, MediaTypeUKI, MediaTypeSystem)
	if err != nil {
		return nil, err
	}
	return &Release{Descriptor: d, Manifest: m}, nil
}

// VerifyConfig runs the remaining checks on the config blob of a release
// that passed VerifyManifest: that config matches the manifest's
// descriptor, that it is valid metadata whose sizes are the layers', that
// the release is for p.Architecture, and that it is not older than
// p.Running unless p.AllowDowngrade. It sets r.Metadata and r.Version.
func (r *Release) VerifyConfig(config []byte, p Policy) error {
	if err := checkBytes("release config", r.Manifest.Config, config); err != nil {
		return err
	}
	m, params, err := decodeMetadata(config)
	if err != nil {
		return err
	}
	if m.UKISize != r.UKI().Size || m.SystemSize != r.System().Size {
		return fmt.Errorf("%w: metadata says UKI %d and system %d bytes, the manifest's layers %d and %d",
			ErrMalformed, m.UKISize, m.SystemSize, r.UKI().Size, r.System().Size)
	}
	if m.Architecture != p.Architecture {
		return fmt.Errorf("%w: release %s is for %s, this node is %s", ErrArchitecture, m.Version, m.Architecture, p.Architecture)
	}
	v, err := ParseVersion(m.Version)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if v.Compare(p.Running) < 0 && !p.AllowDowngrade {
		return fmt.Errorf("%w: release %s is older than the running %s; use --allow-downgrade", ErrDowngrade, v, p.Running)
	}
	r.Metadata, r.Version, r.Verity = m, v, params
	return nil
}

// checkBytes checks that data has d's size and digest.
func checkBytes(what string, d ociimage.Descriptor, data []byte) error {
	if int64(len(data)) != d.Size {
		return fmt.Errorf("%w: %s %s has %d bytes, want %d", ErrDigestMismatch, what, d.Digest, len(data), d.Size)
	}
	if got := ociimage.Digest(data); got != d.Digest {
		return fmt.Errorf("%w: %s %s hashes to %s", ErrDigestMismatch, what, d.Digest, got)
	}
	return nil
}
