//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/pkg/release"
	"cairn.dev/cairn/test/launch"
	"cairn.dev/cairn/test/launch/cluster"
)

// TestUpdateTrial updates one node booted through OVMF, whose firmware
// variables the harness keeps, with releases that differ from the build
// only in their /init's version stamp (make test-ukis):
//
//	(a) the build's version to 1.0.0: installed into slot b (the system
//	    image copied from slot a, which holds it, not downloaded), booted once
//	    by the firmware (the console says BootNext booted slot b's UKI),
//	    healthy, then the default; a release key the owner added before
//	    the update reads back after it, from etcd on the data partition;
//	(b) 1.0.1, whose kernel panics at boot: the firmware's default brings
//	    the node back on 1.0.0 by itself, and it reports "rolled back from
//	    1.0.1" and why; the update command fails saying so;
//	(c) 1.0.2, whose PID 1 (the test build's, cairn.test.starve-watchdog)
//	    arms qemu's i6300esb watchdog, never feeds it and freezes the
//	    core, as a hung node:
//	    the watchdog resets the machine, the firmware's default brings
//	    1.0.0 back, and the node reports the rollback;
//	(k) a reboot kexecs into the default slot's UKI: 1.0.0 again;
//	(c2) with -long (make test-long): 1.0.3, whose curator never serves
//	    (the test build's cairn.test.hold-curator-port holds its port), so
//	    the trial boot misses its deadline of one minute and reboots through
//	    the firmware, whose default brings 1.0.0 back; the node reports the
//	    rollback and what its health still waited for;
//	(e) with -long (make test-long): the power cut while slot a is
//	    written (with a system image the node lacks, downloaded), then
//	    during the trial boot of 1.1.0: each time the node
//	    comes back on 1.0.0 by itself, and the update, tried again, ends on
//	    1.1.0.
func TestUpdateTrial(t *testing.T) {
	s := newSuite(t, 1, 30*time.Minute)
	// Every node has qemu's watchdog (test/launch), which resets the
	// machine when it is not fed.
	c, n, key, rb := s.updateCluster(t)
	id := n.ID()
	built := readVersion(t)

	// Data written before the updates, read back after each.
	extra, err := release.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	s.cairnctl(t, c, "cluster", "release-keys", "add", extra.Public().String())
	keptKey := func(t *testing.T) {
		t.Helper()
		if out := s.cairnctl(t, c, "cluster", "release-keys", "list"); !strings.Contains(out, extra.Public().ID()) {
			t.Errorf("cluster release-keys list printed\n%s\nwithout the key added before the update, %s", out, extra.Public().ID())
		}
	}

	t.Run("a-firmware-trial", func(t *testing.T) {
		ref := rb.pushUKI(t, "trial-1.0.0", "1.0.0", testUKI(t, "1.0.0"), key)
		from := n.Mark()
		start := time.Now()
		out, err := s.updateTrial(c, id, ref, trialDeadline)
		if err != nil {
			t.Fatalf("node update %s: %v\n%s", ref, err, out)
		}
		s.step("update command → 1.0.0 proved itself (firmware trial)", time.Since(start))
		if want := "runs release 1.0.0 from slot b, which proved itself"; !strings.Contains(out, want) {
			t.Errorf("node update printed\n%s\nwant %q", out, want)
		}
		staged := s.waitNode(t, n, from, launch.Substring("Release 1.0.0 staged in system slot b"))
		booted := s.waitNode(t, n, staged.Index, launch.Substring("The firmware booted slot b's unified kernel image once (BootNext), for a trial"))
		proved := s.waitNode(t, n, booted.Index, launch.Substring("proved itself healthy"))
		// The release's system image is the build's, which the running
		// slot holds: copied, not downloaded.
		s.waitNode(t, n, from, launch.Substring("Update: copying slot a to slot b"))
		if l, ok := n.VM().Console().Find(from, launch.Substring("Update: downloading the system image")); ok {
			t.Errorf("the node downloaded the system image its running slot holds: %s", cluster.Message(l.Text))
		}
		s.step("  update command → staged (UKI downloaded, slot a copied, read back)", staged.Time.Sub(start))
		s.step("  staged → trial boot mounts slot b (reboot, firmware, kernel)", booted.Time.Sub(staged.Time))
		s.step("  slot b mounted → healthy, the default", proved.Time.Sub(booted.Time))
		s.checkSlots(t, c, id, slotView{"a", false, "good", built, ""}, slotView{"b", true, "good", "1.0.0", ""})
		desc := s.cairnctl(t, c, "node", "describe", id)
		if !strings.Contains(desc, "System slots:") || !strings.Contains(desc, "1.0.0") {
			t.Errorf("node describe printed\n%s\nwithout the system slots", desc)
		}
		keptKey(t)
	})

	t.Run("b-panic-rolls-back", func(t *testing.T) {
		ref := rb.pushUKI(t, "trial-panic", "1.0.1", testUKI(t, "panic"), key)
		from := n.Mark()
		start := time.Now()
		out, err := s.updateTrial(c, id, ref, trialDeadline)
		if err == nil || !strings.Contains(err.Error(), "rolled back from 1.0.1: its trial boot ended before it was healthy") {
			t.Fatalf("node update of a release that panics: %v\n%s\nwant it to fail saying the node rolled back from 1.0.1", err, out)
		}
		s.step("update command → panic → rollback reported", time.Since(start))
		panicked := s.waitNode(t, n, from, launch.Substring("Kernel panic"))
		back := s.waitNode(t, n, panicked.Index, launch.Substring("rolled back from 1.0.1"))
		serving := s.waitNode(t, n, back.Index, launch.Mark(marker.CuratorServing))
		s.step("update command → panic → 1.0.0's curator serving", serving.Time.Sub(start))
		s.checkSlots(t, c, id, slotView{"a", false, "bad", "1.0.1", "its trial boot ended before it was healthy (a panic, a hang, a reset or a power cut)"}, slotView{"b", true, "good", "1.0.0", ""})
		keptKey(t)
	})

	t.Run("c-hang-rolls-back", func(t *testing.T) {
		if _, ok := n.VM().Console().Find(0, launch.Substring("cairn: watchdog armed")); !ok {
			t.Errorf("PID 1 never armed the watchdog")
		}
		if _, ok := n.VM().Console().Find(0, launch.Substring("s, and when a reboot hangs")); !ok {
			t.Errorf("PID 1 armed the watchdog, but the kernel stops it in a reboot: the watchdog core was loaded without stop_on_reboot=0")
		}
		ref := rb.pushUKI(t, "trial-hang", "1.0.2", testUKI(t, "hang"), key)
		from := n.Mark()
		start := time.Now()
		out, err := s.updateTrial(c, id, ref, trialDeadline)
		if err == nil || !strings.Contains(err.Error(), "rolled back from 1.0.2: its trial boot ended before it was healthy") {
			t.Fatalf("node update of a release that hangs: %v\n%s\nwant it to fail saying the node rolled back from 1.0.2", err, out)
		}
		starved := s.waitNode(t, n, from, launch.Substring("PID 1 stops feeding the watchdog"))
		back := s.waitNode(t, n, starved.Index, launch.Substring("rolled back from 1.0.2"))
		serving := s.waitNode(t, n, back.Index, launch.Mark(marker.CuratorServing))
		s.step("update command → hang, watchdog reset → 1.0.0's curator serving", serving.Time.Sub(start))
		s.step("  watchdog starved → rollback reported (reset, firmware, boot)", back.Time.Sub(starved.Time))
		s.checkSlots(t, c, id, slotView{"a", false, "bad", "1.0.2", ""}, slotView{"b", true, "good", "1.0.0", ""})
		keptKey(t)
	})

	t.Run("k-kexec-reboot", func(t *testing.T) {
		from := n.Mark()
		start := time.Now()
		s.cairnctl(t, c, "node", "reboot", id)
		s.waitNode(t, n, from, launch.Substring("cairn: stopping for reboot"))
		boot := s.waitNode(t, n, from, launch.CairnBoot.Init)
		serving := s.waitNode(t, n, boot.Index, launch.Mark(marker.CuratorServing))
		s.step("kexec reboot → 1.0.0's curator serving", serving.Time.Sub(start))
		// Proved and the default, the slot's boot entry is BootOrder's
		// first: the reboot kexecs into the removable media path, which
		// holds that slot's UKI.
		if _, ok := n.VM().Console().Find(from, kexecLine); !ok {
			t.Errorf("the reboot did not kexec into the ESP's image: %s", s.lineAfter(n, from, "cairn: rebooting"))
		}
		s.checkSlots(t, c, id, slotView{Name: "a", State: "bad"}, slotView{"b", true, "good", "1.0.0", ""})
		keptKey(t)
	})

	if !*longFlag {
		t.Log("the release that never becomes healthy and the power cuts during an update run with -long (make test-long)")
		return
	}
	t.Run("c2-unhealthy-rolls-back", func(t *testing.T) {
		ref := rb.pushUKI(t, "trial-unhealthy", "1.0.3", testUKI(t, "unhealthy"), key)
		from := n.Mark()
		start := time.Now()
		out, err := s.updateTrial(c, id, ref, unhealthyDeadline)
		want := "rolled back from 1.0.3: not healthy within " + unhealthyDeadline.String() + ": waiting for "
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("node update of a release that never becomes healthy: %v\n%s\nwant it to fail saying %q", err, out, want)
		}
		s.step("update command → never healthy, deadline missed → rollback reported", time.Since(start))
		booted := s.waitNode(t, n, from, launch.Substring("The firmware booted slot a's unified kernel image once (BootNext), for a trial"))
		// The holder starts with the supervision tree, before the update
		// child says which slot the firmware booted.
		s.waitNode(t, n, from, launch.Substring("holding port"))
		missed := s.waitNode(t, n, booted.Index, launch.Substring("; rebooting into the last good slot"))
		back := s.waitNode(t, n, missed.Index, launch.Substring("rolled back from 1.0.3"))
		serving := s.waitNode(t, n, back.Index, launch.Mark(marker.CuratorServing))
		s.step("  slot a mounted → deadline missed", missed.Time.Sub(booted.Time))
		s.step("  deadline missed → 1.0.0's curator serving (reboot, firmware, boot)", serving.Time.Sub(missed.Time))
		t.Logf("the trial boot gave up: %s", cluster.Message(missed.Text))
		s.checkSlots(t, c, id, slotView{"a", false, "bad", "1.0.3", ""}, slotView{"b", true, "good", "1.0.0", ""})
		keptKey(t)
	})

	t.Run("e-power-cuts", func(t *testing.T) {
		ref := rb.pushUKI(t, "trial-1.1.0", "1.1.0", testUKI(t, "1.1.0"), key)
		// Slot a holds the build's system image already, which an update
		// does not write again: the cut comes while a release whose image
		// the node lacks is written.
		written := rb.otherSystem(t).pushUKI(t, "trial-1.1.0-other-system", "1.1.0", testUKI(t, "1.1.0"), key)
		s.cutDuring(t, c, n, written, launch.Substring("Update: writing slot a"))
		s.checkSlots(t, c, id, slotView{Name: "a", State: "writing", Version: "1.1.0"}, slotView{"b", true, "good", "1.0.0", ""})
		keptKey(t)

		back := s.cutDuring(t, c, n, ref, launch.Substring("The firmware booted slot a's unified kernel image once (BootNext), for a trial"))
		if _, ok := n.VM().Console().Find(0, launch.Substring("rolled back from 1.1.0")); !ok {
			t.Errorf("after the cut during the trial the node did not report the rollback (curator serving: %s)", cluster.Message(back.Text))
		}
		s.checkSlots(t, c, id, slotView{Name: "a", State: "bad", Version: "1.1.0"}, slotView{"b", true, "good", "1.0.0", ""})

		start := time.Now()
		out, err := s.updateTrial(c, id, ref, trialDeadline)
		if err != nil || !strings.Contains(out, "runs release 1.1.0 from slot a, which proved itself") {
			t.Fatalf("node update %s after the cuts: %v\n%s", ref, err, out)
		}
		s.step("after two cuts, update command → 1.1.0 proved itself", time.Since(start))
		s.checkSlots(t, c, id, slotView{"a", true, "good", "1.1.0", ""}, slotView{"b", false, "good", "1.0.0", ""})
		keptKey(t)
	})
}

