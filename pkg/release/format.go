package release

import (
	"encoding/json"
	"fmt"
	"regexp"

	"cairn.dev/cairn/pkg/ociimage"
	"cairn.dev/cairn/pkg/verity"
)

// The media and artifact types of a release, here and nowhere else.
const (
	// ArtifactType is the artifactType of a release manifest.
	ArtifactType = "application/vnd.cairn.release.v1"
	// MediaTypeConfig is the config blob of a release: Metadata as JSON.
	MediaTypeConfig = "application/vnd.cairn.release.config.v1+json"
	// MediaTypeUKI is the layer holding the unified kernel image.
	MediaTypeUKI = "application/vnd.cairn.uki.v1"
	// MediaTypeSystem is the layer holding the system image followed by
	// its dm-verity hash tree, as a system slot holds it.
	MediaTypeSystem = "application/vnd.cairn.system.v1"
	// SignatureArtifactType is the artifactType of a signature manifest.
	SignatureArtifactType = "application/vnd.cairn.release.signature.v1"
	// MediaTypeSignature is the layer of a signature manifest: Signature
	// as JSON.
	MediaTypeSignature = "application/vnd.cairn.release.signature.v1+json"
	// MediaTypeEmpty is OCI's empty config, "{}", of a signature
	// manifest.
	MediaTypeEmpty = "application/vnd.oci.empty.v1+json"
)

// maxConfigSize bounds the config and signature blobs a node reads into
// memory: either is a few hundred bytes.
const maxConfigSize = 64 << 10

// Metadata is a release's config blob: what a node needs to know about
// a release before it fetches the images.
type Metadata struct {
	// Version is the release's version, Version's text form.
	Version string `json:"version"`
	// Commit is the full hash of the commit the release was built from.
	Commit string `json:"commit"`
	// KubernetesVersion is the release of the Kubernetes payload the
	// system image carries, like "v1.37.2"; empty when it carries none.
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// Architecture is the machines' the release runs on, in GOARCH
	// spelling ("amd64").
	Architecture string `json:"architecture"`
	// Verity is the system image's cairn.verity= value on the UKI's
	// command line (verity.Params' text form), so a node can check the
	// slot it wrote without parsing the UKI.
	Verity string `json:"verity"`
	// UKISize and SystemSize are the two layers' lengths in bytes.
	UKISize    int64 `json:"ukiSize"`
	SystemSize int64 `json:"systemSize"`
}

var (
	commitPattern = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)
	archPattern   = regexp.MustCompile(`^[a-z0-9]{1,16}$`)
)

// Check reports the first field of m that is malformed, so that a
// release that decodes is one whose every field can be used.
func (m Metadata) Check() error {
	_, err := m.check()
	return err
}

// check is Check, returning the system image's verity parameters, which it
// parses to check them.
func (m Metadata) check() (verity.Params, error) {
	if _, err := ParseVersion(m.Version); err != nil {
		return verity.Params{}, err
	}
	if !commitPattern.MatchString(m.Commit) {
		return verity.Params{}, fmt.Errorf("commit %q is not a full lowercase hex commit hash", m.Commit)
	}
	if !archPattern.MatchString(m.Architecture) {
		return verity.Params{}, fmt.Errorf("architecture %q is not a GOARCH name", m.Architecture)
	}
	p, err := verity.ParseParams(m.Verity)
	if err != nil {
		return verity.Params{}, err
	}
	if m.UKISize <= 0 {
		return verity.Params{}, fmt.Errorf("UKI size %d is not positive", m.UKISize)
	}
	if m.SystemSize < 0 || uint64(m.SystemSize) != p.End() {
		return verity.Params{}, fmt.Errorf("system image of %d bytes, but its verity parameters say %d", m.SystemSize, p.End())
	}
	return p, nil
}

// DecodeMetadata reads a config blob and checks it.
func DecodeMetadata(data []byte) (Metadata, error) {
	m, _, err := decodeMetadata(data)
	return m, err
}

