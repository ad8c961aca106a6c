package kmod

import (
	"path"
	"strings"
	"testing"
)

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"", "", true},
		{"", "a", false},
		{"abc", "abc", true},
		{"abc", "abcd", false},
		{"*", "", true},
		{"*", "anything/at:all", true},
		{"a*", "a", true},
		{"a*c", "abbbc", true},
		{"a*c", "abbbcd", false},
		{"*ab", "abab", true},
		{"a**b", "ab", true},
		{"?", "", false},
		{"?", "x", true},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"[abc]", "b", true},
		{"[abc]", "d", false},
		{"[a-f0-9]x", "7x", true},
		{"[!0-9]", "7", false},
		{"[!0-9]", "a", true},
		{"[^0-9]", "a", true},
		{"[]]", "]", true},
		{"[!]]", "]", false},
		{"[a-]", "-", true},
		{"[z-a]", "m", false},
		{"[abc", "[abc", true},
		{"[abc", "a", false},
		{`\*`, "*", true},
		{`\*`, "x", false},
		{`a\`, `a\`, true},
		{`[\]]`, "]", true},
		{"acpi*:PNP0C0C:*", "acpi:PNP0C0C:", true},
		{"acpi*:LNXPWRBN:*", "acpi:LNXPWRBN:", true},
		{"acpi*:LNXPWRBN:*", "acpi:LNXSYBUS:", false},
		{"pci:v00001AF4d00001000sv*sd*bc*sc*i*", "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00", true},
		{"pci:v00001AF4d00001000sv*sd*bc*sc*i*", "pci:v00001AF4d00001001sv00001AF4sd00000002bc01sc00i00", false},
		{"pci:v*d*sv*sd*bc01sc06i01*", "pci:v00008086d00002922sv00001AF4sd00001100bc01sc06i01", true},
		{"virtio:d00000001v*", "virtio:d00000001v00001AF4", true},
		{"input:b*v*p*e*-e*1,*k*74,*ra*m*l*s*f*w*", "input:b0019v0000p0001e0000-e0,1,k74,ramlsfw", true},
	} {
		if got := globMatch(tc.pattern, tc.s); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

func TestGlobNeedle(t *testing.T) {
	for _, tc := range []struct{ pattern, want string }{
		{"acpi*:PNP0C0C:*", ":PNP0C0C:"},
		{"pci:v*d*sv*sd*bc01sc06i01*", "bc01sc06i01"},
		{"a[bcdefgh]d", "a"},
		{"[abc", "[abc"},
		{`x\*yz`, "yz"},
		{"*", ""},
		{"", ""},
	} {
		if got := globNeedle(tc.pattern); got != tc.want {
			t.Errorf("globNeedle(%q) = %q, want %q", tc.pattern, got, tc.want)
		}
	}
}

func TestGlobPrefix(t *testing.T) {
	for _, tc := range []struct{ pattern, want string }{
		{"pci:v00008086d*", "pci:v00008086d"},
		{"acpi*:PNP0C0C:*", "acpi"},
		{"*foo", ""},
		{"?foo", ""},
		{"[ab]foo", ""},
		{"plain", "plain"},
		{`esc\*aped*`, "esc"},
	} {
		if got := globPrefix(tc.pattern); got != tc.want {
			t.Errorf("globPrefix(%q) = %q, want %q", tc.pattern, got, tc.want)
		}
	}
}

// FuzzGlob checks that matching never panics and agrees with path.Match on
// the patterns both understand the same way: no '/', no escapes, no '!'
// (path.Match knows only '^' for a complemented set) and no pattern that
// path.Match rejects (it has no literal '[' fallback). path.Match works on
// runes and glob on bytes, so only ASCII is compared.
func FuzzGlob(f *testing.F) {
	f.Add("a*c", "abbbc")
	f.Add("[a-f]?*", "b12")
	f.Add("[^x]*y", "zzy")
	f.Add("acpi*:PNP0C0C:*", "acpi:PNP0C0C:")
	f.Fuzz(func(t *testing.T, pattern, s string) {
		got := globMatch(pattern, s)
		if needle := globNeedle(pattern); got && !strings.Contains(s, needle) {
			t.Errorf("globMatch(%q, %q) = true, but %q lacks the needle %q", pattern, s, s, needle)
		}
		if !isASCII(pattern+s) || strings.ContainsAny(pattern+s, `/\!`) || strings.Contains(pattern, "[]") || strings.Contains(pattern, "[^]") {
			return
		}
		want, err := path.Match(pattern, s)
		if err != nil {
			return
		}
		if got != want {
			t.Errorf("globMatch(%q, %q) = %v, want %v (path.Match)", pattern, s, got, want)
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
