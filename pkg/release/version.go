package release

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A Version is a release's version: a semantic version without build
// metadata. Tagged releases are X.Y.Z; other commits are
// 0.0.0-<YYYYMMDDhhmmss>-<commit>[.dirty] (CommitVersion), whose
// prerelease part orders them by commit time.
type Version struct {
	Major, Minor, Patch uint64
	// Pre is the prerelease, its dot-separated identifiers; empty for a
	// release.
	Pre string
}

// ParseVersion reads X.Y.Z[-PRERELEASE], with an optional leading "v" as
// git tags spell it. Numbers have no leading zeros and prerelease
// identifiers are [0-9A-Za-z-]+, as semantic versioning says.
func ParseVersion(s string) (Version, error) {
	rest := strings.TrimPrefix(s, "v")
	core, pre, hasPre := strings.Cut(rest, "-")
	f := strings.Split(core, ".")
	if len(f) != 3 {
		return Version{}, fmt.Errorf("version %q: want X.Y.Z with an optional -PRERELEASE", s)
	}
	var n [3]uint64
	for i, part := range f {
		if !numeric(part) {
			return Version{}, fmt.Errorf("version %q: %q is not a number without leading zeros", s, part)
		}
		var err error
		if n[i], err = strconv.ParseUint(part, 10, 64); err != nil {
			return Version{}, fmt.Errorf("version %q: %w", s, err)
		}
	}
	if hasPre {
		for _, id := range strings.Split(pre, ".") {
			if id == "" || strings.Trim(id, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-") != "" {
				return Version{}, fmt.Errorf("version %q: prerelease identifier %q is not [0-9A-Za-z-]+", s, id)
			}
			if isDigits(id) && !numeric(id) {
				return Version{}, fmt.Errorf("version %q: numeric prerelease identifier %q has a leading zero", s, id)
			}
		}
	}
	return Version{Major: n[0], Minor: n[1], Patch: n[2], Pre: pre}, nil
}

// CommitVersion is the version of an untagged commit: 0.0.0-<commit time
// in UTC, YYYYMMDDhhmmss>-<first 12 hex digits of commit>, and ".dirty"
// after it when the tree had changes beyond the commit. Two commits of the
// same second order by their hashes, arbitrarily but the same everywhere;
// a dirty build sorts just after its commit's.
func CommitVersion(commitTime time.Time, commit string, dirty bool) (Version, error) {
	if len(commit) < 12 || !isHex(commit) {
		return Version{}, fmt.Errorf("commit %q is not a hex commit hash", commit)
	}
	pre := commitTime.UTC().Format("20060102150405") + "-" + commit[:12]
	if dirty {
		pre += ".dirty"
	}
	return Version{Pre: pre}, nil
}

// String returns v as ParseVersion reads it, without the "v".
func (v Version) String() string {
	s := fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch)
	if v.Pre != "" {
		s += "-" + v.Pre
	}
	return s
}

// Compare returns -1, 0 or +1 as v sorts before, with or after w, by
// semantic versioning's precedence: numbers numerically, a release after
// its prereleases, prerelease identifiers one by one (numeric ones
// numerically and before alphanumeric ones, those in ASCII order), and a
// longer list of equal identifiers after a shorter one.
func (v Version) Compare(w Version) int {
	if c := cmp.Compare(v.Major, w.Major); c != 0 {
		return c
	}
	if c := cmp.Compare(v.Minor, w.Minor); c != 0 {
		return c
	}
	if c := cmp.Compare(v.Patch, w.Patch); c != 0 {
		return c
	}
	switch {
	case v.Pre == w.Pre:
		return 0
	case v.Pre == "":
		return 1
	case w.Pre == "":
		return -1
	}
	a, b := strings.Split(v.Pre, "."), strings.Split(w.Pre, ".")
	for i := 0; i < len(a) && i < len(b); i++ {
		if c := compareIdentifier(a[i], b[i]); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a), len(b))
}

func compareIdentifier(a, b string) int {
	an, bn := isDigits(a), isDigits(b)
	switch {
	case an && bn:
		// Without leading zeros, the longer number is the larger; this
		// holds beyond uint64 too.
		if c := cmp.Compare(len(a), len(b)); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	case an:
		return -1
	case bn:
		return 1
	}
	return strings.Compare(a, b)
}

// numeric reports whether s is a number as semantic versioning writes
// one: digits, and no leading zero unless it is "0".
func numeric(s string) bool {
	return isDigits(s) && (s == "0" || s[0] != '0')
}

func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

func isHex(s string) bool {
	return strings.Trim(s, "0123456789abcdef") == ""
}
