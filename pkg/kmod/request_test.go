package kmod

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// requestAlias adds to testAlias the kinds of names the kernel asks for
// through request_module.
const requestAlias = testAlias + `alias crypto-failover failover
alias net-pf-99 virtio_net
alias net-pf-99 button
alias fs-virt* virtio
alias char-major-10-[0-9]* evdev
`

func newRequestLoader(t *testing.T, k *fakeKernel) *Loader {
	t.Helper()
	idx, err := Open(writeModuleDir(t, testDep, requestAlias, testBuiltin))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return NewLoader(idx, WithLoadFunc(k.load))
}

func TestResolve(t *testing.T) {
	idx, err := Open(writeModuleDir(t, testDep, requestAlias, testBuiltin))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	for _, tc := range []struct {
		name string
		want []string
	}{
		{"virtio_pci", []string{"virtio_pci"}},
		{"virtio-pci", []string{"virtio_pci"}}, // module names take '-' for '_'
		{"ext4", []string{"ext4"}},             // built in
		{"crypto-failover", []string{"failover"}},
		{"crypto_failover", []string{"failover"}}, // so do aliases
		{"net-pf-99", []string{"virtio_net", "button"}},
		{"fs-virtiofs", []string{"virtio"}},
		{"char-major-10-5", []string{"evdev"}},
		{"char-major-10-x", nil},
		{"kernel/virtio", nil}, // a path names no module
		{"crypto-xts(aes)-all", nil},
		{"", nil},
	} {
		if got := idx.Resolve(tc.name); !slices.Equal(got, tc.want) {
			t.Errorf("Resolve(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestRequest(t *testing.T) {
	k := &fakeKernel{}
	l := newRequestLoader(t, k)
	for _, name := range []string{"crypto-failover", "ext4", "fs-virtiofs", "crypto-failover"} {
		if err := l.Request(name); err != nil {
			t.Errorf("Request(%q) = %v, want nil", name, err)
		}
	}
	if diff := cmp.Diff([]string{"failover", "virtio"}, l.Loaded()); diff != "" {
		t.Errorf("Loaded() (-want +got):\n%s", diff)
	}
	if err := l.Request("crypto-xts(aes)"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Request(crypto-xts(aes)) = %v, want %v", err, ErrNotFound)
	}
}

func TestRequestSomeModulesFail(t *testing.T) {
	// The first module of the alias lacks its hardware; the second loads.
	k := &fakeKernel{fail: map[string]error{"virtio_net": unix.ENODEV}}
	l := newRequestLoader(t, k)
	if err := l.Request("net-pf-99"); err != nil {
		t.Errorf("Request(net-pf-99) = %v, want nil: button loaded", err)
	}
	if !slices.Contains(l.Loaded(), "button") {
		t.Errorf("Loaded() = %q, want it to include button", l.Loaded())
	}

	k = &fakeKernel{fail: map[string]error{"virtio_net": unix.ENODEV, "button": unix.ENOEXEC}}
	l = newRequestLoader(t, k)
	err := l.Request("net-pf-99")
	if !errors.Is(err, unix.ENODEV) || !errors.Is(err, unix.ENOEXEC) {
		t.Fatalf("Request(net-pf-99) = %v, want both failures", err)
	}
	if !strings.Contains(err.Error(), "net-pf-99") {
		t.Errorf("Request(net-pf-99) = %v, want the error to name the request", err)
	}
}

func TestUnderscores(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"crypto-ecb", "crypto_ecb"},
		{"crypto-xts(aes)-all", "crypto_xts(aes)_all"},
		{"char-major-10-[0-9]*", "char_major_10_[0-9]*"},
		{"a[-x]-b", "a[-x]_b"},
		{"a[x-", "a[x-"},
		{"a-[x-", "a_[x-"},
		{"plain", "plain"},
		{"", ""},
	} {
		if got := underscores(tc.in); got != tc.want {
			t.Errorf("underscores(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
