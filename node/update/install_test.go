package update

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/pkg/ociimage/ocitest"
	"cairn.dev/cairn/pkg/release"
	"cairn.dev/cairn/pkg/release/releasetest"
	"cairn.dev/cairn/pkg/verity"
	"cairn.dev/cairn/proto/private"
)

const (
	running = "0.0.0-20260101000000-0123456789ab"
	newer   = "0.0.0-20260601000000-0123456789ab"
	older   = "0.0.0-20250601000000-0123456789ab"
	// slotSize is the size of each test slot.
	slotSize = 64 * verity.BlockSize
)

// testNode is a node's storage in a directory: its two system slots are
// files of slotSize bytes, slot a running.
type testNode struct {
	st    *localstorage.Storage
	slots map[localstorage.Slot]string
	reg   *ocitest.Registry
	key   release.PrivateKey
	keys  []release.PublicKey
	inst  *Installer
}

func newTestNode(t *testing.T) *testNode {
	t.Helper()
	dir := t.TempDir()
	st, err := localstorage.New(localstorage.Config{Root: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Root.ESP.Cairn.MkdirAll(0o700); err != nil {
		t.Fatal(err)
	}
	key, err := release.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	n := &testNode{st: st, slots: map[localstorage.Slot]string{}, reg: ocitest.New(t, "cairn/release"), key: key, keys: []release.PublicKey{key.Public()}}
	for _, s := range []localstorage.Slot{localstorage.SlotA, localstorage.SlotB} {
		n.slots[s] = filepath.Join(dir, "system-"+string(s))
		if err := os.WriteFile(n.slots[s], bytes.Repeat([]byte(s), slotSize), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	v, err := release.ParseVersion(running)
	if err != nil {
		t.Fatal(err)
	}
	n.inst = New(Config{
		Running:      localstorage.SlotA,
		Version:      v,
		Architecture: "amd64",
		Partition: func(s localstorage.Slot) (string, uint64, error) {
			return n.slots[s], slotSize, nil
		},
		Trust: func(context.Context) (Trust, error) {
			return Trust{Keys: n.keys, PlainHTTP: []string{n.reg.Host()}}, nil
		},
		Spool:  &st.Root.Data.Update,
		Slots:  &st.Root.ESP.Cairn.SystemSlots,
		UKIs:   &st.Root.ESP.EFI.Cairn,
		Client: n.reg.Client(),
	})
	return n
}

// push pushes a release of version for arch, signed with the node's
// trusted key, whose system image has dataBlocks blocks.
func (n *testNode) push(t *testing.T, version, arch string, dataBlocks int) *releasetest.Release {
	t.Helper()
	sys, params := releasetest.SystemImage(t, dataBlocks, []byte("salt"))
	m := release.Metadata{Version: version, Architecture: arch, Verity: params.String()}
	return releasetest.Push(t, n.reg, n.key, m, []byte("MZ the UKI of "+version), sys)
}

// hashes returns the digest of each slot, for tests that nothing changed.
func (n *testNode) hashes(t *testing.T) map[localstorage.Slot][32]byte {
	t.Helper()
	h := map[localstorage.Slot][32]byte{}
	for s, p := range n.slots {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		h[s] = sha256.Sum256(b)
	}
	return h
}

func (n *testNode) record(t *testing.T) *private.SystemSlots {
	t.Helper()
	s, err := ReadSlots(&n.st.Root.ESP.Cairn.SystemSlots)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestInstall installs a release into slot b and checks every place it
// left something: the slot, the UKI, the record, and the spool emptied.
func TestInstall(t *testing.T) {
	n := newTestNode(t)
	r := n.push(t, newer, "amd64", 40)
	before := n.hashes(t)
	var steps []string
	res, err := n.inst.Install(context.Background(), Request{Reference: r.Reference}, func(p Progress) {
		if len(steps) == 0 || steps[len(steps)-1] != p.Step {
			steps = append(steps, p.Step)
		}
	})
	if err != nil {
		t.Fatalf("Install: %v", err)
	}
	if res.Slot != localstorage.SlotB || res.Version != newer || res.Digest != r.Artifact.Manifest.Descriptor.Digest {
		t.Errorf("Install = %+v, want slot b, version %s, digest %s", res, newer, r.Artifact.Manifest.Descriptor.Digest)
	}
	t.Logf("steps: %q", steps)
	for _, want := range []string{StepVerify, "downloading the system image", "writing slot b", "reading back slot b", StepUKI, StepDone} {
		if !slices.Contains(steps, want) {
			t.Errorf("steps %q lack %q", steps, want)
		}
	}
	got, err := os.ReadFile(n.slots[localstorage.SlotB])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:len(r.System)], r.System) {
		t.Errorf("slot b does not start with the release's system image")
	}
	if after := n.hashes(t); after[localstorage.SlotA] != before[localstorage.SlotA] {
		t.Errorf("the running slot a changed")
	}
	uki, err := n.st.Root.ESP.EFI.Cairn.For(localstorage.SlotB).Read()
	if err != nil || !bytes.Equal(uki, r.UKI) {
		t.Errorf("slot b's UKI = %q, %v; want the release's", uki, err)
	}
	b := n.record(t).GetB()
	if b.GetState() != private.SystemSlots_Slot_STAGED || b.GetVersion() != newer || b.GetVerity() != r.Artifact.Metadata.Verity || b.GetUkiPath() != "EFI/cairn/system-b.efi" {
		t.Errorf("record of slot b = %v, want STAGED %s with its verity and UKI", b, newer)
	}
	if left, _ := os.ReadDir(n.st.Root.Data.Update.FullPath()); len(left) != 0 {
		t.Errorf("the spool keeps %d files after the install", len(left))
	}
}

// TestInstallRefuses checks every refusal before a slot is written: the
// error names the check, and neither slot, the record nor the ESP changed.
func TestInstallRefuses(t *testing.T) {
	other, err := release.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		version string
		arch    string
		blocks  int
		prepare func(n *testNode, r *releasetest.Release)
		want    error
		message string
	}{
		{name: "no trusted key", prepare: func(n *testNode, _ *releasetest.Release) { n.keys = nil },
			want: ErrNoTrust, message: "cluster trusts no release key"},
		{name: "unknown key", prepare: func(n *testNode, _ *releasetest.Release) { n.keys = []release.PublicKey{other.Public()} },
			want: release.ErrUnknownKey},
		{name: "system image changed in the registry", prepare: func(n *testNode, r *releasetest.Release) {
			n.reg.Change(r.Artifact.System.Digest, func(b []byte) []byte { b[100] ^= 1; return b })
		}, want: release.ErrDigestMismatch, message: "system image"},
		{name: "UKI changed in the registry", prepare: func(n *testNode, r *releasetest.Release) {
			n.reg.Change(r.Artifact.UKI.Digest, func(b []byte) []byte { return append(b, '!') })
		}, want: release.ErrDigestMismatch, message: "UKI"},
		{name: "older", version: older, want: release.ErrDowngrade, message: "--allow-downgrade"},
		{name: "other architecture", arch: "arm64", want: release.ErrArchitecture},
		{name: "larger than the slot", blocks: 64, want: ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNode(t)
			blocks := tc.blocks
			if blocks == 0 {
				blocks = 40
			}
			r := n.push(t, cmpOr(tc.version, newer), cmpOr(tc.arch, "amd64"), blocks)
			if tc.prepare != nil {
				tc.prepare(n, r)
			}
			before := n.hashes(t)
			_, err := n.inst.Install(context.Background(), Request{Reference: r.Reference}, func(Progress) {})
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("Install: %v, want %v saying %q", err, tc.want, tc.message)
			}
			t.Logf("refused: %v", err)
			after := n.hashes(t)
			for s := range before {
				if before[s] != after[s] {
					t.Errorf("slot %s changed", s)
				}
			}
			if exists, _ := n.st.Root.ESP.Cairn.SystemSlots.Exists(); exists {
				t.Errorf("the record of the slots was written: %v", n.record(t))
			}
			if exists, _ := n.st.Root.ESP.EFI.Cairn.For(localstorage.SlotB).Exists(); exists {
				t.Errorf("slot b's UKI was written")
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestInstallAllowDowngrade installs an older release when asked to.
func TestInstallAllowDowngrade(t *testing.T) {
	n := newTestNode(t)
	r := n.push(t, older, "amd64", 8)
	res, err := n.inst.Install(context.Background(), Request{Reference: r.Reference, AllowDowngrade: true}, func(Progress) {})
	if err != nil || res.Version != older {
		t.Fatalf("Install with AllowDowngrade = %+v, %v; want %s installed", res, err, older)
	}
}

// TestInstallBusy refuses a second install while one runs.
func TestInstallBusy(t *testing.T) {
	n := newTestNode(t)
	n.inst.busy.Lock()
	defer n.inst.busy.Unlock()
	if _, err := n.inst.Install(context.Background(), Request{Reference: "x/y:z"}, func(Progress) {}); !errors.Is(err, ErrBusy) {
		t.Fatalf("Install during another: %v, want ErrBusy", err)
	}
}

// TestCheckSlot reads back a slot whose data or stored tree differs from
// what the release names.
func TestCheckSlot(t *testing.T) {
	sys, params := releasetest.SystemImage(t, 20, []byte("salt"))
	for _, tc := range []struct {
		name string
		flip int // byte to flip; -1 none
		want error
	}{
		{"as written", -1, nil},
		{"a data byte", 5 * verity.BlockSize, ErrReadBack},
		{"a tree byte", int(params.HashOffset) + 7, ErrReadBack},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := bytes.Clone(sys)
			if tc.flip >= 0 {
				img[tc.flip] ^= 1
			}
			p := filepath.Join(t.TempDir(), "slot")
			if err := os.WriteFile(p, append(img, make([]byte, verity.BlockSize)...), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := checkSlot(p, params); !errors.Is(err, tc.want) {
				t.Errorf("checkSlot: %v, want %v", err, tc.want)
			}
		})
	}
}
