package kmod

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseAliases(t *testing.T) {
	in := `# Aliases extracted from modules themselves.
alias pci:v00001AF4d00001000sv*sd*bc*sc*i* virtio_pci
alias acpi*:LNXPWRBN:* button

alias fs-efivarfs efivarfs
alias pci:v*d*sv*sd*bc0Csc03i30* xhci-pci
`
	got, err := ParseAliases(strings.NewReader(in))
	if err != nil {
		t.Fatalf("ParseAliases: %v", err)
	}
	want := []Alias{
		{"pci:v00001AF4d00001000sv*sd*bc*sc*i*", "virtio_pci"},
		{"acpi*:LNXPWRBN:*", "button"},
		{"fs-efivarfs", "efivarfs"},
		{"pci:v*d*sv*sd*bc0Csc03i30*", "xhci_pci"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseAliases mismatch (-want +got):\n%s", diff)
	}
}

func TestParseAliasesRejects(t *testing.T) {
	for _, in := range []string{
		"alias onlypattern\n",
		"alias a b c\n",
		"options foo bar=1\n",
	} {
		if _, err := ParseAliases(strings.NewReader(in)); err == nil {
			t.Errorf("ParseAliases(%q) = nil error, want one", in)
		}
	}
}

func TestAliasIndexMatch(t *testing.T) {
	x := NewAliasIndex([]Alias{
		{"pci:v00001AF4d00001000sv*sd*bc*sc*i*", "virtio_pci"},
		{"pci:v00001AF4d*sv*sd*bc*sc*i*", "virtio_pci"},
		{"pci:v*d*sv*sd*bc01sc06i01*", "ahci"},
		{"acpi*:LNXPWRBN:*", "button"},
		{"acpi*:PNP0C0C:*", "button"},
		{"*:fallback", "catchall"},
		{"virtio:d00000001v*", "virtio_net"},
	})
	for _, tc := range []struct {
		modalias string
		want     []string
	}{
		{"pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00", []string{"virtio_pci"}},
		{"pci:v00008086d00002922sv00001AF4sd00001100bc01sc06i01", []string{"ahci"}},
		{"acpi:LNXPWRBN:", []string{"button"}},
		{"acpi:PNP0A08:PNP0A03:", nil},
		{"virtio:d00000001v00001AF4", []string{"virtio_net"}},
		{"x:fallback", []string{"catchall"}},
		{"", nil},
	} {
		if got := x.Match(tc.modalias); !slices.Equal(got, tc.want) {
			t.Errorf("Match(%q) = %q, want %q", tc.modalias, got, tc.want)
		}
	}
}

// TestAliasIndexAgreesWithBruteForce checks the prefix index against trying
// every pattern in turn on a synthetic alias set.
func TestAliasIndexAgreesWithBruteForce(t *testing.T) {
	aliases, devices := syntheticAliases(2000, 200)
	x := NewAliasIndex(aliases)
	for _, d := range devices {
		var want []string
		for _, a := range aliases {
			if globMatch(a.Pattern, d) && !slices.Contains(want, a.Module) {
				want = append(want, a.Module)
			}
		}
		if got := x.Match(d); !slices.Equal(got, want) {
			t.Errorf("Match(%q) = %q, want %q", d, got, want)
		}
	}
}

// syntheticAliases makes n alias patterns mixed roughly like a
// distribution kernel's (PCI and USB IDs, device tree compatibles, HID,
// ACPI IDs, a few PCI class matches) and m device modaliases, some of them
// matching.
func syntheticAliases(n, m int) ([]Alias, []string) {
	r := rand.New(rand.NewPCG(1, 2))
	var aliases []Alias
	for i := range n {
		mod := fmt.Sprintf("mod%d", i%(n/3+1))
		var p string
		switch k := i % 100; {
		case k < 40:
			p = fmt.Sprintf("pci:v%08Xd%08Xsv*sd*bc*sc*i*", r.IntN(64)+0x1000, r.IntN(4096))
		case k < 65:
			p = fmt.Sprintf("usb:v%04Xp%04Xd*dc*dsc*dp*ic*isc*ip*in*", r.IntN(256), r.IntN(4096))
		case k < 80:
			p = fmt.Sprintf("of:N*T*Cvendor%d,chip%d*", r.IntN(100), r.IntN(100))
		case k < 92:
			p = fmt.Sprintf("hid:b0003g*v%08Xp%08X", r.IntN(4096), r.IntN(4096))
		case k < 95:
			p = fmt.Sprintf("acpi*:PNP%04X:*", r.IntN(0x1000))
		case k < 96:
			p = fmt.Sprintf("pci:v*d*sv*sd*bc%02Xsc%02Xi%02X*", r.IntN(16), r.IntN(16), r.IntN(4))
		default:
			p = fmt.Sprintf("platform:serial%d", r.IntN(10))
		}
		aliases = append(aliases, Alias{Pattern: p, Module: mod})
	}
	var devices []string
	for i := range m {
		switch i % 3 {
		case 0:
			devices = append(devices, fmt.Sprintf("pci:v%08Xd%08Xsv00001AF4sd00001100bc%02Xsc%02Xi%02X",
				r.IntN(64)+0x1000, r.IntN(4096), r.IntN(16), r.IntN(16), r.IntN(4)))
		case 1:
			devices = append(devices, fmt.Sprintf("acpi:PNP%04X:", r.IntN(0x1000)))
		case 2:
			devices = append(devices, fmt.Sprintf("platform:serial%d", r.IntN(10)))
		}
	}
	return aliases, devices
}

// BenchmarkAliasMatch matches a machine's worth of modaliases against a
// distribution kernel's worth of alias patterns.
func BenchmarkAliasMatch(b *testing.B) {
	aliases, devices := syntheticAliases(30000, 300)
	x := NewAliasIndex(aliases)
	for b.Loop() {
		for _, d := range devices {
			x.Match(d)
		}
	}
}

// BenchmarkAliasIndexBuild measures compiling and indexing the patterns.
func BenchmarkAliasIndexBuild(b *testing.B) {
	aliases, _ := syntheticAliases(30000, 0)
	for b.Loop() {
		NewAliasIndex(aliases)
	}
}

func FuzzParseAliases(f *testing.F) {
	f.Add("alias pci:v00001AF4d00001000sv*sd*bc*sc*i* virtio_pci\n# comment\n\nalias acpi*:LNXPWRBN:* button\n")
	f.Add("alias [ ]\n")
	f.Fuzz(func(t *testing.T, in string) {
		aliases, err := ParseAliases(strings.NewReader(in))
		if err != nil {
			return
		}
		// Whatever parsed must index and match without trouble, and every
		// pattern without wildcards must match itself.
		x := NewAliasIndex(aliases)
		for _, a := range aliases {
			got := x.Match(a.Pattern)
			if !strings.ContainsAny(a.Pattern, `*?[\`) && !slices.Contains(got, a.Module) {
				t.Errorf("Match(%q) = %q, want it to include %q", a.Pattern, got, a.Module)
			}
		}
	})
}

// BenchmarkParseAliases measures reading a distribution-sized
// modules.alias.
func BenchmarkParseAliases(b *testing.B) {
	aliases, _ := syntheticAliases(30000, 0)
	var sb strings.Builder
	for _, a := range aliases {
		fmt.Fprintf(&sb, "alias %s %s\n", a.Pattern, a.Module)
	}
	in := sb.String()
	for b.Loop() {
		if _, err := ParseAliases(strings.NewReader(in)); err != nil {
			b.Fatal(err)
		}
	}
}
