package cmdline

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Cmdline
	}{
		{"", nil},
		{"  \n", nil},
		{"console=ttyS0 panic=-1 quiet\n", Cmdline{
			{"console", "ttyS0", true}, {"panic", "-1", true}, {"quiet", "", false},
		}},
		{`foo="a b  c" bar= "baz=x y" -- cairn.log=warning`, Cmdline{
			{"foo", "a b  c", true}, {"bar", "", true}, {"baz", "x y", true}, {"cairn.log", "warning", true},
		}},
		{`a="unterminated b c`, Cmdline{{"a", "unterminated b c", true}}},
		{"k=v=w\tx", Cmdline{{"k", "v=w", true}, {"x", "", false}}},
	} {
		if diff := cmp.Diff(tc.want, Parse(tc.in)); diff != "" {
			t.Errorf("Parse(%q) mismatch (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestFlag(t *testing.T) {
	c := Parse("cairn.test.root_fail cairn.a=0 cairn.b=true cairn.c=maybe cairn.d=1 cairn.d=0")
	for _, tc := range []struct {
		key  string
		want bool
	}{
		{"cairn.test.root-fail", true},
		{"cairn.test.root_fail", true},
		{"cairn.a", false},
		{"cairn.b", true},
		{"cairn.c", false},
		{"cairn.d", false}, // the last one wins
		{"cairn.absent", false},
	} {
		if got := c.Flag(tc.key); got != tc.want {
			t.Errorf("Flag(%q) = %v, want %v", tc.key, got, tc.want)
		}
	}
}

func TestLookup(t *testing.T) {
	c := Parse("cairn.log=info console=tty0 cairn.log=warning")
	p, ok := c.Lookup("cairn.log")
	if !ok || p.Value != "warning" {
		t.Errorf("Lookup(%q) = %q, %v, want %q, true", "cairn.log", p.Value, ok, "warning")
	}
	if _, ok := c.Lookup("nope"); ok {
		t.Errorf("Lookup(%q) found something, want nothing", "nope")
	}
}

func FuzzParse(f *testing.F) {
	f.Add(`console=ttyS0 foo="a b" "x=y z" -- k`)
	f.Fuzz(func(t *testing.T, in string) {
		for _, p := range Parse(in) {
			if p.Key == "--" && !p.HasValue {
				t.Errorf("Parse(%q) kept the -- separator", in)
			}
			if !strings.Contains(in, p.Key) {
				t.Errorf("Parse(%q) made up key %q", in, p.Key)
			}
		}
	})
}
