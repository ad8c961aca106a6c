package network

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"cairn.dev/cairn/pkg/netnstest"
)

// readSysctl reads the sysctl name (a path under /proc/sys) as the calling
// thread's namespace sees it.
func readSysctl(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestSysctlsInNamespace checks that the service sets tcp_retries2 in the
// namespace it configures, and leaves the machine's namespace alone.
func TestSysctlsInNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	host := readSysctl(t, tcpRetries2Path)
	ns := netnstest.New(t)
	var before string
	if err := netnstest.Do(ns, func() error { before = readSysctl(t, tcpRetries2Path); return nil }); err != nil {
		t.Fatal(err)
	}
	if before == strconv.Itoa(tcpRetries2) {
		t.Fatalf("a new namespace already has tcp_retries2 = %s; the test would prove nothing", before)
	}
	s := New(Config{Namespace: ns})
	if err := s.setSysctls(); err != nil {
		t.Fatal(err)
	}
	var after string
	if err := netnstest.Do(ns, func() error { after = readSysctl(t, tcpRetries2Path); return nil }); err != nil {
		t.Fatal(err)
	}
	if after != strconv.Itoa(tcpRetries2) {
		t.Errorf("tcp_retries2 in the service's namespace = %s, want %d", after, tcpRetries2)
	}
	if got := readSysctl(t, tcpRetries2Path); got != host {
		t.Errorf("tcp_retries2 of the machine's namespace changed from %s to %s", host, got)
	}
}
