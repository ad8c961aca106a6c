package ociimage

import "testing"

func TestParseReference(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Reference
	}{
		{"10.42.0.1:5000/cairn/release:0.0.0-20250101000000-0123456789ab",
			Reference{Host: "10.42.0.1:5000", Repository: "cairn/release", Tag: "0.0.0-20250101000000-0123456789ab"}},
		{"registry.example/cairn/release@sha256:" + sixtyFourHex,
			Reference{Host: "registry.example", Repository: "cairn/release", Digest: "sha256:" + sixtyFourHex}},
	} {
		got, err := ParseReference(tc.in)
		if err != nil || got != tc.want || got.String() != tc.in {
			t.Errorf("ParseReference(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "release:1", "host/Cairn:1", "host/cairn", "host/cairn:", "host/cairn@sha256:12", "host/cairn:a/b"} {
		if r, err := ParseReference(bad); err == nil {
			t.Errorf("ParseReference(%q) = %+v, want an error", bad, r)
		}
	}
}

const sixtyFourHex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
