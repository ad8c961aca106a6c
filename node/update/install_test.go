package update_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"cairn.dev/cairn/node/localstorage"
	"cairn.dev/cairn/node/update"
	"cairn.dev/cairn/node/update/updatetest"
	"cairn.dev/cairn/pkg/release"
	"cairn.dev/cairn/pkg/release/releasetest"
	"cairn.dev/cairn/proto/private"
)

const (
	newer = "0.0.0-20260601000000-0123456789ab"
	older = "0.0.0-20250601000000-0123456789ab"
)

// TestInstall installs a release into slot b and checks every place it
// left something: the slot, the UKI, the record, and the spool emptied.
func TestInstall(t *testing.T) {
	n := updatetest.New(t)
	r := n.PushFor(t, newer, "amd64", 40)
	before := n.Hashes(t)
	var steps []string
	res, err := n.Installer.Install(context.Background(), update.Request{Reference: r.Reference}, func(p update.Progress) {
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
	for _, want := range []string{update.StepVerify, "downloading the system image", "writing slot b", "reading back slot b", update.StepUKI, update.StepDone} {
		if !slices.Contains(steps, want) {
			t.Errorf("steps %q lack %q", steps, want)
		}
	}
	got, err := os.ReadFile(n.Slots[localstorage.SlotB])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:len(r.System)], r.System) {
		t.Errorf("slot b does not start with the release's system image")
	}
	if after := n.Hashes(t); after[localstorage.SlotA] != before[localstorage.SlotA] {
		t.Errorf("the running slot a changed")
	}
	uki, err := n.Storage.Root.ESP.EFI.Cairn.For(localstorage.SlotB).Read()
	if err != nil || !bytes.Equal(uki, r.UKI) {
		t.Errorf("slot b's UKI = %q, %v; want the release's", uki, err)
	}
	b := n.Record(t).GetB()
	if b.GetState() != private.SystemSlots_Slot_STAGED || b.GetVersion() != newer || b.GetVerity() != r.Artifact.Metadata.Verity || b.GetUkiPath() != "EFI/cairn/system-b.efi" {
		t.Errorf("record of slot b = %v, want STAGED %s with its verity and UKI", b, newer)
	}
	if left, _ := os.ReadDir(n.Storage.Root.Data.Update.FullPath()); len(left) != 0 {
		t.Errorf("the spool keeps %d files after the install", len(left))
	}
	slots, err := n.Installer.Slots()
	if err != nil {
		t.Fatal(err)
	}
	want := []update.SlotInfo{
		{Slot: localstorage.SlotA, Running: true, State: private.SystemSlots_Slot_GOOD, Version: updatetest.Running},
		{Slot: localstorage.SlotB, State: private.SystemSlots_Slot_STAGED, Version: newer, Digest: r.Artifact.Manifest.Descriptor.Digest},
	}
	if !slices.Equal(slots, want) {
		t.Errorf("Slots() = %+v, want %+v", slots, want)
	}
}

