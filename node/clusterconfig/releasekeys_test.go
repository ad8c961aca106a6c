package clusterconfig

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"cairn.dev/cairn/pkg/release/releasetest"
	"cairn.dev/cairn/proto/api"
)

func TestValidateReleaseKeys(t *testing.T) {
	a, b := releasetest.PublicKey(1).String(), releasetest.PublicKey(2).String()
	// a with a padding bit of its last base64 digit set: the same key,
	// spelled otherwise.
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	last := strings.IndexByte(alphabet, a[len(a)-2])
	aAgain := a[:len(a)-2] + string(alphabet[last^1]) + "="
	many := make([]string, MaxReleaseKeys+1)
	for i := range many {
		many[i] = releasetest.PublicKey(byte(i)).String()
	}
	for _, tc := range []struct {
		name string
		keys []string
		want string // part of the error; empty: valid
	}{
		{"none", nil, ""},
		{"two", []string{a, b}, ""},
		{"surrounding space", []string{" " + a + "\n"}, ""},
		{"as many as allowed", many[:MaxReleaseKeys], ""},
		{"not a key", []string{a, "ssh-ed25519 AAAA"}, `release_keys[1]: release key "ssh-ed25519 AAAA" does not start with`},
		{"bad base64", []string{"cairn-release-ed25519:%%%"}, "release_keys[0]: when decoding"},
		{"short", []string{"cairn-release-ed25519:" + base64.StdEncoding.EncodeToString([]byte("short"))}, "has 5 bytes, want 32"},
		{"twice", []string{a, b, a}, "release_keys[2] " + `"` + a + `" is release_keys[0] again`},
		{"twice, spelled otherwise", []string{a, aAgain}, "is release_keys[0] again"},
		{"too many", many, "more than the 16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateReleaseKeys(tc.keys)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("ValidateReleaseKeys(%q) = %v, want no error", tc.keys, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("ValidateReleaseKeys(%q) = %v, want an error with %q", tc.keys, err, tc.want)
			}
		})
	}
}

// TestReleaseKeys: the installer's view of the configuration is the
// parsed keys in order, none when it trusts none; a bad entry is an
// error.
func TestReleaseKeys(t *testing.T) {
	a, b := releasetest.PublicKey(1), releasetest.PublicKey(2)
	got, err := ReleaseKeys(&api.ClusterConfiguration{ReleaseKeys: []string{b.String(), a.String()}})
	if err != nil || len(got) != 2 || !bytes.Equal(got[0], b) || !bytes.Equal(got[1], a) {
		t.Fatalf("ReleaseKeys = %v, %v, want [%s %s]", got, err, b.ID(), a.ID())
	}
	for _, c := range []*api.ClusterConfiguration{nil, {}} {
		if got, err := ReleaseKeys(c); len(got) != 0 || err != nil {
			t.Errorf("ReleaseKeys(%v) = %v, %v, want none", c, got, err)
		}
	}
	if _, err := ReleaseKeys(&api.ClusterConfiguration{ReleaseKeys: []string{"x"}}); err == nil || !strings.Contains(err.Error(), "release_keys[0]") {
		t.Errorf("ReleaseKeys with a bad entry = %v, want an error naming release_keys[0]", err)
	}
}

func TestDescribeReleaseKeys(t *testing.T) {
	k := releasetest.PublicKey(3)
	got := DescribeReleaseKeys([]string{k.String(), "x"})
	if len(got) != 2 || got[0] != k.ID()+"  "+k.String() || !strings.Contains(got[1], "not a release key") {
		t.Errorf("DescribeReleaseKeys = %q, want the key's ID and text, then the bad entry", got)
	}
	if got := DescribeReleaseKeys(nil); len(got) != 1 || !strings.Contains(got[0], "no release") {
		t.Errorf("DescribeReleaseKeys(nil) = %q, want a line saying none", got)
	}
}
