//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"cairn.dev/cairn/build/disk"
	"cairn.dev/cairn/node/marker"
	"cairn.dev/cairn/pkg/espimage"
	"cairn.dev/cairn/pkg/gpt"
	"cairn.dev/cairn/pkg/tpmseal"
	"cairn.dev/cairn/pkg/uki"
	"cairn.dev/cairn/test/launch"
	"cairn.dev/cairn/test/launch/cluster"
)

// TestSecureBootSigned forms a one-node cluster, with a TPM, through
// firmware that enforces Secure Boot and trusts the key the build signs
// its UKI with (make image: a development build's is Debian's snakeoil
// key, which that firmware's variables trust): the node boots, with the
// kernel locked down as Secure Boot makes it, bootstraps and is listed
// UP. Then cairnctl reboots it, through the firmware, and it joins again
// from its sealed configuration, which it sealed bound to the release's
// PCR key and PCR 7: the seal opens in the second boot too. The boot's
// phases are printed, to set beside those of the suites that boot without
// Secure Boot.
func TestSecureBootSigned(t *testing.T) {
	s := newSuite(t, 1, 20*time.Minute)
	c := s.newCluster(1, 0, launch.WithSecureBoot())
	n0 := c.Node(0)
	if err := c.Form(s.ctx); err != nil {
		t.Fatalf("forming the one-node cluster under Secure Boot: %v", err)
	}
	vm := n0.VM()
	s.stepBootstrap(t, vm)
	if _, ok := vm.Console().Find(0, launch.Substring("Kernel is locked down from EFI Secure Boot")); !ok {
		t.Errorf("the kernel did not say it is locked down by Secure Boot: did the firmware enforce it?")
	}
	nodes, err := c.ListNodes(s.ctx)
	if err != nil {
		t.Fatalf("node list: %v", err)
	}
	if len(nodes) != 1 || nodes[0].State != "UP" {
		t.Fatalf("node list = %+v, want %s alone, UP", nodes, n0.ID())
	}
	s.checkBootSecurity(t, c, n0.ID(), "on")

	mark := n0.Mark()
	start := time.Now()
	s.cairnctl(t, c, "node", "reboot", n0.ID())
	boot := s.waitNode(t, n0, mark, launch.CairnBoot.Init)
	back := s.waitNode(t, n0, boot.Index, launch.Mark(marker.Joined, "node", n0.ID()))
	s.step("reboot command → /init of the next boot", boot.Time.Sub(start))
	s.step("reboot command → rejoined", back.Time.Sub(start))
	// The configuration sealed at the bootstrap, bound to the release,
	// opened in the firmware's second boot, and unsealing then ended.
	s.waitNode(t, n0, boot.Index, launch.Substring("Unsealing is over for this boot"))
	rebooted := s.lineAfter(n0, mark, "cairn: rebooting")
	t.Logf("rebooted: %s; %s", rebooted, cluster.Message(back.Text))
	// The locked-down kernel loads no kernel it cannot verify, so the
	// node reboots through the firmware, which checks the UKI again,
	// without trying kexec.
	if !strings.Contains(rebooted, "through the firmware: Secure Boot is on") {
		t.Errorf("under Secure Boot the node did not reboot through the firmware: %s", rebooted)
	}
	assertNoPanic(t, n0.VM())
}

// TestSecureBootChangedCommandLine forms a one-node cluster under Secure
// Boot, whose node seals its configuration bound to the release's PCR key
// and PCR 7. Then it swaps the node's UKI for cairn-cmdline.efi: the same
// kernel and initramfs with cairn.system=a added to the command line,
// signed with the Secure Boot key, and carrying the release's signature of
// the real UKI's PCR 11 (make test-ukis). The firmware boots it; the TPM
// refuses to unseal, the node says why on its console, and it neither
// joins nor starts cold. With the real UKI back, it joins again: nothing
// was lost.
func TestSecureBootChangedCommandLine(t *testing.T) {
	s := newSuite(t, 1, 20*time.Minute)
	n0 := s.boundNode(t)

	s.bootUKI(t, n0, filepath.Join("test-ukis", "cairn-cmdline.efi"))
	s.waitNode(t, n0, 0, launch.Substring("cairn.system=a"))
	refused := s.waitNode(t, n0, 0, launch.Substring("Sealed configuration is unusable"))
	t.Logf("node 0 with the changed command line: %s", cluster.Message(refused.Text))
	if !strings.Contains(refused.Text, "is not one the seal's release key signed") {
		t.Errorf("node 0 did not say that its boot is not a signed one: %s", cluster.Message(refused.Text))
	}
	// A cold start would follow within seconds if the node opened its
	// configuration after all; enrolment retries with backoff meanwhile.
	time.Sleep(20 * time.Second)
	if l, ok := n0.VM().Console().Find(0, launch.Mark(marker.Joined)); ok {
		t.Errorf("node 0 joined with the changed command line: %s", l.Text)
	}
	if l, ok := n0.VM().Console().Find(0, launch.Substring("Unsealing is over")); ok {
		t.Errorf("node 0 unsealed with the changed command line: %s", l.Text)
	}

	s.bootUKI(t, n0, "cairn.efi")
	back := s.waitNode(t, n0, 0, launch.Mark(marker.Joined, "node", n0.ID()))
	t.Logf("node 0 with its UKI back: %s", cluster.Message(back.Text))
	assertNoPanic(t, n0.VM())
}

