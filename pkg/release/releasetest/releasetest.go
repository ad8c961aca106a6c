// Package releasetest makes signed releases of made-up images for tests,
// and pushes them to a test registry (pkg/ociimage/ocitest) the way
// build/release and make cluster push a real one: through its archive.
// Like pkg/fixture, only tests should import it.
package releasetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"strings"
	"testing"

	"cairn.dev/cairn/pkg/ociimage"
	"cairn.dev/cairn/pkg/ociimage/ocitest"
	"cairn.dev/cairn/pkg/release"
	"cairn.dev/cairn/pkg/verity"
)

// SystemImage returns a system image of dataBlocks random blocks followed
// by their verity tree under salt, and its verity parameters.
func SystemImage(t testing.TB, dataBlocks int, salt []byte) ([]byte, verity.Params) {
	t.Helper()
	data := make([]byte, dataBlocks*verity.BlockSize)
	rand.Read(data)
	tree, err := verity.Compute(bytes.NewReader(data), salt)
	if err != nil {
		t.Fatal(err)
	}
	return append(data, tree.Hashes...), tree.Params(salt)
}

// Release is a release pushed to a test registry.
type Release struct {
	Artifact    *release.Artifact
	UKI, System []byte
	// Reference names it: host/repository:version.
	Reference string
}

// Push signs the release of m (its Verity, Version and Architecture set;
// Commit may be empty) whose images are uki and system with key, and
// pushes it to reg.
func Push(t testing.TB, reg *ocitest.Registry, key release.PrivateKey, m release.Metadata, uki, system []byte) *Release {
	t.Helper()
	if m.Commit == "" {
		m.Commit = strings.Repeat("ab", 20)
	}
	a, err := release.NewArtifact(m,
		ociimage.NewBlob(release.MediaTypeUKI, uki).Descriptor,
		ociimage.NewBlob(release.MediaTypeSystem, system).Descriptor, key)
	if err != nil {
		t.Fatal(err)
	}
	var archive bytes.Buffer
	if err := a.WriteArchive(&archive, reg.Repository, bytes.NewReader(uki), bytes.NewReader(system)); err != nil {
		t.Fatal(err)
	}
	repoTag := func(name string) (string, string, error) {
		repo, tag, _ := strings.Cut(name, ":")
		return repo, tag, nil
	}
	r := reg.Registry()
	if _, err := ociimage.PushArchive(context.Background(), r.Client, r.Base, &archive, repoTag); err != nil {
		t.Fatal(err)
	}
	return &Release{Artifact: a, UKI: uki, System: system, Reference: reg.Host() + "/" + reg.Repository + ":" + a.Tag()}
}
