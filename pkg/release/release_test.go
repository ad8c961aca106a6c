package release

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"cairn.dev/cairn/pkg/ociimage"
	"cairn.dev/cairn/pkg/ociimage/ocitest"
	"cairn.dev/cairn/pkg/verity"
)

const testRepo = "cairn/release"

// testRelease is a signed release of made-up images, pushed to a test
// registry through its archive, as build/release and make cluster push
// one.
type testRelease struct {
	key      PrivateKey
	artifact *Artifact
	uki, sys []byte
	reg      *ocitest.Registry
	registry ociimage.Registry
}

func newTestRelease(t *testing.T, version, arch string) *testRelease {
	t.Helper()
	key, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	sys := make([]byte, 3*verity.BlockSize)
	rand.Read(sys)
	tree, err := verity.Compute(bytes.NewReader(sys[:2*verity.BlockSize]), []byte("salt"))
	if err != nil {
		t.Fatal(err)
	}
	params := tree.Params([]byte("salt"))
	sys = sys[:params.End()]
	uki := []byte("MZ a unified kernel image")
	m := Metadata{
		Version:      version,
		Commit:       strings.Repeat("ab", 20),
		Architecture: arch,
		Verity:       params.String(),
	}
	a, err := NewArtifact(m, describe(MediaTypeUKI, uki), describe(MediaTypeSystem, sys), key)
	if err != nil {
		t.Fatal(err)
	}
	tr := &testRelease{key: key, artifact: a, uki: uki, sys: sys, reg: ocitest.New(t, testRepo)}
	tr.registry = tr.reg.Registry()
	var archive bytes.Buffer
	if err := a.WriteArchive(&archive, testRepo, bytes.NewReader(uki), bytes.NewReader(sys)); err != nil {
		t.Fatal(err)
	}
	repoTag := func(name string) (string, string, error) {
		repo, tag, _ := strings.Cut(name, ":")
		return repo, tag, nil
	}
	pushed, err := ociimage.PushArchive(context.Background(), tr.registry.Client, tr.registry.Base, &archive, repoTag)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{testRepo + ":" + version, testRepo + ":" + SignatureTag(a.Manifest.Descriptor.Digest)}
	if strings.Join(pushed, " ") != strings.Join(want, " ") {
		t.Fatalf("PushArchive pushed %q, want %q", pushed, want)
	}
	return tr
}

func describe(mediaType string, data []byte) ociimage.Descriptor {
	return ociimage.NewBlob(mediaType, data).Descriptor
}

const (
	older = "0.0.0-20250101000000-0123456789ab"
	newer = "0.0.0-20250601000000-0123456789ab"
)

