package logtree

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDNSplit(t *testing.T) {
	for _, tc := range []struct {
		dn   DN
		want []string
	}{
		{"", nil},
		{"root", []string{"root"}},
		{"root.network.dhcp", []string{"root", "network", "dhcp"}},
		{"a b.c-d", []string{"a b", "c-d"}},
	} {
		got, err := tc.dn.split()
		if err != nil {
			t.Errorf("DN(%q).split() failed: %v", tc.dn, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("DN(%q).split() mismatch (-want +got):\n%s", tc.dn, diff)
		}
	}
	for _, dn := range []DN{".", "a.", ".a", "a..b", "..", "a.b."} {
		if got, err := dn.split(); !errors.Is(err, errEmptyPart) {
			t.Errorf("DN(%q).split() = %q, %v, want errEmptyPart", dn, got, err)
		}
	}
}

func TestDNNormalized(t *testing.T) {
	for _, tc := range []struct {
		dn   DN
		want []string
	}{
		{"", []string{}},
		{".", []string{}},
		{"a", []string{"a"}},
		{"a..b.", []string{"a", "b"}},
		{".root.net", []string{"root", "net"}},
	} {
		if diff := cmp.Diff(tc.want, tc.dn.normalized()); diff != "" {
			t.Errorf("DN(%q).normalized() mismatch (-want +got):\n%s", tc.dn, diff)
		}
	}
}
