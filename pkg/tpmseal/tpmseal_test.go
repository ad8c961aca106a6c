package tpmseal

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-tpm/tpm2"
)

func randomSecret(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("reading random bytes: %v", err)
	}
	return b
}

func mustSeal(t testing.TB, tpm *TPM, secret []byte) []byte {
	t.Helper()
	blob, err := tpm.Seal(secret)
	if err != nil {
		t.Fatalf("Seal(%d bytes): %v", len(secret), err)
	}
	return blob
}

func TestSealUnseal(t *testing.T) {
	tpm := newSWTPM(t).open()
	for _, n := range []int{1, 32, 129, 4096, MaxSecretSize} {
		secret := randomSecret(t, n)
		blob := mustSeal(t, tpm, secret)
		// A byte or two occurs in any blob by chance; a longer secret not.
		if n >= 16 && bytes.Contains(blob, secret) {
			t.Errorf("Seal(%d bytes): the blob holds the secret in clear", n)
		}
		got, err := tpm.Unseal(blob)
		if err != nil {
			t.Fatalf("Unseal(Seal(%d bytes)): %v", n, err)
		}
		if !bytes.Equal(got, secret) {
			t.Errorf("Unseal(Seal(%x)) = %x", secret, got)
		}
	}
}

func TestSealRefusesSizes(t *testing.T) {
	tpm := newSWTPM(t).open()
	for _, n := range []int{0, MaxSecretSize + 1} {
		if _, err := tpm.Seal(make([]byte, n)); err == nil {
			t.Errorf("Seal(%d bytes) succeeded, want an error", n)
		}
	}
}

// TestUnsealAfterRestart proves that nothing needs to persist in the TPM:
// a TPM that lost every transient object (a reboot) still unseals.
func TestUnsealAfterRestart(t *testing.T) {
	sw := newSWTPM(t)
	secret := randomSecret(t, 32)
	tpm := sw.open()
	blob := mustSeal(t, tpm, secret)
	tpm.Close()

	sw.stop()
	sw.start()
	got, err := sw.open().Unseal(blob)
	if err != nil {
		t.Fatalf("Unseal after restarting the TPM: %v", err)
	}
	if !bytes.Equal(got, secret) {
		t.Errorf("Unseal after restart = %x, want %x", got, secret)
	}
}

func TestOtherTPMCannotUnseal(t *testing.T) {
	blob := mustSeal(t, newSWTPM(t).open(), randomSecret(t, 32))
	got, err := newSWTPM(t).open().Unseal(blob)
	if !errors.Is(err, ErrWrongTPM) {
		t.Fatalf("Unseal on another TPM = %x, %v; want ErrWrongTPM", got, err)
	}
	t.Logf("as expected: %v", err)
}

// TestOtherTPMRefusesForgedName proves that the TPM itself refuses a blob of
// another TPM even when the blob claims this TPM's storage key: the name
// check only gives the clearer error first.
func TestOtherTPMRefusesForgedName(t *testing.T) {
	blob := mustSeal(t, newSWTPM(t).open(), randomSecret(t, 32))
	other := newSWTPM(t).open()
	srk := otherSRKName(t, other)

	b, err := parseBlob(blob)
	if err != nil {
		t.Fatalf("parseBlob(Seal()): %v", err)
	}
	b.parentName = srk
	forged, err := b.marshal()
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	got, err := other.Unseal(forged)
	if !errors.Is(err, ErrMalformedBlob) {
		t.Fatalf("Unseal(blob of another TPM, with this TPM's name) = %x, %v; want ErrMalformedBlob", got, err)
	}
	t.Logf("as expected: %v", err)
}

// otherSRKName returns the name of tpm's storage key.
func otherSRKName(t *testing.T, tpm *TPM) []byte {
	t.Helper()
	tpm.mu.Lock()
	defer tpm.mu.Unlock()
	srk, err := createSRK(tpm.tp)
	if err != nil {
		t.Fatalf("createSRK: %v", err)
	}
	defer srk.flush(tpm.tp)
	return srk.name.Buffer
}

func TestUnsealDamaged(t *testing.T) {
	tpm := newSWTPM(t).open()
	sealed := mustSeal(t, tpm, randomSecret(t, 32))
	b, err := parseBlob(sealed)
	if err != nil {
		t.Fatalf("parseBlob(Seal()): %v", err)
	}
	other, err := parseBlob(mustSeal(t, tpm, randomSecret(t, 32)))
	if err != nil {
		t.Fatalf("parseBlob(Seal()): %v", err)
	}

	// resealed re-encodes a modified blob with a valid checksum, as someone
	// forging a blob would.
	resealed := func(modify func(*blob)) []byte {
		c := &blob{
			parentName: bytes.Clone(b.parentName),
			public:     bytes.Clone(b.public),
			private:    bytes.Clone(b.private),
			ciphertext: bytes.Clone(b.ciphertext),
		}
		modify(c)
		out, err := c.marshal()
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		return out
	}
	flipped := func(i int) []byte {
		c := bytes.Clone(sealed)
		c[i] ^= 0x40
		return c
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"truncated", sealed[:len(sealed)-1]},
		{"trailing byte", append(bytes.Clone(sealed), 0)},
		{"magic", flipped(0)},
		{"version", flipped(len(blobMagic))},
		{"byte in the middle", flipped(len(sealed) / 2)},
		{"checksum", flipped(len(sealed) - 1)},
		{"private part, resealed", resealed(func(c *blob) { c.private[len(c.private)-1] ^= 1 })},
		{"public part of another blob", resealed(func(c *blob) { c.public = other.public })},
		{"private part of another blob", resealed(func(c *blob) { c.private = other.private })},
		{"ciphertext, resealed", resealed(func(c *blob) { c.ciphertext[20] ^= 1 })},
		{"ciphertext of another blob", resealed(func(c *blob) { c.ciphertext = other.ciphertext })},
	} {
		got, err := tpm.Unseal(tc.data)
		if !errors.Is(err, ErrMalformedBlob) {
			t.Errorf("Unseal(%s) = %x, %v; want ErrMalformedBlob", tc.name, got, err)
			continue
		}
		t.Logf("%s: %v", tc.name, err)
	}
}

