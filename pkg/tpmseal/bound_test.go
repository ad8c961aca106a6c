package tpmseal

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-tpm/tpm2"
)

// pcrKeys are three release PCR keys, made once per test binary: RSA key
// generation takes a while.
var pcrKeys = sync.OnceValue(func() [3]*rsa.PrivateKey {
	var keys [3]*rsa.PrivateKey
	for i := range keys {
		k, err := rsa.GenerateKey(rand.Reader, PCRKeyBits)
		if err != nil {
			panic(err)
		}
		keys[i] = k
	}
	return keys
})

// bootUKI measures uki into PCR 11 of a TPM just reset, as systemd's stub
// measures a UKI's sections, and returns the value it leaves there.
func bootUKI(t *testing.T, tpm *TPM, uki string) [sha256.Size]byte {
	t.Helper()
	if err := extendPCR(tpm.tp, 11, sha256.Sum256([]byte(uki))); err != nil {
		t.Fatal(err)
	}
	v, err := tpm.ReadPCR(11)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// signedBinding is what a UKI signed by key for PCR 11 values pcr11 gives
// the boot.
func signedBinding(t *testing.T, key *rsa.PrivateKey, pcr11 ...[sha256.Size]byte) *Binding {
	t.Helper()
	b := &Binding{Key: &key.PublicKey}
	for _, v := range pcr11 {
		file, err := SignPCR11(v, key)
		if err != nil {
			t.Fatal(err)
		}
		sigs, err := ParsePCRSignatures(file)
		if err != nil {
			t.Fatalf("ParsePCRSignatures(SignPCR11(...)): %v", err)
		}
		b.Signatures = append(b.Signatures, sigs...)
	}
	return b
}

// bind binds tpm with b.
func bind(t *testing.T, tpm *TPM, b *Binding) *TPM {
	t.Helper()
	if err := tpm.Bind(b); err != nil {
		t.Fatalf("Bind: %v", err)
	}
	return tpm
}

// restart restarts the software TPM, as a reboot through the firmware
// resets the PCRs, and opens it again.
func (s *swtpm) restart() *TPM {
	s.t.Helper()
	s.stop()
	s.start()
	return s.open()
}

// TestBoundSealFollowsSignedReleases seals bound in a boot of release A
// and unseals after a restart into A, and into release B, whose UKI
// carries only its own signature: no resealing for an update. A
// restart into an unsigned UKI cannot unseal.
func TestBoundSealFollowsSignedReleases(t *testing.T) {
	key := pcrKeys()[0]
	sw := newSWTPM(t)
	tpm := sw.open()
	a := bootUKI(t, tpm, "release A")
	bind(t, tpm, signedBinding(t, key, a))
	secret := randomSecret(t, 100)
	blob := mustSeal(t, tpm, secret)
	if !IsBound(blob) {
		t.Fatal("IsBound(blob of a bound TPM) = false")
	}
	if got, err := tpm.Unseal(blob); err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("Unseal in the boot that sealed = %x, %v", got, err)
	}

	tpm = sw.restart()
	bind(t, tpm, signedBinding(t, key, bootUKI(t, tpm, "release A")))
	if got, err := tpm.Unseal(blob); err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("Unseal after a restart into A = %x, %v", got, err)
	}

	tpm = sw.restart()
	b := bootUKI(t, tpm, "release B")
	bind(t, tpm, signedBinding(t, key, b))
	if got, err := tpm.Unseal(blob); err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("Unseal after an update to B = %x, %v", got, err)
	}

	// A UKI with another command line, carrying A's and B's signatures.
	tpm = sw.restart()
	bootUKI(t, tpm, "release A, cairn.debug")
	bind(t, tpm, signedBinding(t, key, a, b))
	_, err := tpm.Unseal(blob)
	if !errors.Is(err, ErrNotSigned) {
		t.Fatalf("Unseal in an unsigned boot: %v, want ErrNotSigned", err)
	}
	t.Logf("unsigned boot: %v", err)
}