// readLayer reads a layer of r whole through OpenLayer.
func readLayer(reg ociimage.Registry, d ociimage.Descriptor) ([]byte, error) {
	rc, err := OpenLayer(context.Background(), reg, d)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func TestFetch(t *testing.T) {
	ctx := context.Background()
	tr := newTestRelease(t, newer, "amd64")
	policy := Policy{Keys: []PublicKey{tr.key.Public()}, Architecture: "amd64", Running: mustVersion(t, older)}

	for _, ref := range []string{newer, tr.artifact.Manifest.Descriptor.Digest} {
		r, err := Fetch(ctx, tr.registry, ref, policy)
		if err != nil {
			t.Fatalf("Fetch(%s): %v", ref, err)
		}
		if r.Metadata != tr.artifact.Metadata || r.Version.String() != newer {
			t.Errorf("Fetch(%s) metadata = %+v, want %+v", ref, r.Metadata, tr.artifact.Metadata)
		}
		for _, l := range []struct {
			d    ociimage.Descriptor
			want []byte
		}{{r.UKI(), tr.uki}, {r.System(), tr.sys}} {
			got, err := readLayer(tr.registry, l.d)
			if err != nil || !bytes.Equal(got, l.want) {
				t.Errorf("layer %s: %d bytes, %v; want its %d bytes", l.d.MediaType, len(got), err, len(l.want))
			}
		}
	}
}

// TestFetchRefuses plays each way a release must be refused, and checks
// that the refusal is the one for that check.
func TestFetchRefuses(t *testing.T) {
	ctx := context.Background()
	other, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		version  string
		arch     string
		policy   func(p *Policy)
		tamper   func(tr *testRelease)
		byDigest bool
		want     error
		message  string
	}{
		{name: "unknown key", policy: func(p *Policy) { p.Keys = []PublicKey{other.Public()} },
			want: ErrUnknownKey, message: "signed by key %KEY%"},
		{name: "no trusted key", policy: func(p *Policy) { p.Keys = nil }, want: ErrUnknownKey},
		{name: "config changed", tamper: func(tr *testRelease) {
			tr.reg.Change(tr.artifact.Config.Descriptor.Digest, func(b []byte) []byte {
				return bytes.Replace(b, []byte(`"amd64"`), []byte(`"arm64"`), 1)
			})
		}, want: ErrDigestMismatch, message: "hashes to"},
		{name: "manifest changed", tamper: func(tr *testRelease) {
			tr.reg.ChangeManifest(newer, func(b []byte) []byte {
				return bytes.Replace(b, []byte(`"schemaVersion":2`), []byte(`"schemaVersion":2 `), 1)
			})
		}, want: ErrUnsigned},
		{name: "manifest changed, fetched by digest", byDigest: true, tamper: func(tr *testRelease) {
			tr.reg.ChangeManifest(tr.artifact.Manifest.Descriptor.Digest, func(b []byte) []byte {
				return bytes.Replace(b, []byte(`"schemaVersion":2`), []byte(`"schemaVersion":2 `), 1)
			})
		}, want: ErrDigestMismatch, message: "release manifest"},
		{name: "signature removed", tamper: func(tr *testRelease) {
			tr.reg.DeleteManifest(SignatureTag(tr.artifact.Manifest.Descriptor.Digest))
		}, want: ErrUnsigned, message: "has no signature"},
		{name: "signature forged", tamper: func(tr *testRelease) {
			tr.reg.Change(tr.artifact.Signature.Descriptor.Digest, func(b []byte) []byte {
				return bytes.Replace(b, []byte(`"signature":"`), []byte(`"signature":"AAAA`), 1)
			})
		}, want: ErrDigestMismatch},
		{name: "older", version: older, policy: func(p *Policy) { p.Running = mustVersion(t, newer) },
			want: ErrDowngrade, message: "release " + older + " is older than the running " + newer + "; use --allow-downgrade"},
		{name: "other architecture", arch: "arm64", want: ErrArchitecture, message: "is for arm64, this node is amd64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			version, arch := cmpOr(tc.version, newer), cmpOr(tc.arch, "amd64")
			tr := newTestRelease(t, version, arch)
			policy := Policy{Keys: []PublicKey{tr.key.Public()}, Architecture: "amd64", Running: mustVersion(t, older)}
			if tc.policy != nil {
				tc.policy(&policy)
			}
			if tc.tamper != nil {
				tc.tamper(tr)
			}
			ref := version
			if tc.byDigest {
				ref = tr.artifact.Manifest.Descriptor.Digest
			}
			_, err := Fetch(ctx, tr.registry, ref, policy)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Fetch = %v, want %v", err, tc.want)
			}
			if msg := strings.ReplaceAll(tc.message, "%KEY%", tr.key.Public().ID()); !strings.Contains(err.Error(), msg) {
				t.Errorf("Fetch = %q, want it to say %q", err, msg)
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func TestFetchAllowDowngrade(t *testing.T) {
	tr := newTestRelease(t, older, "amd64")
	policy := Policy{Keys: []PublicKey{tr.key.Public()}, Architecture: "amd64", Running: mustVersion(t, newer), AllowDowngrade: true}
	if _, err := Fetch(context.Background(), tr.registry, older, policy); err != nil {
		t.Fatalf("Fetch with AllowDowngrade = %v, want the release", err)
	}
}

// TestLayerRefused changes and truncates the layers in the registry: the
// release itself still verifies, and reading the layer fails at its end.
func TestLayerRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		change  func([]byte) []byte
		message string
	}{
		{"changed", func(b []byte) []byte { b[len(b)/2] ^= 1; return b }, "hashes to"},
		{"truncated", func(b []byte) []byte { return b[:len(b)-1] }, "ended after"},
		{"longer", func(b []byte) []byte { return append(b, 0) }, "longer than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTestRelease(t, newer, "amd64")
			policy := Policy{Keys: []PublicKey{tr.key.Public()}, Architecture: "amd64", Running: mustVersion(t, older)}
			r, err := Fetch(context.Background(), tr.registry, newer, policy)
			if err != nil {
				t.Fatal(err)
			}
			tr.reg.Change(r.System().Digest, tc.change)
			_, err = readLayer(tr.registry, r.System())
			if !errors.Is(err, ErrDigestMismatch) || !strings.Contains(err.Error(), tc.message) {
				t.Errorf("reading the %s layer = %v, want %v saying %q", tc.name, err, ErrDigestMismatch, tc.message)
			}
		})
	}
}