// TestSecureBootUnsealsOnce forms a one-node cluster under Secure Boot,
// then boots its disk with cairn-unseal-again.efi (make test-ukis: the
// test /init with cairn.test.unseal-again, a UKI the release signed): the
// node joins, unsealing its configuration, and once enrolment has ended
// unsealing for the boot, the test hook's second unseal, through the same
// code as a join's, is refused by the TPM.
func TestSecureBootUnsealsOnce(t *testing.T) {
	s := newSuite(t, 1, 20*time.Minute)
	n0 := s.boundNode(t)
	s.bootUKI(t, n0, filepath.Join("test-ukis", "cairn-unseal-again.efi"))
	s.waitNode(t, n0, 0, launch.Mark(marker.Joined, "node", n0.ID()))
	again := s.waitNode(t, n0, 0, launch.Substring("test: a second unseal in this boot"))
	t.Logf("node 0: %s", cluster.Message(again.Text))
	if !strings.Contains(again.Text, "was refused: ") || !strings.Contains(again.Text, "is not one the seal's release key signed") {
		t.Errorf("the second unseal in the boot was not refused for the end of unsealing: %s", cluster.Message(again.Text))
	}
	assertNoPanic(t, n0.VM())
}

// boundNode forms a one-node cluster under Secure Boot and returns its
// node once it has sealed its configuration bound to the build's release.
func (s *suite) boundNode(t *testing.T) *cluster.Node {
	t.Helper()
	c := s.newCluster(1, 0, launch.WithSecureBoot())
	n := c.Node(0)
	if err := c.Form(s.ctx); err != nil {
		t.Fatalf("forming the one-node cluster under Secure Boot: %v", err)
	}
	s.waitNode(t, n, 0, launch.Mark(marker.ConfigurationSealed, "bound", "true"))
	return n
}

// bootUKI powers node n off, puts the build's artifact file as the UKI on
// its ESP, where the firmware finds it, and boots it again.
func (s *suite) bootUKI(t *testing.T, n *cluster.Node, file string) {
	t.Helper()
	if err := n.PowerOff(s.ctx, 2*time.Minute); err != nil {
		t.Fatalf("powering %s off: %v", n.ID(), err)
	}
	uki, err := os.ReadFile(artifact(t, file))
	if err != nil {
		t.Fatal(err)
	}
	if err := espimage.WriteFile(n.Disk(), disk.BootPath, uki); err != nil {
		t.Fatalf("writing %s onto the ESP of %s: %v", file, n.ID(), err)
	}
	if _, err := n.Boot(s.ctx, nil); err != nil {
		t.Fatalf("booting %s with %s: %v", n.ID(), file, err)
	}
}

