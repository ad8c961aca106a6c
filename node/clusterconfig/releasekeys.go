package clusterconfig

import (
	"fmt"

	"cairn.dev/cairn/pkg/release"
	"cairn.dev/cairn/proto/api"
)

// MaxReleaseKeys bounds the release keys a cluster configuration trusts.
// A cluster needs one key, two while it moves to a new one; the bound
// keeps the configuration, which every node watches, small.
const MaxReleaseKeys = 16

// ReleaseKeys returns the release keys c trusts, parsed and in order, as
// release.Policy.Keys and the installer's update.Trust take them; none
// when c trusts none, which the installer refuses (update.ErrNoTrust). An
// entry that does not parse or repeats another is an error naming it, so
// that a node never reads a bad configuration as a weaker one.
func ReleaseKeys(c *api.ClusterConfiguration) ([]release.PublicKey, error) {
	return ParseReleaseKeys(c.GetReleaseKeys())
}

// ValidateReleaseKeys checks the release_keys of a cluster
// configuration: each entry parses, none repeats another (by key, not by
// spelling) and there are at most MaxReleaseKeys. None is valid: the
// cluster then installs no release.
func ValidateReleaseKeys(keys []string) error {
	_, err := ParseReleaseKeys(keys)
	return err
}

// ParseReleaseKeys parses the release_keys of a cluster configuration,
// in order, with ValidateReleaseKeys' checks; errors name the field and
// the bad entry.
func ParseReleaseKeys(keys []string) ([]release.PublicKey, error) {
	if len(keys) > MaxReleaseKeys {
		return nil, fmt.Errorf("release_keys has %d keys, more than the %d a cluster configuration holds", len(keys), MaxReleaseKeys)
	}
	parsed := make([]release.PublicKey, 0, len(keys))
	seen := map[string]int{}
	for i, s := range keys {
		k, err := release.ParsePublicKey(s)
		if err != nil {
			return nil, fmt.Errorf("release_keys[%d]: %w", i, err)
		}
		if j, ok := seen[string(k)]; ok {
			return nil, fmt.Errorf("release_keys[%d] %q is release_keys[%d] again (key %s)", i, s, j, k.ID())
		}
		seen[string(k)] = i
		parsed = append(parsed, k)
	}
	return parsed, nil
}

// DescribeReleaseKeys says which release keys keys trusts, a line each
// ("ID  cairn-release-ed25519:…"), for people: cairnctl prints it. An
// entry that does not parse is shown as such rather than dropped.
func DescribeReleaseKeys(keys []string) []string {
	var lines []string
	for _, s := range keys {
		k, err := release.ParsePublicKey(s)
		if err != nil {
			lines = append(lines, fmt.Sprintf("%q (not a release key: %v)", s, err))
			continue
		}
		lines = append(lines, k.ID()+"  "+k.String())
	}
	if len(lines) == 0 {
		lines = append(lines, "none; nodes install no release")
	}
	return lines
}
