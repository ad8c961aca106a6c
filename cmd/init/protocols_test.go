package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestProtocols writes the protocols file and reads it back as the C
// library does (name, number, aliases; # starts a comment): each protocol
// kube-proxy names in its nftables elements (the Service protocols,
// lowercase) has the number the kernel stores, and no name or number is
// listed twice.
func TestProtocols(t *testing.T) {
	path := filepath.Join(t.TempDir(), "etc", "protocols")
	for range 2 { // written again, it replaces the file
		if err := writeProtocols(path); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]int{}
	byNumber := map[int]string{}
	for line := range strings.Lines(string(b)) {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 2 {
			t.Fatalf("line %q has no number", line)
		}
		n, err := strconv.Atoi(f[1])
		if err != nil || n < 0 || n > 255 {
			t.Fatalf("line %q: number %q is not a protocol number", line, f[1])
		}
		if _, dup := byName[f[0]]; dup {
			t.Errorf("protocol %s listed twice", f[0])
		}
		if other, dup := byNumber[n]; dup {
			t.Errorf("number %d listed for %s and %s", n, other, f[0])
		}
		byName[f[0]], byNumber[n] = n, f[0]
	}
	for name, want := range map[string]int{"tcp": 6, "udp": 17, "sctp": 132, "icmp": 1, "ipv6-icmp": 58} {
		if got, ok := byName[name]; !ok || got != want {
			t.Errorf("protocol %s = %d (listed: %t), want %d", name, got, ok, want)
		}
	}
}