// TestSecureBootUpdate updates, through the firmware, a node that sealed
// its configuration under Secure Boot, bound to the build's PCR key, over
// a rotation of that key (make test-ukis):
//
//	(a) to 1.0.0 of cairn-rotate.efi, whose own PCR key is another and
//	    which carries the signatures of both: the trial boot opens the
//	    seal with the build key's signature, seals it again for both keys,
//	    joins and proves itself healthy; the node now names the new key;
//	(b) to 1.1.0 of cairn-rotated.efi, signed by the new key alone, whose
//	    PCR 11 differs again: the trial boot opens the seal as it is,
//	    without sealing again.
func TestSecureBootUpdate(t *testing.T) {
	s := newSuite(t, 1, 20*time.Minute)
	c, n, key, rb := s.updateCluster(t, launch.WithSecureBoot())
	id := n.ID()
	s.waitNode(t, n, 0, launch.Mark(marker.ConfigurationSealed, "bound", "true"))
	update := func(t *testing.T, name, version string) int {
		t.Helper()
		ref := rb.pushUKI(t, "secureboot-"+version, version, testUKI(t, name), key)
		from := n.Mark()
		start := time.Now()
		out, err := s.updateTrial(c, id, ref, trialDeadline)
		if err != nil || !strings.Contains(out, "runs release "+version+" from slot") {
			t.Fatalf("node update %s under Secure Boot: %v\n%s", ref, err, out)
		}
		s.step("update command → "+version+" proved itself (under Secure Boot)", time.Since(start))
		s.waitNode(t, n, from, launch.Substring("unified kernel image once (BootNext), for a trial"))
		opened := s.waitNode(t, n, from, launch.Substring("Unsealing is over for this boot"))
		t.Logf("%s opened the seal: %s", version, cluster.Message(opened.Text))
		return from
	}

	t.Run("a-rotate", func(t *testing.T) {
		from := update(t, "rotate", "1.0.0")
		if _, ok := n.VM().Console().Find(from, launch.Mark(marker.ConfigurationSealed, "rebound", "true")); !ok {
			t.Errorf("1.0.0, which rotates the PCR key, did not seal the configuration again for the new key")
		}
		want := pcrKeyOf(t, testUKIPath(t, "rotate"))
		if desc := s.cairnctl(t, c, "node", "describe", id); !strings.Contains(desc, "PCR key:") || !strings.Contains(desc, want) {
			t.Errorf("node describe after the rotation does not name the new PCR key %s:\n%s", want, desc)
		}
	})
	t.Run("b-rotated", func(t *testing.T) {
		from := update(t, "rotated", "1.1.0")
		if l, ok := n.VM().Console().Find(from, launch.Mark(marker.ConfigurationSealed)); ok {
			t.Errorf("the node sealed its configuration again for an update of the same key: %s", cluster.Message(l.Text))
		}
	})
	assertNoPanic(t, n.VM())
}

// pcrKeyOf is the fingerprint, hex, of the PCR key in the .pcrpkey of the
// UKI at path.
func pcrKeyOf(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pem, err := uki.Section(f, ".pcrpkey")
	if err != nil {
		t.Fatal(err)
	}
	key, err := tpmseal.ParsePCRKey(pem)
	if err != nil {
		t.Fatalf("%s's .pcrpkey: %v", path, err)
	}
	fp := tpmseal.KeyFingerprint(key)
	return hex.EncodeToString(fp[:])
}

// TestSecureBootRefusesTamperedUKI boots, through the same firmware, a
// copy of the image whose UKI on the ESP has one byte changed, so that
// it no longer matches its signature, as a UKI no trusted key signed:
// the firmware refuses it, and nothing of it runs.
func TestSecureBootRefusesTamperedUKI(t *testing.T) {
	s := newSuite(t, 1, 10*time.Minute)
	disk := tamperedUKICopy(t)
	n := s.launch(launch.Config{Name: "secureboot-tampered", Image: disk}, launch.WithSecureBoot())
	denied := s.waitFor(n, launch.Substring("Access Denied"))
	t.Logf("the firmware refused the tampered UKI: %s", denied.Text)
	// The firmware moves on to its next boot option; give the UKI's
	// stub the time it would have needed to say anything.
	time.Sleep(5 * time.Second)
	for _, l := range []string{"cairn: init started", "EFI stub:", "Linux version"} {
		if got, ok := n.Console().Find(0, launch.Substring(l)); ok {
			t.Errorf("the tampered UKI ran under Secure Boot: %q", got.Text)
		}
	}
}

