//go:build e2e

package e2e

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"cairn.dev/cairn/test/launch"
)

// modprobeLoaded matches the line /init's modprobe mode writes to the
// kernel log when it served a request by loading modules:
// "cairn-modprobe: loaded <modules> (for <names>) in <seconds>s".
var modprobeLoaded = regexp.MustCompile(`cairn-modprobe: loaded (.+) \(for (.+)\) in ([0-9.]+)s`)

// ecbServed matches the request of a CPU without AES-NI: the kernel
// builds the data partition's xts(aes) from xts over ecb(aes) and asks
// for "crypto-ecb".
var ecbServed = regexp.MustCompile(`cairn-modprobe: loaded (\S+ )*ecb( \S+)* \(for crypto-ecb\)`)

// TestNoAESNI forms an encrypted one-node cluster on qemu's qemu64 CPU,
// which has no AES-NI: dm-crypt's aes-xts-plain64 cannot come from
// aesni_intel, and the kernel builds it from the generic modules it asks
// for by name (crypto-xts, crypto-ecb) through request_module. /init's
// modprobe mode must serve those requests: the node bootstraps, mounts
// its encrypted data partition, and cairnctl lists it UP after taking
// ownership. Printed: the boot phases and every request served, with
// how long its modprobe run took.
func TestNoAESNI(t *testing.T) {
	s := newSuite(t, 1, 20*time.Minute)
	c := s.newCluster(1, 0, launch.WithCPU("qemu64"))
	n0 := c.Node(0)

	if err := c.Form(s.ctx); err != nil {
		t.Fatalf("forming the one-node cluster on qemu64: %v", err)
	}
	for _, p := range c.Phases() {
		s.step(p.Name, p.Duration)
	}
	vm := n0.VM()
	s.stepBootstrap(t, vm)

	nodes, err := c.ListNodes(s.ctx)
	if err != nil {
		t.Fatalf("node list: %v", err)
	}
	if len(nodes) != 1 || nodes[0].ID != n0.ID() || nodes[0].State != "UP" {
		t.Errorf("node list = %+v, want only %s, UP", nodes, n0.ID())
	}
	// Booted by OVMF without Secure Boot.
	s.checkBootSecurity(t, c, n0.ID(), "off")

	if l, ok := vm.Console().Find(0, ecbServed); ok {
		s.step("qemu start → ecb loaded for crypto-ecb", l.Time.Sub(vm.Started()))
	} else {
		t.Errorf("no console line says that modprobe mode loaded ecb for crypto-ecb (want a match of %v)", ecbServed)
	}
	for _, l := range vm.Console().Lines() {
		m := modprobeLoaded.FindStringSubmatch(l.Text)
		if m == nil {
			continue
		}
		t.Logf("served: %s", m[0])
		if sec, err := strconv.ParseFloat(m[3], 64); err == nil {
			s.step("modprobe run: "+m[2]+" → "+m[1], time.Duration(sec*float64(time.Second)))
		}
	}
	for _, bad := range []launch.Matcher{
		launch.Substring("Error allocating crypto tfm"),
		launch.Substring("DM_TABLE_LOAD"),
		launch.Substring("cairn-modprobe: gave up"),
	} {
		if l, ok := vm.Console().Find(0, bad); ok {
			t.Errorf("node 0 says %q", l.Text)
		}
	}
	assertNoPanic(t, vm)
}