func TestVerifyManifestBadSignature(t *testing.T) {
	tr := newTestRelease(t, newer, "amd64")
	sig := Sign(tr.key, tr.artifact.Manifest.Descriptor.Digest)
	sig.Signature[0] ^= 1
	data, err := jsonOf(sig)
	if err != nil {
		t.Fatal(err)
	}
	_, err = VerifyManifest(tr.artifact.Manifest, [][]byte{data}, []PublicKey{tr.key.Public()})
	if !errors.Is(err, ErrBadSignature) {
		t.Errorf("VerifyManifest with a flipped bit = %v, want %v", err, ErrBadSignature)
	}
}

func TestKeys(t *testing.T) {
	key, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ParsePublicKey(key.Public().String())
	if err != nil || !bytes.Equal(pub, key.Public()) {
		t.Errorf("ParsePublicKey(%q) = %x, %v; want the key", key.Public(), pub, err)
	}
	pem, err := MarshalPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParsePrivateKey(pem)
	if err != nil || !bytes.Equal(back, key) {
		t.Errorf("ParsePrivateKey(MarshalPrivateKey(k)) = %v; want k", err)
	}
	for _, bad := range []string{"", "ed25519:AAAA", publicKeyPrefix + "!!", publicKeyPrefix + "AAAA"} {
		if _, err := ParsePublicKey(bad); err == nil {
			t.Errorf("ParsePublicKey(%q) took it", bad)
		}
	}
}

func TestCommitVersion(t *testing.T) {
	at := time.Date(2025, 3, 4, 5, 6, 7, 0, time.FixedZone("CET", 3600))
	for _, dirty := range []bool{false, true} {
		v, err := CommitVersion(at, "0123456789abcdef0123456789abcdef01234567", dirty)
		want := "0.0.0-20250304040607-0123456789ab"
		if dirty {
			want += ".dirty"
		}
		if err != nil || v.String() != want {
			t.Errorf("CommitVersion(dirty %v) = %q, %v; want %q", dirty, v, err, want)
		}
	}
}

func TestVersionCompare(t *testing.T) {
	// Each sorts before the next.
	order := []string{
		"0.0.0-20240101000000-ffffffffffff",
		"0.0.0-20250101000000-0123456789ab",
		"0.0.0-20250101000000-0123456789ab.dirty",
		"0.0.0-20250101000001-0000000000aa",
		"0.0.0",
		"0.1.0-1",
		"0.1.0-2",
		"0.1.0-10",
		"0.1.0-alpha",
		"0.1.0-alpha.1",
		"0.1.0",
		"1.0.0",
		"1.2.3",
		"1.10.0",
		"10.0.0",
	}
	for i, a := range order {
		for j, b := range order {
			va, vb := mustVersion(t, a), mustVersion(t, b)
			if got, want := va.Compare(vb), cmpInt(i, j); got != want {
				t.Errorf("Compare(%q, %q) = %d, want %d", a, b, got, want)
			}
		}
	}
	if v := mustVersion(t, "v1.2.3"); v.String() != "1.2.3" {
		t.Errorf("ParseVersion(v1.2.3) = %q, want 1.2.3", v)
	}
	for _, bad := range []string{"", "1", "1.2", "1.2.3.4", "01.2.3", "1.2.3-", "1.2.3-a..b", "1.2.3-01", "1.2.3+meta", "1.2.3-ä", "-1.2.3", "99999999999999999999.0.0"} {
		if _, err := ParseVersion(bad); err == nil {
			t.Errorf("ParseVersion(%q) took it", bad)
		}
	}
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func mustVersion(t *testing.T, s string) Version {
	t.Helper()
	v, err := ParseVersion(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