// TestEndUnsealing unseals, ends unsealing, and then cannot unseal again
// until the TPM restarts.
func TestEndUnsealing(t *testing.T) {
	key := pcrKeys()[0]
	sw := newSWTPM(t)
	tpm := sw.open()
	bind(t, tpm, signedBinding(t, key, bootUKI(t, tpm, "release A")))
	secret := randomSecret(t, 32)
	blob := mustSeal(t, tpm, secret)
	if _, err := tpm.Unseal(blob); err != nil {
		t.Fatalf("first Unseal: %v", err)
	}
	if err := tpm.EndUnsealing(); err != nil {
		t.Fatalf("EndUnsealing: %v", err)
	}
	_, err := tpm.Unseal(blob)
	if !errors.Is(err, ErrNotSigned) {
		t.Fatalf("Unseal after EndUnsealing: %v, want ErrNotSigned", err)
	}
	t.Logf("after EndUnsealing: %v", err)

	tpm = sw.restart()
	bind(t, tpm, signedBinding(t, key, bootUKI(t, tpm, "release A")))
	if got, err := tpm.Unseal(blob); err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("Unseal in the next boot = %x, %v", got, err)
	}
}

// TestBoundSealRefuses tries what must not open a bound seal.
func TestBoundSealRefuses(t *testing.T) {
	keys := pcrKeys()
	sw := newSWTPM(t)
	tpm := sw.open()
	a := bootUKI(t, tpm, "release A")
	bind(t, tpm, signedBinding(t, keys[0], a))
	blob := mustSeal(t, tpm, randomSecret(t, 32))

	// swtpm serves one connection at a time: each case binds tpm anew.
	t.Run("another key's signature", func(t *testing.T) {
		bind(t, tpm, signedBinding(t, keys[1], a))
		_, err := tpm.Unseal(blob)
		if !errors.Is(err, ErrNotSigned) || !strings.Contains(err.Error(), "no signature by them") {
			t.Errorf("Unseal with another key's signature: %v", err)
		}
	})
	t.Run("no binding", func(t *testing.T) {
		tpm.binding = nil
		if _, err := tpm.Unseal(blob); !errors.Is(err, ErrNotSigned) {
			t.Errorf("Unseal without a binding: %v, want ErrNotSigned", err)
		}
	})
	t.Run("PCR 7 changed", func(t *testing.T) {
		tpm := sw.restart()
		bind(t, tpm, signedBinding(t, keys[0], bootUKI(t, tpm, "release A")))
		if err := extendPCR(tpm.tp, 7, sha256.Sum256([]byte("another db"))); err != nil {
			t.Fatal(err)
		}
		_, err := tpm.Unseal(blob)
		if !errors.Is(err, ErrPCR7Changed) {
			t.Errorf("Unseal after PCR 7 changed: %v, want ErrPCR7Changed", err)
		}
	})
}

