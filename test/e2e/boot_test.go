//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"cairn.dev/cairn/test/launch"
)

// TestBootAndPowerOff boots the image the way a machine does (OVMF, the
// unified kernel image on the ESP), checks that /init brought the node up
// with the virtio drivers loaded and its system partition verified and
// mounted, then presses the power button and checks that the node shuts
// down cleanly and powers off by itself.
func TestBootAndPowerOff(t *testing.T) {
	s := newSuite(t, 1, 10*time.Minute)
	n := s.launch(launch.Config{Name: "boot", Image: artifact(t, "cairn.img")}, launch.WithTPM())

	started := s.waitFor(n, launch.Substring("cairn: init started"))
	if release := kernelRelease(t); release != "" && !strings.Contains(started.Text, "(kernel "+release+")") {
		t.Errorf("init started line %q does not name the kernel %s", started.Text, release)
	}
	s.waitFor(n, launch.Substring("cairn: supervisor started"))
	s.bootTimings(n, launch.CairnBoot)
	// The verified system partition, which the UKI's command line names.
	system := s.waitFor(n, launch.Substring("cairn: system partition a mounted at /system"))
	s.stepSinceInit(n, system, "/init → /system verified and mounted")
	t.Logf("%s", system.Text)

	// Coldplug ran before the system partition was mounted: every module
	// line is there, one for each virtio device the node has (the PCI
	// transport, disk, network card and random number generator).
	coldplug := s.waitFor(n, regexp.MustCompile(`cairn: coldplug loaded [1-9][0-9]* modules`))
	t.Logf("%s", coldplug.Text)
	for _, module := range []string{"virtio_pci", "virtio_blk", "virtio_net", "virtio_rng"} {
		// Module names may be spelt with - or _.
		re := regexp.MustCompile(`loaded module ` + strings.ReplaceAll(module, "_", "[-_]") + `\b`)
		if _, ok := n.Console().Find(0, re); !ok {
			t.Errorf("no line matching %q on the console: the node has a device for %s", re, module)
		}
	}

	press := time.Now()
	if err := n.Powerdown(s.ctx); err != nil {
		t.Fatalf("system_powerdown: %v", err)
	}
	if err := n.Wait(s.ctxWithin(30 * time.Second)); err != nil {
		t.Fatalf("the node did not power off cleanly by itself within 30 s: %v", err)
	}
	s.step("power button → qemu exit", time.Since(press))
	for _, want := range []string{
		"cairn: stopping for poweroff",
		"cairn: supervisor stopped",
		"cairn: filesystems synced",
		"cairn: unmounted filesystems",
		"cairn: powering off",
	} {
		if _, ok := n.Console().Find(0, launch.Substring(want)); !ok {
			t.Errorf("no %q line on the console during power-off", want)
		}
	}
	assertNoPanic(t, n)
}

// TestRootFailureReboots boots the kernel directly with the test flag that
// makes the root runnable fail: the node must say so and reboot, not panic.
// -no-reboot turns the reboot into qemu exiting.
func TestRootFailureReboots(t *testing.T) {
	s := newSuite(t, 1, 10*time.Minute)
	n := s.launchTestImage("rootfail", "cairn.test.root-fail", launch.WithNoReboot())

	failed := s.waitFor(n, launch.Substring("cairn: root runnable failed"))
	s.bootTimings(n, launch.BootMarks{
		Kernel: launch.CairnBoot.Kernel,
		Init:   launch.CairnBoot.Init,
		Ready:  launch.Substring("cairn: root runnable failed"),
	})
	s.waitFrom(n, failed.Index, launch.Substring("cairn: rebooting in 5s"))

	reboot := time.Now()
	if err := n.Wait(s.ctxWithin(60 * time.Second)); err != nil {
		t.Fatalf("the node did not reboot within 60 s of its root failing: %v", err)
	}
	s.step("root failure → reboot", time.Since(reboot))
	assertNoPanic(t, n)
}

// launchTestImage boots the image's kernel directly with the test
// initramfs, whose /init reads the test flags (cairn.test.*), and flags
// added to the image's command line; the disk is the image's.
func (s *suite) launchTestImage(name, flags string, opts ...launch.Option) *launch.Node {
	s.t.Helper()
	cmdline, err := os.ReadFile(artifact(s.t, "cmdline"))
	if err != nil {
		s.t.Fatal(err)
	}
	return s.launch(launch.Config{Name: name, Image: artifact(s.t, "cairn.img")},
		append([]launch.Option{launch.WithDirectBoot(launch.DirectBoot{
			Kernel:  artifact(s.t, "vmlinuz"),
			Initrd:  artifact(s.t, "initramfs-test.img"),
			Cmdline: strings.TrimSpace(string(cmdline)) + " " + flags,
		})}, opts...)...)
}

// assertNoPanic fails the test if the kernel panicked: a reboot after a
// panic ends qemu just as a clean one does.
func assertNoPanic(t *testing.T, n *launch.Node) {
	t.Helper()
	if l, ok := n.Console().Find(0, launch.Substring("Kernel panic")); ok {
		t.Errorf("the kernel panicked: %q", l.Text)
	}
}

// kernelRelease returns the kernel release the image was built with, from
// out/kernel-version ("<release> <package version>"), or "" if the build
// did not record it.
func kernelRelease(t *testing.T) string {
	b, err := os.ReadFile(filepath.Join(imageDir(t), "kernel-version"))
	if err != nil {
		t.Logf("not checking the kernel release: %v", err)
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}
