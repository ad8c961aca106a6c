package release

import (
	"encoding/json"
	"testing"

	"cairn.dev/cairn/pkg/ociimage"
)

func jsonOf(v any) ([]byte, error) { return json.Marshal(v) }

func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"1.2.3", "v0.0.0-20250101000000-0123456789ab.dirty", "1.2.3-alpha.1", "01.2.3", "1.2.3-"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVersion(s)
		if err != nil {
			return
		}
		back, err := ParseVersion(v.String())
		if err != nil || back != v {
			t.Fatalf("ParseVersion(%q) = %q, which reads back as %q, %v", s, v, back, err)
		}
		if v.Compare(back) != 0 {
			t.Fatalf("%q does not compare equal to itself", v)
		}
	})
}

// FuzzDecode feeds bytes to every decoder of what a registry serves: none
// may panic, and what decodes must pass its own checks.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"version":"1.2.3","commit":"abababababababababababababababababababab","architecture":"amd64","verity":"00,,1,4096","ukiSize":1,"systemSize":8192}`))
	f.Add([]byte(`{"keyID":"0123456789abcdef","signature":"AAAA"}`))
	f.Add([]byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":"application/vnd.cairn.release.v1","layers":[{},{}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if m, err := DecodeMetadata(data); err == nil {
			if err := m.Check(); err != nil {
				t.Fatalf("DecodeMetadata took %q, which fails Check: %v", data, err)
			}
		}
		DecodeSignature(data)
		decodeManifest(data, ArtifactType, MediaTypeConfig, MediaTypeUKI, MediaTypeSystem)
		VerifyManifest(ociimageBlob(data), [][]byte{data}, nil)
	})
}

func ociimageBlob(data []byte) ociimage.Blob {
	return ociimage.NewBlob(ociimage.MediaTypeManifest, data)
}