// TestTPMEnforcesBoundPolicy skips the checks Cairn makes before asking
// the TPM, to show that the TPM itself refuses: a signature approving
// another PCR 11 value, a signature over another policy, PCR 7 changed,
// and an unseal that offers no policy at all.
func TestTPMEnforcesBoundPolicy(t *testing.T) {
	key := pcrKeys()[0]
	sw := newSWTPM(t)
	tpm := sw.open()
	a := bootUKI(t, tpm, "release A")
	bind(t, tpm, signedBinding(t, key, a))
	blob := mustSeal(t, tpm, randomSecret(t, 32))
	b, err := parseBlob(blob)
	if err != nil {
		t.Fatal(err)
	}
	approvedA := signedBinding(t, key, a).Signatures[0]
	forged := approvedA
	forged.Policy = PCR11Policy(sha256.Sum256([]byte("anything")))

	try := func(t *testing.T, tpm *TPM, sig *PCRSignature, session bool) error {
		t.Helper()
		s, obj, release := loadSealed(t, tpm, b)
		defer release()
		if !session {
			_, err := tpm2.Unseal{ItemHandle: tpm2.AuthHandle{Handle: obj.Handle, Name: obj.Name, Auth: s.session(tpm2.AESEncryption(128, tpm2.EncryptOut))}}.Execute(tpm.tp)
			return err
		}
		_, err = tpm.policyUnseal(s, b, obj, []*rsa.PublicKey{&key.PublicKey}, &key.PublicKey, sig)
		return err
	}

	if err := try(t, tpm, &approvedA, true); err != nil {
		t.Fatalf("policyUnseal with A's signature in A's boot: %v", err)
	}
	tpm = sw.restart()
	bootUKI(t, tpm, "release A, changed")
	if err := try(t, tpm, &approvedA, true); !errors.Is(err, ErrNotSigned) {
		t.Errorf("the TPM unsealed with A's signature in another boot: %v", err)
	}
	if err := try(t, tpm, &forged, true); !errors.Is(err, ErrNotSigned) {
		t.Errorf("the TPM took a signature over another policy: %v", err)
	}
	if err := try(t, tpm, nil, false); err == nil {
		t.Error("the TPM unsealed a bound object with its (empty) auth value")
	}
	tpm = sw.restart()
	bootUKI(t, tpm, "release A")
	if err := extendPCR(tpm.tp, 7, sha256.Sum256([]byte("Secure Boot off"))); err != nil {
		t.Fatal(err)
	}
	if err := try(t, tpm, &approvedA, true); !errors.Is(err, ErrPCR7Changed) {
		t.Errorf("the TPM unsealed with PCR 7 changed: %v", err)
	}
}

// loadSealed loads b's sealed object under the SRK, as Unseal does, for a
// test that then talks to the TPM itself; release flushes both.
func loadSealed(t *testing.T, tpm *TPM, b *blob) (s *srk, obj tpm2.NamedHandle, release func()) {
	t.Helper()
	s, err := createSRK(tpm.tp)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := tpm2.Load{
		ParentHandle: tpm2.AuthHandle{Handle: s.handle, Name: s.name, Auth: tpm2.PasswordAuth(nil)},
		InPrivate:    tpm2.TPM2BPrivate{Buffer: b.private},
		InPublic:     tpm2.BytesAs2B[tpm2.TPMTPublic](b.public),
	}.Execute(tpm.tp)
	if err != nil {
		s.flush(tpm.tp)
		t.Fatal(err)
	}
	return s, tpm2.NamedHandle{Handle: loaded.ObjectHandle, Name: loaded.Name}, func() {
		flush(tpm.tp, loaded.ObjectHandle)
		s.flush(tpm.tp)
	}
}

// TestBoundBlobDamaged checks that a bound blob whose PCR key or PCR 7 no
// longer match its object's policy is malformed before any TPM sees it.
func TestBoundBlobDamaged(t *testing.T) {
	keys := pcrKeys()
	tpm := newSWTPM(t).open()
	bind(t, tpm, signedBinding(t, keys[0], bootUKI(t, tpm, "release A")))
	b, err := parseBlob(mustSeal(t, tpm, randomSecret(t, 32)))
	if err != nil {
		t.Fatal(err)
	}
	swapKey := *b
	swapKey.keys = [][]byte{tpm2.Marshal(keyPublic(&keys[1].PublicKey))}
	swapPCR7 := *b
	swapPCR7.pcr7 = bytes.Repeat([]byte{0xff}, sha256.Size)
	shortPCR7 := *b
	shortPCR7.pcr7 = b.pcr7[:31]
	for name, d := range map[string]*blob{"another key": &swapKey, "another PCR 7": &swapPCR7, "short PCR 7": &shortPCR7} {
		data, err := d.marshal()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parseBlob(data); !errors.Is(err, ErrMalformedBlob) {
			t.Errorf("%s: parseBlob = %v, want ErrMalformedBlob", name, err)
		}
		if IsBound(data) {
			t.Errorf("%s: IsBound of a malformed blob", name)
		}
	}
}