// cutDuring starts an update of node n to ref, cuts the node's power when
// its console shows cut, boots it again and waits until its curator
// serves, which it returns the line of.
func (s *suite) cutDuring(t *testing.T, c *cluster.Cluster, n *cluster.Node, ref string, cut launch.Matcher) launch.Line {
	t.Helper()
	from := n.Mark()
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The cut ends the command with an error: the node went away,
		// or, waiting for the trial, the command is stopped.
		runUpdate(ctx, c, n.ID(), ref, trialFlags(trialDeadline)...)
	}()
	s.waitNode(t, n, from, cut)
	if err := n.Kill(); err != nil {
		t.Fatalf("cutting the power of %s: %v", n.Name(), err)
	}
	cancel()
	<-done
	if _, err := n.Boot(s.ctx, nil); err != nil {
		t.Fatalf("booting %s again: %v", n.Name(), err)
	}
	return s.waitNode(t, n, 0, launch.Mark(marker.CuratorServing))
}

// updateTrial runs cairnctl node update on node id with the trial
// deadline, waiting for the trial's outcome, and returns its output.
func (s *suite) updateTrial(c *cluster.Cluster, id, ref string, deadline time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(s.ctx, 15*time.Minute)
	defer cancel()
	return runUpdate(ctx, c, id, ref, trialFlags(deadline)...)
}

