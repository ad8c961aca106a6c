//go:build cairntest

package testhooks

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// nodeTestTimeout bounds each package's test binary under
// cairn.test.run.
const nodeTestTimeout = 5 * time.Minute

// runNodeTests runs every Go test binary (*.test) in dir, one after the
// other, for cairn.test.run: the tests of packages that need what only a
// node has (the node's kernel, the data partition's XFS with project
// quotas). Each runs in a fresh directory of the data partition, which is
// also its TMPDIR, with CAIRN_TEST_IN_NODE=1 in its environment; every
// line it prints goes to the consoles, and the last line says how many
// binaries passed.
func (s *Storage) runNodeTests(ctx context.Context, dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		s.printf("node tests finished: none ran: when listing the test binaries of %s: %v", dir, err)
		return
	}
	var bins []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".test") && e.Type().IsRegular() {
			bins = append(bins, e.Name())
		}
	}
	slices.Sort(bins)
	var failed []string
	for _, b := range bins {
		if err := s.runNodeTest(ctx, filepath.Join(dir, b)); err != nil {
			s.printf("node test %s failed: %v", b, err)
			failed = append(failed, b)
		}
	}
	s.printf("node tests finished: %d of %d passed; failed: [%s]", len(bins)-len(failed), len(bins), strings.Join(failed, " "))
}

// runNodeTest runs the test binary bin, its output on the consoles.
func (s *Storage) runNodeTest(ctx context.Context, bin string) error {
	name := filepath.Base(bin)
	work := filepath.Join(s.dataRoot, "node-tests", strings.TrimSuffix(name, ".test"))
	if err := os.RemoveAll(work); err != nil {
		return fmt.Errorf("when clearing %s: %w", work, err)
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return fmt.Errorf("when creating %s: %w", work, err)
	}
	ctx, cancel := context.WithTimeout(ctx, nodeTestTimeout+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.v", "-test.count=1", "-test.timeout="+nodeTestTimeout.String())
	cmd.Dir = work
	// CAIRN_TEST_IN_NODE is fixture.InNodeEnv, spelled out: /init links
	// no test helper.
	cmd.Env = []string{"PATH=/bin:/sbin:/usr/bin:/usr/sbin", "TMPDIR=" + work, "HOME=" + work, "CAIRN_TEST_IN_NODE=1"}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("when connecting to the output of %s: %w", name, err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("when starting %s: %w", name, err)
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		s.printf("node test %s: %s", name, sc.Text())
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