// TestPCRSignatureFile reads back what SignPCR11 writes, and refuses
// files that are not one.
func TestPCRSignatureFile(t *testing.T) {
	key := pcrKeys()[0]
	v := sha256.Sum256([]byte("a UKI"))
	file, err := SignPCR11(v, key)
	if err != nil {
		t.Fatal(err)
	}
	sigs, err := ParsePCRSignatures(file)
	if err != nil || len(sigs) != 1 {
		t.Fatalf("ParsePCRSignatures = %+v, %v", sigs, err)
	}
	if sigs[0].KeyFingerprint != KeyFingerprint(&key.PublicKey) || !bytes.Equal(sigs[0].Policy, PCR11Policy(v)) {
		t.Errorf("ParsePCRSignatures = %+v, want key %x and policy %x", sigs[0], KeyFingerprint(&key.PublicKey), PCR11Policy(v))
	}
	other := pcrKeys()[1]
	both, err := SignPCR11(v, key, other)
	if err != nil {
		t.Fatal(err)
	}
	if sigs, err := ParsePCRSignatures(both); err != nil || len(sigs) != 2 || sigs[0].KeyFingerprint != KeyFingerprint(&key.PublicKey) || sigs[1].KeyFingerprint != KeyFingerprint(&other.PublicKey) {
		t.Errorf("ParsePCRSignatures(SignPCR11 with two keys) = %+v, %v; want one signature of each", sigs, err)
	}
	if _, err := SignPCR11(v); err == nil {
		t.Error("SignPCR11 without a key succeeded")
	}
	pemKey, err := PCRKeyPEM(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if k, err := ParsePCRKey(pemKey); err != nil || !k.Equal(&key.PublicKey) {
		t.Errorf("ParsePCRKey(PCRKeyPEM(k)) = %v, %v", k, err)
	}
	for name, bad := range map[string]string{
		"not JSON":     "{",
		"no entries":   `{"sha256": []}`,
		"other PCRs":   `{"sha256": [{"pcrs": [7, 11], "pkfp": "00", "pol": "00", "sig": ""}]}`,
		"short pkfp":   `{"sha256": [{"pcrs": [11], "pkfp": "00", "pol": "00", "sig": ""}]}`,
		"huge":         `{"sha256": [` + strings.Repeat(" ", maxSignatureFile) + `]}`,
		"bad base64":   `{"sha256": [{"pcrs": [11], "pkfp": "` + strings.Repeat("ab", 32) + `", "pol": "` + strings.Repeat("cd", 32) + `", "sig": "!"}]}`,
		"short policy": `{"sha256": [{"pcrs": [11], "pkfp": "` + strings.Repeat("ab", 32) + `", "pol": "cd", "sig": ""}]}`,
	} {
		if sigs, err := ParsePCRSignatures([]byte(bad)); err == nil {
			t.Errorf("%s: ParsePCRSignatures = %+v, want an error", name, sigs)
		}
	}
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := SignPCR11(v, small); err == nil {
		t.Error("SignPCR11 with a 1024-bit key succeeded")
	}
	smallPEM, _ := PCRKeyPEM(&small.PublicKey)
	if _, err := ParsePCRKey(smallPEM); err == nil {
		t.Error("ParsePCRKey of a 1024-bit key succeeded")
	}
}

// TestReadBinding reads a binding from files as the stub leaves them, and
// says ErrNoPCRKey when they are missing.
func TestReadBinding(t *testing.T) {
	key := pcrKeys()[0]
	dir := t.TempDir()
	keyFile, sigFile := filepath.Join(dir, "key.pem"), filepath.Join(dir, "sig.json")
	if _, err := ReadBinding(keyFile, sigFile); !errors.Is(err, ErrNoPCRKey) {
		t.Errorf("ReadBinding without files: %v, want ErrNoPCRKey", err)
	}
	pemKey, err := PCRKeyPEM(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	v := sha256.Sum256([]byte("a UKI"))
	sig, err := SignPCR11(v, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pemKey, 0o400); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadBinding(keyFile, sigFile); !errors.Is(err, ErrNoPCRKey) {
		t.Errorf("ReadBinding without signatures: %v, want ErrNoPCRKey", err)
	}
	if err := os.WriteFile(sigFile, sig, 0o400); err != nil {
		t.Fatal(err)
	}
	b, err := ReadBinding(keyFile, sigFile)
	if err != nil || !b.Key.Equal(&key.PublicKey) || len(b.Signatures) != 1 || !bytes.Equal(b.Signatures[0].Policy, PCR11Policy(v)) {
		t.Fatalf("ReadBinding = %+v, %v", b, err)
	}
}

// BenchmarkUnsealBound is BenchmarkUnseal for a bound seal: what the
// policy (a signature checked by the TPM, three policy commands) adds.
func BenchmarkUnsealBound(b *testing.B) {
	tpm := newSWTPM(b).open()
	key := pcrKeys()[0]
	if err := extendPCR(tpm.tp, 11, sha256.Sum256([]byte("release A"))); err != nil {
		b.Fatal(err)
	}
	v, err := tpm.ReadPCR(11)
	if err != nil {
		b.Fatal(err)
	}
	file, err := SignPCR11(v, key)
	if err != nil {
		b.Fatal(err)
	}
	sigs, err := ParsePCRSignatures(file)
	if err != nil {
		b.Fatal(err)
	}
	if err := tpm.Bind(&Binding{Key: &key.PublicKey, Signatures: sigs}); err != nil {
		b.Fatal(err)
	}
	blob := mustSeal(b, tpm, randomSecret(b, 32))
	for b.Loop() {
		if _, err := tpm.Unseal(blob); err != nil {
			b.Fatalf("Unseal: %v", err)
		}
	}
}

// TestRebindFollowsKeyRotation seals under release N, of PCR key K1, then
// boots N+1, which rotates to K2: its UKI names K2 and carries the
// signatures of both. N+1 opens the seal with K1's signature, and Rebind
// seals it again for K1 and K2. Then N (a rollback) and N+2, signed by K2
// alone, both open it, and a release of a third key does not.
func TestRebindFollowsKeyRotation(t *testing.T) {
	keys := pcrKeys()
	k1, k2, k3 := keys[0], keys[1], keys[2]
	sw := newSWTPM(t)
	tpm := sw.open()
	n := bootUKI(t, tpm, "release N")
	bind(t, tpm, signedBinding(t, k1, n))
	secret := randomSecret(t, 64)
	blob := mustSeal(t, tpm, secret)
	if again, changed, err := tpm.Rebind(blob); err != nil || changed || !bytes.Equal(again, blob) {
		t.Fatalf("Rebind under the key it trusts = %v, %v; want the blob unchanged", changed, err)
	}

	tpm = sw.restart()
	n1 := bootUKI(t, tpm, "release N+1")
	rotating := signedBinding(t, k2, n1)
	rotating.Signatures = append(rotating.Signatures, signedBinding(t, k1, n1).Signatures...)
	bind(t, tpm, rotating)
	rotated, changed, err := tpm.Rebind(blob)
	if err != nil || !changed {
		t.Fatalf("Rebind under a release that rotates to K2 = %v, %v; want a new blob", changed, err)
	}
	if b, err := parseBlob(rotated); err != nil || len(b.keys) != 2 {
		t.Fatalf("the rebound blob: %v, %v; want it to trust two keys", b, err)
	}
	if got, err := tpm.Unseal(rotated); err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("Unseal of the rebound blob in N+1 = %x, %v", got, err)
	}

	for _, boot := range []struct {
		name string
		key  *rsa.PrivateKey
	}{{"release N", k1}, {"release N+2", k2}} {
		tpm = sw.restart()
		bind(t, tpm, signedBinding(t, boot.key, bootUKI(t, tpm, boot.name)))
		if got, err := tpm.Unseal(rotated); err != nil || !bytes.Equal(got, secret) {
			t.Errorf("Unseal of the rebound blob in %s = %x, %v", boot.name, got, err)
		}
		if _, changed, err := tpm.Rebind(rotated); err != nil || changed {
			t.Errorf("Rebind in %s = %v, %v; want nothing to do", boot.name, changed, err)
		}
	}
	tpm = sw.restart()
	bind(t, tpm, signedBinding(t, k3, bootUKI(t, tpm, "release of K3")))
	if _, err := tpm.Unseal(rotated); !errors.Is(err, ErrNotSigned) {
		t.Errorf("Unseal under a third key: %v, want ErrNotSigned", err)
	}
	if _, _, err := tpm.Rebind(rotated); !errors.Is(err, ErrNotSigned) {
		t.Errorf("Rebind under a third key: %v, want ErrNotSigned", err)
	}
}

// TestRebindBindsAnUnboundSeal: a seal of the TPM alone, rebound in a
// boot that binds, opens only in signed boots from then on.
func TestRebindBindsAnUnboundSeal(t *testing.T) {
	key := pcrKeys()[0]
	sw := newSWTPM(t)
	tpm := sw.open()
	secret := randomSecret(t, 64)
	blob := mustSeal(t, tpm, secret)
	if IsBound(blob) {
		t.Fatal("a TPM without a binding sealed bound")
	}
	bind(t, tpm, signedBinding(t, key, bootUKI(t, tpm, "release N")))
	bound, changed, err := tpm.Rebind(blob)
	if err != nil || !changed || !IsBound(bound) {
		t.Fatalf("Rebind of an unbound seal = %v, %v, bound %v", changed, err, IsBound(bound))
	}
	tpm = sw.restart()
	bind(t, tpm, signedBinding(t, key, bootUKI(t, tpm, "release N")))
	if got, err := tpm.Unseal(bound); err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("Unseal of the rebound blob = %x, %v", got, err)
	}
	tpm = sw.restart()
	bind(t, tpm, signedBinding(t, key, bootUKI(t, tpm, "release N")))
	if err := extendPCR(tpm.tp, 11, sha256.Sum256([]byte("more"))); err != nil {
		t.Fatal(err)
	}
	if _, err := tpm.Unseal(bound); !errors.Is(err, ErrNotSigned) {
		t.Errorf("Unseal of the rebound blob in an unsigned boot: %v, want ErrNotSigned", err)
	}
}

