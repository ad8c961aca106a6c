package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cairn.dev/cairn/node/roleserve"
	"cairn.dev/cairn/pkg/event/memory"
	"cairn.dev/cairn/pkg/supervisor"
)

// TestKexecPreloaded checks when PID 1 trusts an image loaded ahead: only
// when the kernel holds one and the core's stamp is that of the image on
// the ESP now.
func TestKexecPreloaded(t *testing.T) {
	dir := t.TempDir()
	image := filepath.Join(dir, "BOOTX64.EFI")
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		loaded  string // the kernel's word; "" leaves the file out
		stamped bool   // the core wrote the image's stamp
		replace bool   // the image is rewritten after the stamp
		want    bool
		why     string
	}{
		{name: "loaded ahead", loaded: "1\n", stamped: true, want: true},
		{name: "kernel holds none", loaded: "0\n", stamped: true, why: "no image was loaded ahead"},
		{name: "kernel without kexec", stamped: true, why: "when reading"},
		{name: "loaded without a stamp", loaded: "1\n", why: "no stamp"},
		{name: "image replaced", loaded: "1\n", stamped: true, replace: true, why: "was replaced since it was loaded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(filepath.Join(dir, "loaded"))
			os.Remove(filepath.Join(dir, "stamp"))
			if tc.loaded != "" {
				write("loaded", tc.loaded)
			}
			write("BOOTX64.EFI", "the image")
			if tc.stamped {
				fi, err := os.Stat(image)
				if err != nil {
					t.Fatal(err)
				}
				write("stamp", imageStamp(fi))
			}
			if tc.replace {
				write("BOOTX64.EFI", "the new, longer image")
			}
			got, why := kexecPreloaded(filepath.Join(dir, "loaded"), filepath.Join(dir, "stamp"), image)
			if got != tc.want || !strings.Contains(why, tc.why) {
				t.Errorf("kexecPreloaded = %v, %q; want %v, %q", got, why, tc.want, tc.why)
			}
		})
	}
}

// TestKexecPreload checks that the core loads the image only once the node
// has joined and settled, on a thread of the idle class, writes the stamp PID
// 1 reads, and writes none when the load fails.
func TestKexecPreload(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		wantStamp bool
	}{
		{name: "loaded", wantStamp: true},
		{name: "not booted from the ESP", err: errNotFromESP},
		{name: "load failed", err: unix.EPERM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stampFile := filepath.Join(t.TempDir(), "run", "kexec-loaded")
			policies := make(chan uint32, 1)
			load := func() (kexecLoad, error) {
				attr, err := unix.SchedGetAttr(0, 0)
				if err != nil {
					t.Errorf("reading the loading thread's scheduling class: %v", err)
					attr = &unix.SchedAttr{}
				}
				policies <- attr.Policy
				return kexecLoad{stamp: "20 1", how: "fake"}, tc.err
			}
			var membership memory.Value[*roleserve.Membership]
			const settle = 200 * time.Millisecond
			supervisor.TestHarness(t, (&kexecPreload{membership: &membership, settle: settle, load: load, stampFile: stampFile}).run)
			select {
			case <-policies:
				t.Fatal("loaded before the node joined")
			case <-time.After(100 * time.Millisecond):
			}
			joined := time.Now()
			membership.Set(&roleserve.Membership{})
			select {
			case p := <-policies:
				if d := time.Since(joined); d < settle {
					t.Errorf("loaded %v after the node joined, before it settled (%v)", d, settle)
				}
				if p != unix.SCHED_IDLE {
					t.Errorf("loaded in scheduling class %d, want SCHED_IDLE (%d)", p, unix.SCHED_IDLE)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("not loaded within 10 s of the node joining")
			}
			// The stamp is written after the load returns.
			deadline := time.Now().Add(10 * time.Second)
			var stamp []byte
			var err error
			for time.Now().Before(deadline) {
				if stamp, err = os.ReadFile(stampFile); err == nil || !tc.wantStamp {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			switch {
			case tc.wantStamp && string(stamp) != "20 1":
				t.Errorf("stamp %q, %v; want %q", stamp, err, "20 1")
			case !tc.wantStamp && !errors.Is(err, os.ErrNotExist):
				t.Errorf("a failed load left a stamp: %q, %v", stamp, err)
			}
		})
	}
}
