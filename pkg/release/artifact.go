package release

import (
	"encoding/json"
	"fmt"
	"io"

	"cairn.dev/cairn/pkg/ociimage"
)

// An Artifact is a signed release as the build makes it: every manifest
// and small blob, and the descriptors of the two images, whose bytes the
// caller streams when it writes or pushes the artifact.
type Artifact struct {
	// Metadata is the release's config.
	Metadata Metadata
	// Manifest is the release manifest; Config its config blob.
	Manifest, Config ociimage.Blob
	// UKI and System describe the layers.
	UKI, System ociimage.Descriptor
	// SignatureManifest refers to Manifest as its subject; its config is
	// Empty and its one layer Signature.
	SignatureManifest, Empty, Signature ociimage.Blob
}

// NewArtifact makes the release of m whose images are uki and system
// (descriptors of MediaTypeUKI and MediaTypeSystem, as the caller hashed
// them), and signs it with key. It fills m's sizes from the descriptors
// and checks m.
func NewArtifact(m Metadata, uki, system ociimage.Descriptor, key PrivateKey) (*Artifact, error) {
	uki.MediaType, system.MediaType = MediaTypeUKI, MediaTypeSystem
	m.UKISize, m.SystemSize = uki.Size, system.Size
	if err := m.Check(); err != nil {
		return nil, fmt.Errorf("when making the release: %w", err)
	}
	config, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("when encoding the release metadata: %w", err)
	}
	a := &Artifact{Metadata: m, Config: ociimage.NewBlob(MediaTypeConfig, config), UKI: uki, System: system}
	if a.Manifest, err = newManifest(ArtifactType, a.Config.Descriptor, []ociimage.Descriptor{uki, system}, nil); err != nil {
		return nil, err
	}
	sig, err := json.Marshal(Sign(key, a.Manifest.Descriptor.Digest))
	if err != nil {
		return nil, fmt.Errorf("when encoding the release signature: %w", err)
	}
	a.Signature = ociimage.NewBlob(MediaTypeSignature, sig)
	a.Empty = ociimage.NewBlob(MediaTypeEmpty, []byte("{}"))
	subject := a.Manifest.Descriptor
	a.SignatureManifest, err = newManifest(SignatureArtifactType, a.Empty.Descriptor, []ociimage.Descriptor{a.Signature.Descriptor}, &subject)
	if err != nil {
		return nil, err
	}
	return a, nil
}

// Tag is the tag a release is pushed under: its version.
func (a *Artifact) Tag() string { return a.Metadata.Version }

// WriteArchive writes the artifact as an OCI image layout in a tar to w,
// reading the images from uki and system. Its index names the release
// repository:<version> and the signature repository:sha256-<hex>.sig,
// which is how PushArchive tags them.
func (a *Artifact) WriteArchive(w io.Writer, repository string, uki, system io.Reader) error {
	release, sig := a.Manifest.Descriptor, a.SignatureManifest.Descriptor
	release.Annotations = map[string]string{ociimage.AnnotationImageName: repository + ":" + a.Tag(), ociimage.AnnotationRefName: a.Tag()}
	sigTag := SignatureTag(release.Digest)
	sig.Annotations = map[string]string{ociimage.AnnotationImageName: repository + ":" + sigTag, ociimage.AnnotationRefName: sigTag}
	return ociimage.WriteLayout(w, []ociimage.Descriptor{release, sig}, []ociimage.ArchiveBlob{
		{Descriptor: a.Config.Descriptor, Content: a.Config.Reader()},
		{Descriptor: a.UKI, Content: uki},
		{Descriptor: a.System, Content: system},
		{Descriptor: a.Manifest.Descriptor, Content: a.Manifest.Reader()},
		{Descriptor: a.Empty.Descriptor, Content: a.Empty.Reader()},
		{Descriptor: a.Signature.Descriptor, Content: a.Signature.Reader()},
		{Descriptor: a.SignatureManifest.Descriptor, Content: a.SignatureManifest.Reader()},
	})
}