// unhealthyDeadline is the trial deadline of the release that never
// becomes healthy: it only has to run out, after the slot was mounted.
const unhealthyDeadline = time.Minute

// trialDeadline is the trial deadline of the suite's other updates that
// boot the release.
const trialDeadline = 5 * time.Minute

// trialFlags are the flags of an update that boots the release, with
// deadline for its trial.
func trialFlags(deadline time.Duration) []string {
	return []string{"--trial-deadline", deadline.String()}
}

// slotView is one slot as cairnctl -o json node slots prints it.
type slotView struct {
	Name    string `json:"name"`
	Running bool   `json:"running"`
	State   string `json:"state"`
	Version string `json:"version"`
	Reason  string `json:"reason"`
}

// checkSlots checks that node slots says want of node id's slots; a
// want's empty Reason or Version accepts any.
func (s *suite) checkSlots(t *testing.T, c *cluster.Cluster, id string, want ...slotView) {
	t.Helper()
	out := s.cairnctl(t, c, "-o", "json", "node", "slots", id)
	t.Logf("cairnctl node slots: %s", strings.TrimSpace(out))
	var got []slotView
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("node slots printed %q: %v", out, err)
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			if g.Name == w.Name {
				found = true
				if w.Reason == "" {
					g.Reason = ""
				}
				if w.Version == "" {
					g.Version = ""
				}
				if g != w {
					t.Errorf("slot %s is %+v, want %+v", w.Name, g, w)
				}
			}
		}
		if !found {
			t.Errorf("node slots lists no slot %s: %s", w.Name, out)
		}
	}
}

// testUKI reads the UKI make test-ukis built for name ("1.0.0", "panic").
func testUKI(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(testUKIPath(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testUKIPath is where make test-ukis put the UKI for name.
func testUKIPath(t *testing.T, name string) string {
	return artifact(t, filepath.Join("test-ukis", "cairn-"+name+".efi"))
}

// readVersion is the build's version (out/version).
func readVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(artifact(t, "version"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// pushUKI pushes, as push does, a release of version for this machine's
// architecture whose UKI is uki.
func (rb *releaseBuilder) pushUKI(t *testing.T, name, version string, uki []byte, key release.PrivateKey) string {
	t.Helper()
	own := *rb
	own.uki = uki
	return own.push(t, name, version, runtime.GOARCH, key)
}