// TestInstallRefuses checks every refusal before a slot is written: the
// error names the check, and neither slot, the record nor the ESP changed.
func TestInstallRefuses(t *testing.T) {
	other := releasetest.PrivateKey(7)
	for _, tc := range []struct {
		name    string
		version string
		arch    string
		blocks  int
		prepare func(n *updatetest.Node, r *releasetest.Release)
		want    error
		message string
	}{
		{name: "no trusted key", prepare: func(n *updatetest.Node, _ *releasetest.Release) { n.Trust(false) },
			want: update.ErrNoTrust, message: "cluster trusts no release key"},
		{name: "unknown key", prepare: func(n *updatetest.Node, _ *releasetest.Release) { n.Key = other },
			want: release.ErrUnknownKey},
		{name: "system image changed in the registry", prepare: func(n *updatetest.Node, r *releasetest.Release) {
			n.Registry.Change(r.Artifact.System.Digest, func(b []byte) []byte { b[100] ^= 1; return b })
		}, want: release.ErrDigestMismatch, message: "system image"},
		{name: "UKI changed in the registry", prepare: func(n *updatetest.Node, r *releasetest.Release) {
			n.Registry.Change(r.Artifact.UKI.Digest, func(b []byte) []byte { return append(b, '!') })
		}, want: release.ErrDigestMismatch, message: "UKI"},
		{name: "older", version: older, want: release.ErrDowngrade, message: "--allow-downgrade"},
		{name: "other architecture", arch: "arm64", want: release.ErrArchitecture},
		{name: "larger than the slot", blocks: updatetest.SlotSize / 4096, want: update.ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := updatetest.New(t)
			blocks := tc.blocks
			if blocks == 0 {
				blocks = 40
			}
			r := n.PushFor(t, cmpOr(tc.version, newer), cmpOr(tc.arch, "amd64"), blocks)
			if tc.prepare != nil {
				tc.prepare(n, r)
			}
			before := n.Hashes(t)
			_, err := n.Installer.Install(context.Background(), update.Request{Reference: r.Reference}, func(update.Progress) {})
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("Install: %v, want %v saying %q", err, tc.want, tc.message)
			}
			t.Logf("refused: %v", err)
			after := n.Hashes(t)
			for s := range before {
				if before[s] != after[s] {
					t.Errorf("slot %s changed", s)
				}
			}
			if exists, _ := n.Storage.Root.ESP.Cairn.SystemSlots.Exists(); exists {
				t.Errorf("the record of the slots was written: %v", n.Record(t))
			}
			if exists, _ := n.Storage.Root.ESP.EFI.Cairn.For(localstorage.SlotB).Exists(); exists {
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
	n := updatetest.New(t)
	r := n.Push(t, older)
	res, err := n.Installer.Install(context.Background(), update.Request{Reference: r.Reference, AllowDowngrade: true}, func(update.Progress) {})
	if err != nil || res.Version != older {
		t.Fatalf("Install with AllowDowngrade = %+v, %v; want %s installed", res, err, older)
	}
}

// TestInstallFromTheNode installs releases whose system image a slot of
// the node holds already: such an image is not downloaded (the registry's
// copy is spoiled to prove it) unless the slot's copy is not whole.
func TestInstallFromTheNode(t *testing.T) {
	spoil := func(b []byte) []byte { b[100] ^= 1; return b }
	for _, tc := range []struct {
		name string
		// prepare puts the release's system image on the node.
		prepare  func(t *testing.T, n *updatetest.Node, system []byte)
		spoiled  bool
		steps    []string
		notSteps []string
	}{
		{
			name: "the running slot holds it",
			prepare: func(t *testing.T, n *updatetest.Node, system []byte) {
				writeAt(t, n.Slots[localstorage.SlotA], 0, system)
			},
			spoiled:  true,
			steps:    []string{"copying slot a to slot b", "reading back slot b"},
			notSteps: []string{"downloading the system image", "writing slot b"},
		},
		{
			name: "the slot to write holds it",
			prepare: func(t *testing.T, n *updatetest.Node, system []byte) {
				writeAt(t, n.Slots[localstorage.SlotB], 0, system)
			},
			spoiled:  true,
			steps:    []string{"reading back slot b, which may hold the system image already"},
			notSteps: []string{"downloading the system image", "writing slot b", "copying slot a to slot b"},
		},
		{
			name: "the running slot's copy is changed below its top block",
			prepare: func(t *testing.T, n *updatetest.Node, system []byte) {
				changed := bytes.Clone(system)
				changed[5] ^= 1 // data block 0: the tree's top still matches
				writeAt(t, n.Slots[localstorage.SlotA], 0, changed)
			},
			steps: []string{"copying slot a to slot b", "downloading the system image", "writing slot b"},
		},
		{
			name: "the slot to write's copy is changed below its top block",
			prepare: func(t *testing.T, n *updatetest.Node, system []byte) {
				changed := bytes.Clone(system)
				changed[5] ^= 1
				writeAt(t, n.Slots[localstorage.SlotB], 0, changed)
			},
			steps:    []string{"reading back slot b, which may hold the system image already", "downloading the system image", "writing slot b"},
			notSteps: []string{"copying slot a to slot b"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := updatetest.New(t)
			r := n.PushFor(t, newer, "amd64", 40)
			tc.prepare(t, n, r.System)
			if tc.spoiled {
				n.Registry.Change(r.Artifact.System.Digest, spoil)
			}
			runningBefore := n.Hashes(t)[localstorage.SlotA]
			var steps []string
			_, err := n.Installer.Install(context.Background(), update.Request{Reference: r.Reference}, func(p update.Progress) {
				if !slices.Contains(steps, p.Step) {
					steps = append(steps, p.Step)
				}
			})
			t.Logf("steps: %q", steps)
			if err != nil {
				t.Fatalf("Install: %v", err)
			}
			for _, want := range tc.steps {
				if !slices.Contains(steps, want) {
					t.Errorf("steps lack %q", want)
				}
			}
			for _, not := range tc.notSteps {
				if slices.Contains(steps, not) {
					t.Errorf("steps include %q", not)
				}
			}
			got, err := os.ReadFile(n.Slots[localstorage.SlotB])
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[:len(r.System)], r.System) {
				t.Errorf("slot b does not start with the release's system image")
			}
			if n.Hashes(t)[localstorage.SlotA] != runningBefore {
				t.Errorf("the running slot a changed")
			}
			if b := n.Record(t).GetB(); b.GetState() != private.SystemSlots_Slot_STAGED || b.GetVerity() != r.Artifact.Metadata.Verity {
				t.Errorf("record of slot b = %v, want STAGED with the release's verity", b)
			}
			if uki, err := n.Storage.Root.ESP.EFI.Cairn.For(localstorage.SlotB).Read(); err != nil || !bytes.Equal(uki, r.UKI) {
				t.Errorf("slot b's UKI = %q, %v; want the release's", uki, err)
			}
		})
	}
}

// writeAt writes b into the file at path at off.
func writeAt(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}
