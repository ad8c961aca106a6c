package uki

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	ukiread "cairn.dev/cairn/pkg/uki"
)

// systemdMeasure is systemd's own predictor of PCR 11, in Debian's
// systemd package.
const systemdMeasure = "/usr/lib/systemd/systemd-measure"

// sampleEnterInitrd is what systemd-measure 252 (Debian 12) printed for
// sampleSections' .linux, .osrel, .cmdline and .initrd, as PCR 11 in its
// first phase (enter-initrd): the stub's measurements, then the phase's.
const sampleEnterInitrd = "be80a921bdfaede2bf58d423dabe934fe82b30bc0a7f66f48514ccbcc75ab89d"

// TestPCR11 predicts PCR 11 for an image Build wrote and checks it
// against systemd's own prediction: systemd-measure's, run on the same
// sections where it is installed, and the value it printed for them when
// this test was written. systemd-measure adds the enter-initrd phase to
// what the stub measured; the test adds it to PCR11's value. The .uname
// section, which the stub of systemd 252 does not measure, must not count.
func TestPCR11(t *testing.T) {
	s := sampleSections()
	img, err := Build(tinyStub(0x1000), s)
	if err != nil {
		t.Fatal(err)
	}
	pcr, err := ukiread.PCR11(bytes.NewReader(img))
	if err != nil {
		t.Fatalf("PCR11: %v", err)
	}
	phase := sha256.Sum256([]byte("enter-initrd"))
	got := sha256.Sum256(append(pcr[:], phase[:]...))
	if hex.EncodeToString(got[:]) != sampleEnterInitrd {
		t.Errorf("PCR 11 at enter-initrd = %x, want %s as systemd-measure printed it", got, sampleEnterInitrd)
	}

	if _, err := os.Stat(systemdMeasure); err != nil {
		t.Logf("not run again: %v", err)
		return
	}
	dir := t.TempDir()
	args := []string{"calculate", "--bank=sha256"}
	for _, sec := range s {
		if sec.Name == ".uname" {
			continue // systemd-measure 252 takes none
		}
		path := filepath.Join(dir, sec.Name[1:])
		if err := os.WriteFile(path, sec.Data, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--"+sec.Name[1:]+"="+path)
	}
	out, err := exec.Command(systemdMeasure, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-measure %v: %v: %s", args, err, out)
	}
	m := regexp.MustCompile(`11:sha256=([0-9a-f]{64})`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-measure printed no PCR 11:\n%s", out)
	}
	if string(m[1]) != hex.EncodeToString(got[:]) {
		t.Errorf("PCR 11 at enter-initrd = %x, systemd-measure says %s", got, m[1])
	}

	// A change in a measured section changes the value; one in .uname
	// does not.
	for _, tc := range []struct {
		name string
		same bool
	}{{".cmdline", false}, {".uname", true}} {
		changed := sampleSections()
		for i := range changed {
			if changed[i].Name == tc.name {
				changed[i].Data = append(bytes.Clone(changed[i].Data), 'x')
			}
		}
		other, err := Build(tinyStub(0x1000), changed)
		if err != nil {
			t.Fatal(err)
		}
		p, err := ukiread.PCR11(bytes.NewReader(other))
		if err != nil {
			t.Fatal(err)
		}
		if (p == pcr) != tc.same {
			t.Errorf("with %s changed, PCR 11 = %x against %x: the same %t, want %t", tc.name, p, pcr, p == pcr, tc.same)
		}
	}
}