// TestTPMEnforcesTrustedKeys skips Cairn's checks, as
// TestTPMEnforcesBoundPolicy does, on a seal that trusts two keys: a
// third key's valid signature of this boot's PCR 11 does not open it.
func TestTPMEnforcesTrustedKeys(t *testing.T) {
	keys := pcrKeys()
	sw := newSWTPM(t)
	tpm := sw.open()
	n := bootUKI(t, tpm, "release N")
	bind(t, tpm, signedBinding(t, keys[1], n))
	both, err := tpm.seal(randomSecret(t, 32), &keys[0].PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	b, err := parseBlob(both)
	if err != nil || len(b.keys) != 2 {
		t.Fatalf("a seal for two keys: %v, %v", b, err)
	}
	trusted := []*rsa.PublicKey{&keys[0].PublicKey, &keys[1].PublicKey}
	try := func(k *rsa.PrivateKey) error {
		s, obj, release := loadSealed(t, tpm, b)
		defer release()
		sig := signedBinding(t, k, n).Signatures[0]
		_, err = tpm.policyUnseal(s, b, obj, trusted, &k.PublicKey, &sig)
		return err
	}
	for i, k := range keys[:2] {
		if err := try(k); err != nil {
			t.Errorf("policyUnseal with trusted key %d: %v", i, err)
		}
	}
	if err := try(keys[2]); err == nil {
		t.Error("the TPM unsealed a seal of two keys with a third key's signature")
	}
}