// decodeMetadata is DecodeMetadata, returning the system image's verity
// parameters too.
func decodeMetadata(data []byte) (Metadata, verity.Params, error) {
	var m Metadata
	if err := json.Unmarshal(data, &m); err != nil {
		return Metadata{}, verity.Params{}, fmt.Errorf("%w: when decoding the release metadata: %w", ErrMalformed, err)
	}
	p, err := m.check()
	if err != nil {
		return Metadata{}, verity.Params{}, fmt.Errorf("%w: release metadata: %w", ErrMalformed, err)
	}
	return m, p, nil
}

// Manifest is an OCI image manifest, the fields a release and its
// signature use.
type Manifest struct {
	SchemaVersion int                   `json:"schemaVersion"`
	MediaType     string                `json:"mediaType"`
	ArtifactType  string                `json:"artifactType"`
	Config        ociimage.Descriptor   `json:"config"`
	Layers        []ociimage.Descriptor `json:"layers"`
	Subject       *ociimage.Descriptor  `json:"subject,omitempty"`
	Annotations   map[string]string     `json:"annotations,omitempty"`
}

// decodeManifest reads a manifest of artifactType and checks its shape:
// a config of configType and one layer of each of layerTypes, in order.
func decodeManifest(data []byte, artifactType, configType string, layerTypes ...string) (Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return Manifest{}, fmt.Errorf("%w: when decoding the manifest: %w", ErrMalformed, err)
	}
	switch {
	case m.SchemaVersion != 2 || m.MediaType != ociimage.MediaTypeManifest:
		return Manifest{}, fmt.Errorf("%w: manifest of schema %d and media type %q, want 2 and %q", ErrMalformed, m.SchemaVersion, m.MediaType, ociimage.MediaTypeManifest)
	case m.ArtifactType != artifactType:
		return Manifest{}, fmt.Errorf("%w: manifest of artifact type %q, want %q", ErrMalformed, m.ArtifactType, artifactType)
	case len(m.Layers) != len(layerTypes):
		return Manifest{}, fmt.Errorf("%w: manifest has %d layers, want %d", ErrMalformed, len(m.Layers), len(layerTypes))
	}
	if err := checkDescriptor(m.Config, configType); err != nil {
		return Manifest{}, fmt.Errorf("%w: manifest config: %w", ErrMalformed, err)
	}
	for i, t := range layerTypes {
		if err := checkDescriptor(m.Layers[i], t); err != nil {
			return Manifest{}, fmt.Errorf("%w: manifest layer %d: %w", ErrMalformed, i, err)
		}
	}
	return m, nil
}

var digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

func checkDescriptor(d ociimage.Descriptor, mediaType string) error {
	switch {
	case d.MediaType != mediaType:
		return fmt.Errorf("media type %q, want %q", d.MediaType, mediaType)
	case !digestPattern.MatchString(d.Digest):
		return fmt.Errorf("digest %q is not sha256: and 64 lowercase hex digits", d.Digest)
	case d.Size < 0:
		return fmt.Errorf("size %d is negative", d.Size)
	}
	return nil
}

// newManifest encodes a manifest of artifactType.
func newManifest(artifactType string, config ociimage.Descriptor, layers []ociimage.Descriptor, subject *ociimage.Descriptor) (ociimage.Blob, error) {
	data, err := json.Marshal(Manifest{
		SchemaVersion: 2,
		MediaType:     ociimage.MediaTypeManifest,
		ArtifactType:  artifactType,
		Config:        config,
		Layers:        layers,
		Subject:       subject,
	})
	if err != nil {
		return ociimage.Blob{}, fmt.Errorf("when encoding a manifest: %w", err)
	}
	b := ociimage.NewBlob(ociimage.MediaTypeManifest, data)
	b.Descriptor.ArtifactType = artifactType
	return b, nil
}
