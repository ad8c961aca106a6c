package main

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"cairn.dev/cairn/pkg/release"
)

// tagPattern is a release tag: vX.Y.Z and nothing else.
var tagPattern = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)

// built is what git says about the tree a release is built from.
type built struct {
	version release.Version
	commit  string
}

// gitVersion is the version of the checkout at dir: X.Y.Z when HEAD is
// tagged vX.Y.Z (the highest, if several) and the tree is clean, else
// release.CommitVersion of HEAD: the commit's time and hash, ".dirty" when
// tracked or untracked files (not ignored ones) differ from it. A dirty
// tree is never the tagged release, even on its tag.
func gitVersion(dir string) (built, error) {
	out, err := git(dir, "show", "-s", "--format=%H %ct", "HEAD")
	if err != nil {
		return built{}, err
	}
	commit, ts, _ := strings.Cut(out, " ")
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return built{}, fmt.Errorf("when reading the commit time %q: %w", ts, err)
	}
	status, err := git(dir, "status", "--porcelain")
	if err != nil {
		return built{}, err
	}
	dirty := status != ""
	tags, err := git(dir, "tag", "--points-at", "HEAD")
	if err != nil {
		return built{}, err
	}
	var best *release.Version
	for _, t := range strings.Fields(tags) {
		if !tagPattern.MatchString(t) {
			continue
		}
		v, err := release.ParseVersion(t)
		if err != nil {
			return built{}, fmt.Errorf("tag %s: %w", t, err)
		}
		if best == nil || v.Compare(*best) > 0 {
			best = &v
		}
	}
	if best != nil && !dirty {
		return built{version: *best, commit: commit}, nil
	}
	v, err := release.CommitVersion(time.Unix(secs, 0), commit, dirty)
	if err != nil {
		return built{}, err
	}
	return built{version: v, commit: commit}, nil
}

// git runs git in dir and returns its output, trimmed.
func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("when running git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
