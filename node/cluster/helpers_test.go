package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"cairn.dev/cairn/node/localstorage"
)

// fakeTPM seals by XOR with a per-machine key and a MAC, standing in for a
// TPM bound to one machine.
type fakeTPM struct {
	machine []byte
	// marked is the sealing marker, which lives in the TPM.
	marked atomic.Bool
	// bound makes it say it binds seals; unseals and ended count Unseal
	// and EndUnsealing calls.
	bound   bool
	unseals atomic.Int32
	ended   atomic.Int32
	// rebind makes Rebind seal again; rebinds counts it did.
	rebind  atomic.Bool
	rebinds atomic.Int32
}

func newFakeTPM() *fakeTPM {
	k := make([]byte, 32)
	rand.Read(k)
	return &fakeTPM{machine: k}
}

func (f *fakeTPM) open() (sealer, error) { return f, nil }

func (f *fakeTPM) mac(b []byte) []byte {
	h := sha256.Sum256(append(bytes.Clone(f.machine), b...))
	return h[:]
}

func (f *fakeTPM) Seal(secret []byte) ([]byte, error) {
	out := make([]byte, len(secret))
	for i := range secret {
		out[i] = secret[i] ^ f.machine[i%len(f.machine)]
	}
	return append(f.mac(secret), out...), nil
}

func (f *fakeTPM) Unseal(blob []byte) ([]byte, error) {
	f.unseals.Add(1)
	if len(blob) < sha256.Size {
		return nil, errors.New("fake TPM: blob too short")
	}
	out := make([]byte, len(blob)-sha256.Size)
	for i := range out {
		out[i] = blob[sha256.Size+i] ^ f.machine[i%len(f.machine)]
	}
	if !bytes.Equal(f.mac(out), blob[:sha256.Size]) {
		return nil, errors.New("fake TPM: integrity check failed")
	}
	return out, nil
}

func (f *fakeTPM) SetSealingMarker() error { f.marked.Store(true); return nil }

func (f *fakeTPM) SealingMarker() (bool, error) { return f.marked.Load(), nil }

func (f *fakeTPM) Bound() bool { return f.bound }

// Rebind seals blob again when rebind is set, as a TPM whose binding the
// blob does not trust would.
func (f *fakeTPM) Rebind(blob []byte) ([]byte, bool, error) {
	if !f.rebind.Load() {
		return blob, false, nil
	}
	secret, err := f.Unseal(blob)
	if err != nil {
		return nil, false, err
	}
	out, err := f.Seal(secret)
	f.rebinds.Add(1)
	return out, true, err
}

func (f *fakeTPM) EndUnsealing() error { f.ended.Add(1); return nil }

func (f *fakeTPM) Close() error { return nil }

// noTPM is a machine without a TPM.
func noTPM() (sealer, error) { return nil, errNoTPM }

// fakeStorage "mounts" the data partition by using a directory: the tree
// of a localstorage.Storage placed under a temporary directory, and a
// header file beside it that remembers the keys, so that a wrong key is
// refused as on a real disk.
type fakeStorage struct {
	st     *localstorage.Storage
	header string

	mu      sync.Mutex
	mounted bool
	calls   []string
	// failNext, when set, fails the next MountNew or MountNewInsecure;
	// failNew fails every one while it is set; failExisting fails the next
	// MountExisting.
	failNext, failNew, failExisting error
}

func newFakeStorage(t testing.TB) *fakeStorage {
	t.Helper()
	// Not t.TempDir: the role server's etcd puts a unix socket under the
	// root, and test names make paths longer than a socket's 108 bytes.
	dir, err := os.MkdirTemp("", "cairn-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	st, err := localstorage.New(localstorage.Config{Root: filepath.Join(dir, "root")})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Root.ESP.Cairn.MkdirAll(0o700); err != nil {
		t.Fatal(err)
	}
	if err := st.Root.Ephemeral.MkdirAll(0o700); err != nil {
		t.Fatal(err)
	}
	return &fakeStorage{st: st, header: filepath.Join(dir, "data-header")}
}

// reboot forgets the mount, as a new boot would.
func (f *fakeStorage) reboot() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mounted = false
	f.calls = nil
}

func (f *fakeStorage) record(call string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
	if f.mounted {
		return fmt.Errorf("%s: already mounted", call)
	}
	return nil
}

// format sets the data partition up for header, on behalf of the boot
// whose context is ctx. A boot whose power was cut (its context ended)
// writes nothing: a test clears failNew only after it cut the power, so an
// earlier boot still retrying cannot format behind the next one's back.
func (f *fakeStorage) format(ctx context.Context, header []byte) error {
	f.mu.Lock()
	err := f.failNext
	f.failNext = nil
	if f.failNew != nil {
		err = f.failNew
	}
	f.mu.Unlock()
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("this boot has ended: %w", err)
	}
	if err := os.RemoveAll(f.st.Root.Data.FullPath()); err != nil {
		return err
	}
	if err := os.MkdirAll(f.st.Root.Data.FullPath(), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(f.header, header, 0o600); err != nil {
		return err
	}
	f.mu.Lock()
	f.mounted = true
	f.mu.Unlock()
	return nil
}

func (f *fakeStorage) open(header []byte) error {
	got, err := os.ReadFile(f.header)
	if err != nil {
		return fmt.Errorf("no data partition: %w", err)
	}
	if !bytes.Equal(got, header) {
		return localstorage.ErrWrongKey
	}
	f.mu.Lock()
	f.mounted = true
	f.mu.Unlock()
	return nil
}

func keyHeader(nodeKey, clusterKey []byte) []byte {
	if len(nodeKey) != localstorage.KeySize || len(clusterKey) != localstorage.KeySize {
		return nil
	}
	k := make([]byte, len(nodeKey))
	for i := range k {
		k[i] = nodeKey[i] ^ clusterKey[i]
	}
	h := sha256.Sum256(append([]byte("encrypted"), k...))
	return h[:]
}

func (f *fakeStorage) MountNew(ctx context.Context, nodeKey, clusterKey []byte) error {
	if err := f.record("MountNew"); err != nil {
		return err
	}
	h := keyHeader(nodeKey, clusterKey)
	if h == nil {
		return errors.New("bad key length")
	}
	return f.format(ctx, h)
}

func (f *fakeStorage) MountExisting(nodeKey, clusterKey []byte) error {
	if err := f.record("MountExisting"); err != nil {
		return err
	}
	f.mu.Lock()
	err := f.failExisting
	f.failExisting = nil
	f.mu.Unlock()
	if err != nil {
		return err
	}
	h := keyHeader(nodeKey, clusterKey)
	if h == nil {
		return localstorage.ErrWrongKey
	}
	return f.open(h)
}

func (f *fakeStorage) MountNewInsecure(ctx context.Context) error {
	if err := f.record("MountNewInsecure"); err != nil {
		return err
	}
	return f.format(ctx, []byte("insecure"))
}

func (f *fakeStorage) MountExistingInsecure() error {
	if err := f.record("MountExistingInsecure"); err != nil {
		return err
	}
	return f.open([]byte("insecure"))
}

func (f *fakeStorage) mountCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}
