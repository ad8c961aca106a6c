package release

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"cairn.dev/cairn/pkg/ociimage"
)

// SignatureTag is the tag a release's signature manifest is pushed under,
// for registries without the referrers API: sha256-<hex>.sig.
func SignatureTag(manifestDigest string) string {
	return strings.Replace(manifestDigest, ":", "-", 1) + ".sig"
}

// Fetch resolves reference (a tag or a digest) in reg and runs every check
// of a release in order, reading nothing but manifests, the signature and
// the config: the manifest against its digest, the signature against
// p.Keys, the config against the manifest, the architecture and the
// version. The layers are left for OpenLayer, which checks them as they
// stream.
func Fetch(ctx context.Context, reg ociimage.Registry, reference string, p Policy) (*Release, error) {
	manifest, err := reg.Manifest(ctx, reference, ociimage.MediaTypeManifest)
	if err != nil {
		return nil, err
	}
	sig, err := fetchSignature(ctx, reg, manifest.Descriptor.Digest)
	if err != nil {
		return nil, err
	}
	var sigs [][]byte
	if sig != nil {
		sigs = append(sigs, sig)
	}
	r, err := VerifyManifest(manifest, sigs, p.Keys)
	if err != nil {
		return nil, err
	}
	config, err := readBlob(ctx, reg, r.Manifest.Config)
	if err != nil {
		return nil, fmt.Errorf("when fetching the release config: %w", err)
	}
	if err := r.VerifyConfig(config, p); err != nil {
		return nil, err
	}
	return r, nil
}

// fetchSignature reads the signature blob of the release manifest
// digest from its signature tag; nil when there is none.
func fetchSignature(ctx context.Context, reg ociimage.Registry, digest string) ([]byte, error) {
	m, err := reg.Manifest(ctx, SignatureTag(digest), ociimage.MediaTypeManifest)
	if errors.Is(err, ociimage.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("when fetching the release signature: %w", err)
	}
	// The signature manifest and its blob need no trust of their own:
	// the signature verifies or not. Their digests are still checked,
	// so that a broken registry reads as one.
	if err := checkBytes("signature manifest", m.Descriptor, m.Data); err != nil {
		return nil, err
	}
	sm, err := decodeManifest(m.Data, SignatureArtifactType, MediaTypeEmpty, MediaTypeSignature)
	if err != nil {
		return nil, fmt.Errorf("signature %s: %w", SignatureTag(digest), err)
	}
	if sm.Subject == nil || sm.Subject.Digest != digest {
		return nil, fmt.Errorf("%w: signature %s is not about release %s", ErrMalformed, SignatureTag(digest), digest)
	}
	sig, err := readBlob(ctx, reg, sm.Layers[0])
	if err != nil {
		return nil, fmt.Errorf("when fetching the release signature: %w", err)
	}
	return sig, nil
}

// readBlob reads a small blob whole, checking it against d.
func readBlob(ctx context.Context, reg ociimage.Registry, d ociimage.Descriptor) ([]byte, error) {
	if d.Size > maxConfigSize {
		return nil, fmt.Errorf("%w: blob %s of %d bytes is larger than %d", ErrMalformed, d.Digest, d.Size, maxConfigSize)
	}
	rc, err := OpenLayer(ctx, reg, d)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// OpenLayer opens the blob d of reg for reading through a DigestReader:
// the last Read fails unless every byte was d's.
func OpenLayer(ctx context.Context, reg ociimage.Registry, d ociimage.Descriptor) (io.ReadCloser, error) {
	body, _, err := reg.Blob(ctx, d.Digest)
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{NewDigestReader(body, d), body}, nil
}