// TestSecureBootRequired bootstraps, under Secure Boot, a cluster that
// requires it of every node, with seals bound to signed releases (node 0
// binds its own, or it would refuse to bootstrap), then boots another
// node with register parameters through firmware without Secure Boot:
// the curator refuses its registration, the node says why on its
// console, and the cluster never lists it.
func TestSecureBootRequired(t *testing.T) {
	s := newSuite(t, 2, 20*time.Minute)
	cfg := s.clusterConfig(1, 1, launch.WithSecureBoot())
	cfg.SecureBoot, cfg.TPMMode = "bound", "required"
	c := s.startCluster(cfg)
	if err := c.Form(s.ctx); err != nil {
		t.Fatalf("forming a one-node cluster that requires Secure Boot, under it: %v", err)
	}
	info := s.cairnctl(t, c, "cluster", "info")
	if !regexp.MustCompile(`(?m)^Secure Boot:\s+required, with seals bound to signed releases$`).MatchString(info) {
		t.Errorf("cairnctl cluster info does not say the cluster requires Secure Boot and bound seals:\n%s", info)
	}
	params, err := c.RegisterParams(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	n1 := c.Node(1)
	start := time.Now()
	if _, err := n1.Boot(s.ctx, params, launch.WithoutSecureBoot()); err != nil {
		t.Fatalf("booting node 1 without Secure Boot: %v", err)
	}
	l := s.waitNode(t, n1, 0, launch.Mark(marker.Refused))
	s.step("node 1 booted without Secure Boot → refused at register", time.Since(start))
	t.Logf("node 1: %s", cluster.Message(l.Text))
	if !strings.Contains(l.Text, "requires Secure Boot") {
		t.Errorf("node 1 was refused for another reason: %s", cluster.Message(l.Text))
	}
	nodes, err := c.ListNodes(s.ctx)
	if err != nil {
		t.Fatalf("node list: %v", err)
	}
	if len(nodes) != 1 {
		t.Errorf("node list = %+v, want node 0 alone", nodes)
	}
}

// tamperedUKICopy copies the image and changes one byte of its UKI where
// the ESP holds it: a byte in the middle of the file, which its signature
// covers. The UKI is found on the ESP by its own bytes around there, in
// one piece, as the image's freshly made FAT lays it out.
func tamperedUKICopy(t *testing.T) string {
	t.Helper()
	uki, err := os.ReadFile(artifact(t, "cairn.efi"))
	if err != nil {
		t.Fatal(err)
	}
	mid := len(uki) / 2
	needle := uki[mid : mid+4096]
	disk := copyImage(t)
	f, err := os.OpenFile(disk, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tab := readGPT(t, f)
	i := tab.Find(gpt.TypeEFISystem)
	if i < 0 {
		t.Fatalf("the image has no ESP: %+v", tab.Entries)
	}
	esp := tab.Entries[i]
	start, size := int64(esp.FirstLBA)*512, int64(esp.LastLBA-esp.FirstLBA+1)*512
	data := make([]byte, size)
	if _, err := f.ReadAt(data, start); err != nil {
		t.Fatalf("reading the ESP: %v", err)
	}
	// Every copy: the ESP may hold the UKI at more than one path.
	found := 0
	for at := 0; ; {
		i := bytes.Index(data[at:], needle)
		if i < 0 {
			break
		}
		if err := flipByte(f, start+int64(at+i)+7); err != nil {
			t.Fatal(err)
		}
		found++
		at += i + len(needle)
	}
	if found == 0 {
		t.Fatalf("the UKI's bytes are not on the ESP")
	}
	t.Logf("changed one byte in each of %d copies of the UKI on the ESP", found)
	return disk
}

// checkBootSecurity checks, once node id has reported its status, that
// cairnctl node describe says Secure Boot is secureBoot ("on", "off") on
// it, that it seals with its TPM, bound under Secure Boot to the PCR key
// of the build's UKI, and
// that the PCR 11 it read from its TPM is what pkg/uki predicts of the
// build's UKI, which the firmware booted from the ESP.
func (s *suite) checkBootSecurity(t *testing.T, c *cluster.Cluster, id, secureBoot string) {
	t.Helper()
	lines := map[string]string{}
	_, err := cluster.Retry(s.ctx, 2*time.Minute, func(ctx context.Context) error {
		out, err := c.Cairnctl(ctx, "node", "describe", id)
		if err != nil {
			return err
		}
		for _, l := range strings.Split(string(out), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok {
				lines[k] = strings.TrimSpace(v)
			}
		}
		if lines["Secure Boot"] == "-" {
			return fmt.Errorf("it has not reported it yet")
		}
		return nil
	})
	if err != nil {
		t.Errorf("cairnctl node describe %s: no Secure Boot state: %v", id, err)
		return
	}
	t.Logf("cairnctl node describe: Secure Boot: %s; Seal: %s", lines["Secure Boot"], lines["Seal"])
	if lines["Secure Boot"] != secureBoot {
		t.Errorf("cairnctl node describe %s says Secure Boot: %q, want %q", id, lines["Secure Boot"], secureBoot)
	}
	f, err := os.Open(artifact(t, "cairn.efi"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Under Secure Boot the node binds its seal to the PCR key of the UKI
	// it booted; without it, to the TPM alone.
	wantSeal, wantKey := "TPM, not bound", ""
	if secureBoot == "on" {
		wantSeal, wantKey = "TPM, bound to releases its PCR key signed", pcrKeyOf(t, artifact(t, "cairn.efi"))
	}
	if !strings.HasPrefix(lines["Seal"], wantSeal) || lines["PCR key"] != wantKey {
		t.Errorf("cairnctl node describe %s says Seal: %q, PCR key: %q; want %q…, %q", id, lines["Seal"], lines["PCR key"], wantSeal, wantKey)
	}
	want, err := uki.PCR11(f)
	if err != nil {
		t.Fatalf("predicting PCR 11 of cairn.efi: %v", err)
	}
	t.Logf("PCR 11: %s on the node, %x predicted", lines["PCR 11"], want)
	if lines["PCR 11"] != hex.EncodeToString(want[:]) {
		t.Errorf("cairnctl node describe %s says PCR 11: %q; pkg/uki predicts %x of the UKI it booted", id, lines["PCR 11"], want)
	}
}
