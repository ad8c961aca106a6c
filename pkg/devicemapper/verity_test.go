package devicemapper

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func testVerity() Verity {
	return Verity{
		DataDevice: "/dev/vda2", HashDevice: "/dev/vda2",
		DataBlockSize: 4096, HashBlockSize: 4096,
		DataBlocks: 130, HashStartBlock: 130,
		Algorithm: "sha256",
		RootHash:  []byte{0xab, 0xcd, 0xef, 0x01},
		Salt:      []byte{0x01, 0x02},
	}
}

// TestVerityTable checks the table line word by word, as dm-verity's
// documentation lists its arguments, and the spec it is packed in.
func TestVerityTable(t *testing.T) {
	target, err := testVerity().verityTarget()
	if err != nil {
		t.Fatalf("verityTarget: %v", err)
	}
	want := Target{
		Start: 0, Length: 130 * 8, Type: "verity",
		Params: "1 /dev/vda2 /dev/vda2 4096 4096 130 130 sha256 abcdef01 0102",
	}
	if diff := cmp.Diff(want, target); diff != "" {
		t.Errorf("verity target differs (-want +got):\n%s", diff)
	}
	rec, err := encodeTargets([]Target{target})
	if err != nil {
		t.Fatal(err)
	}
	// One spec: 40 bytes, the parameters and their NUL, padded to 8.
	if len(rec) != align8(40+len(want.Params)+1) || rec[40+len(want.Params)] != 0 {
		t.Errorf("encoded spec is %d bytes, want %d ending the parameters with NUL", len(rec), align8(40+len(want.Params)+1))
	}
	if got := binary.LittleEndian.Uint64(rec[8:]); got != 130*8 {
		t.Errorf("spec length = %d sectors, want %d", got, 130*8)
	}
	if got := string(rec[24:30]); got != "verity" || rec[30] != 0 {
		t.Errorf("spec type = %q, want verity", rec[24:31])
	}

	noSalt := testVerity()
	noSalt.Salt = nil
	target, err = noSalt.verityTarget()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(target.Params, " abcdef01 -") {
		t.Errorf("verity table without a salt = %q, want the salt written as -", target.Params)
	}
}

func TestVerityTableRejects(t *testing.T) {
	for name, change := range map[string]func(*Verity){
		"no data device":   func(v *Verity) { v.DataDevice = "" },
		"space in device":  func(v *Verity) { v.HashDevice = "/dev/v da" },
		"odd block size":   func(v *Verity) { v.DataBlockSize = 3000 },
		"large block size": func(v *Verity) { v.HashBlockSize = 8192 },
		"no blocks":        func(v *Verity) { v.DataBlocks = 0 },
		"no algorithm":     func(v *Verity) { v.Algorithm = "" },
		"no root hash":     func(v *Verity) { v.RootHash = nil },
	} {
		v := testVerity()
		change(&v)
		if _, err := v.verityTarget(); err == nil {
			t.Errorf("verityTarget(%s) succeeded, want an error", name)
		}
	}
}

func TestParseVerityStatus(t *testing.T) {
	for in, want := range map[string]VerityState{"V": VerityVerified, "C": VerityCorrupt, "C 3": VerityCorrupt, " V\n": VerityVerified} {
		got, err := ParseVerityStatus(in)
		if err != nil || got != want {
			t.Errorf("ParseVerityStatus(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "X", "VC", "v"} {
		if _, err := ParseVerityStatus(bad); err == nil {
			t.Errorf("ParseVerityStatus(%q) succeeded, want an error", bad)
		}
	}
}

// FuzzParseVerityStatus: the kernel's status line never panics the
// parser, and only "V" or "C" first are accepted.
func FuzzParseVerityStatus(f *testing.F) {
	for _, s := range []string{"V", "C", "C 1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		st, err := ParseVerityStatus(s)
		if err != nil {
			return
		}
		first, _, _ := strings.Cut(strings.TrimSpace(s), " ")
		if (st == VerityVerified) != (first == "V") {
			t.Errorf("ParseVerityStatus(%q) = %v", s, st)
		}
	})
}