// TestSecretNeverOnTheBus records every command and response and checks
// that the data key crosses the bus only encrypted (the secret itself never
// goes to the TPM), and that the check would see a key sent in clear.
func TestSecretNeverOnTheBus(t *testing.T) {
	sw := newSWTPM(t)
	rec := &recorder{TPMCloser: sw.transport()}
	tpm := openTransport(rec)
	defer tpm.Close()

	key := randomSecret(t, dataKeySize)
	b, err := tpm.sealKey(key, nil)
	if err != nil {
		t.Fatalf("sealKey: %v", err)
	}
	got, _, err := tpm.unsealKey(b)
	if err != nil {
		t.Fatalf("unsealKey: %v", err)
	}
	if !bytes.Equal(got, key) {
		t.Fatalf("unsealKey(sealKey(%x)) = %x", key, got)
	}
	if rec.saw(key) {
		t.Errorf("the data key crossed the bus in clear")
	}
	secret := randomSecret(t, 64)
	if _, err := tpm.Unseal(mustSeal(t, tpm, secret)); err != nil {
		t.Fatalf("Unseal: %v", err)
	}
	if rec.saw(secret) {
		t.Errorf("the secret crossed the bus in clear")
	}

	// The control: the same object created with a plain password session
	// puts the secret on the bus as it is.
	clear := randomSecret(t, 32)
	srk, err := createSRK(rec)
	if err != nil {
		t.Fatalf("createSRK: %v", err)
	}
	defer srk.flush(rec)
	_, err = tpm2.Create{
		ParentHandle: tpm2.AuthHandle{Handle: srk.handle, Name: srk.name, Auth: tpm2.PasswordAuth(nil)},
		InSensitive: tpm2.TPM2BSensitiveCreate{Sensitive: &tpm2.TPMSSensitiveCreate{
			Data: tpm2.NewTPMUSensitiveCreate(&tpm2.TPM2BSensitiveData{Buffer: clear}),
		}},
		InPublic: tpm2.New2B(sealTemplate),
	}.Execute(rec)
	if err != nil {
		t.Fatalf("Create with a password session: %v", err)
	}
	if !rec.saw(clear) {
		t.Errorf("the recorder missed a secret sent in clear; the check above proves nothing")
	}
}

func TestClosed(t *testing.T) {
	tpm := newSWTPM(t).open()
	blob := mustSeal(t, tpm, []byte("x"))
	if err := tpm.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := tpm.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := tpm.Seal([]byte("x")); err == nil {
		t.Errorf("Seal after Close succeeded")
	}
	if _, err := tpm.Unseal(blob); err == nil {
		t.Errorf("Unseal after Close succeeded")
	}
}

func TestOpenWithoutTPM(t *testing.T) {
	dir := t.TempDir()
	if tpm, err := openPath(filepath.Join(dir, "tpmrm0")); !errors.Is(err, ErrNoTPM) {
		t.Errorf("openPath(absent) = %v, %v; want ErrNoTPM", tpm, err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tpm, err := openPath(file)
	if err == nil || errors.Is(err, ErrNoTPM) {
		t.Errorf("openPath(regular file) = %v, %v; want an error other than ErrNoTPM", tpm, err)
	}
}

func BenchmarkSeal(b *testing.B) {
	tpm := newSWTPM(b).open()
	secret := randomSecret(b, 32)
	for b.Loop() {
		mustSeal(b, tpm, secret)
	}
}

func BenchmarkUnseal(b *testing.B) {
	tpm := newSWTPM(b).open()
	blob := mustSeal(b, tpm, randomSecret(b, 32))
	for b.Loop() {
		if _, err := tpm.Unseal(blob); err != nil {
			b.Fatalf("Unseal: %v", err)
		}
	}
}

// TestReadPCR reads PCR 11 of a fresh TPM (zeros), extends it as
// systemd's stub does, and reads the extended value.
func TestReadPCR(t *testing.T) {
	sw := newSWTPM(t)
	tpm := sw.open()
	v, err := tpm.ReadPCR(11)
	if err != nil || v != [32]byte{} {
		t.Fatalf("ReadPCR(11) of a fresh TPM = %x, %v; want zeros", v, err)
	}
	digest := sha256.Sum256([]byte(".linux\x00"))
	if err := extendPCR(tpm.tp, 11, digest); err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(append(make([]byte, 32), digest[:]...))
	if v, err := tpm.ReadPCR(11); err != nil || v != want {
		t.Errorf("ReadPCR(11) after an extend = %x, %v; want %x", v, err, want)
	}
	if _, err := tpm.ReadPCR(24); err == nil {
		t.Error("ReadPCR(24) succeeded")
	}
}
