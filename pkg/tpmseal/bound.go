package tpmseal

import (
	"bytes"
	"crypto/rsa"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"

	"github.com/google/go-tpm/tpm2"
)

// A bound seal opens only in a boot of a signed release: its object's
// policy is
//
//	TPM2_PolicyAuthorize(PCR key)   any policy the release's PCR key signed,
//	                                which for Cairn is "PCR 11 holds the
//	                                value of a UKI of ours"
//	TPM2_PolicyPCR(PCR 7 = v)       and PCR 7 as it was when sealing: the
//	                                same Secure Boot state and keys
//
// and no auth value opens it (UserWithAuth is clear). The key is fixed
// into the policy when sealing; the PCR 11 values are not, so a node that
// installs another signed release unseals without sealing again.

var (
	// ErrNotSigned means the TPM refused a bound seal because this boot's
	// PCR 11 is not a value its release key signed: another kernel,
	// initramfs or command line, or a boot that already ended its
	// unsealing (EndUnsealing).
	ErrNotSigned = errors.New("this boot is not one the seal's release key signed")
	// ErrPCR7Changed means the Secure Boot state or keys (PCR 7) differ
	// from when the secret was sealed.
	ErrPCR7Changed = errors.New("the Secure Boot state or keys (PCR 7) changed since sealing")
)

// Binding is what a boot of a signed release has to bind seals to it: the
// release's PCR key and the signatures its UKI carries.
type Binding struct {
	// Key is the release's PCR key, from the UKI's .pcrpkey.
	Key *rsa.PublicKey
	// Signatures are the UKI's signed PCR 11 policies, from its .pcrsig.
	Signatures []PCRSignature
}

// The files systemd's stub makes of a UKI's .pcrpkey and .pcrsig sections
// in the initramfs it hands the kernel.
const (
	StubKeyFile       = "/.extra/tpm2-pcr-public-key.pem"
	StubSignatureFile = "/.extra/tpm2-pcr-signature.json"
)

// ReadBinding reads a Binding from the PCR key (PEM) in keyFile and the
// signatures in sigFile, such as StubKeyFile and StubSignatureFile. A
// file that does not exist gives an error wrapping ErrNoPCRKey.
func ReadBinding(keyFile, sigFile string) (*Binding, error) {
	keyPEM, err := os.ReadFile(keyFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: no PCR key (%s)", ErrNoPCRKey, keyFile)
	}
	if err != nil {
		return nil, fmt.Errorf("when reading the PCR key: %w", err)
	}
	key, err := ParsePCRKey(keyPEM)
	if err != nil {
		return nil, err
	}
	sigs, err := os.ReadFile(sigFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: no PCR signatures (%s)", ErrNoPCRKey, sigFile)
	}
	if err != nil {
		return nil, fmt.Errorf("when reading the PCR signatures: %w", err)
	}
	b := &Binding{Key: key}
	if b.Signatures, err = ParsePCRSignatures(sigs); err != nil {
		return nil, err
	}
	return b, nil
}

// Bind makes Seal bind what it seals to b's key and PCR 7, and lets
// Unseal open bound blobs with b's signatures. Without a binding, Seal
// writes unbound blobs and Unseal refuses bound ones.
func (t *TPM) Bind(b *Binding) error {
	if err := checkPCRKey(b.Key); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.binding = b
	return nil
}

// Bound reports whether Seal binds (Bind was called).
func (t *TPM) Bound() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.binding != nil
}

// IsBound reports whether blob is a bound seal. A malformed blob is not.
func IsBound(blob []byte) bool {
	b, err := parseBlob(blob)
	return err == nil && b.bound()
}

// maxTrustedKeys is how many PCR keys a bound seal trusts at most: the
// key of the release it was sealed under and, across a rotation, the
// new one (Rebind).
const maxTrustedKeys = 2

// boundAttributes are a bound object's: sealTemplate's, but only its
// policy authorizes it.
var boundAttributes = tpm2.TPMAObject{FixedTPM: true, FixedParent: true, NoDA: true}

// keyPublic is the TPMT_PUBLIC under which a PCR key is loaded to check
// signatures: its name, which the policy names, follows from it.
func keyPublic(k *rsa.PublicKey) tpm2.TPMTPublic {
	return tpm2.TPMTPublic{
		Type:             tpm2.TPMAlgRSA,
		NameAlg:          tpm2.TPMAlgSHA256,
		ObjectAttributes: tpm2.TPMAObject{SignEncrypt: true, UserWithAuth: true, NoDA: true},
		Parameters: tpm2.NewTPMUPublicParms(tpm2.TPMAlgRSA, &tpm2.TPMSRSAParms{
			Symmetric: tpm2.TPMTSymDefObject{Algorithm: tpm2.TPMAlgNull},
			Scheme:    tpm2.TPMTRSAScheme{Scheme: tpm2.TPMAlgNull},
			KeyBits:   PCRKeyBits,
		}),
		Unique: tpm2.NewTPMUPublicID(tpm2.TPMAlgRSA, &tpm2.TPM2BPublicKeyRSA{Buffer: k.N.FillBytes(make([]byte, PCRKeyBits/8))}),
	}
}

// pcrKeyOf decodes a PCR key of a blob's keys field.
func pcrKeyOf(data []byte) (*rsa.PublicKey, error) {
	pub, err := unmarshalPublic(data)
	if err != nil {
		return nil, err
	}
	id, err := pub.Unique.RSA()
	if err != nil || pub.Type != tpm2.TPMAlgRSA {
		return nil, errors.New("not an RSA key")
	}
	if len(id.Buffer) != PCRKeyBits/8 {
		return nil, fmt.Errorf("an RSA modulus of %d bytes, want %d", len(id.Buffer), PCRKeyBits/8)
	}
	k := &rsa.PublicKey{N: new(big.Int).SetBytes(id.Buffer), E: 65537}
	if want := tpm2.Marshal(keyPublic(k)); !bytes.Equal(want, data) {
		return nil, errors.New("not a PCR key as Seal describes one")
	}
	return k, nil
}

// pcrKeysOf decodes the PCR keys of a bound blob.
func pcrKeysOf(b *blob) ([]*rsa.PublicKey, error) {
	keys := make([]*rsa.PublicKey, len(b.keys))
	for i, data := range b.keys {
		k, err := pcrKeyOf(data)
		if err != nil {
			return nil, fmt.Errorf("PCR key %d: %w", i, err)
		}
		keys[i] = k
	}
	return keys, nil
}

// keyBranch is the policy that one PCR key's signature and PCR 7 holding
// pcr7 satisfy: PolicyAuthorize(key), then PolicyPCR(7).
func keyBranch(key *rsa.PublicKey, pcr7 []byte) ([]byte, error) {
	name, err := tpm2.ObjectName(ptr(keyPublic(key)))
	if err != nil {
		return nil, fmt.Errorf("naming the PCR key: %w", err)
	}
	calc, err := tpm2.NewPolicyCalculator(tpm2.TPMAlgSHA256)
	if err != nil {
		return nil, err
	}
	if err := (tpm2.PolicyAuthorize{KeySign: *name}).Update(calc); err != nil {
		return nil, fmt.Errorf("PolicyAuthorize digest: %w", err)
	}
	if err := pcrPolicy(calc, 7, pcr7); err != nil {
		return nil, fmt.Errorf("PolicyPCR digest: %w", err)
	}
	return calc.Hash().Digest, nil
}

// keyBranches are the branches of keys, in their order.
func keyBranches(keys []*rsa.PublicKey, pcr7 []byte) ([]tpm2.TPM2BDigest, error) {
	var branches []tpm2.TPM2BDigest
	for _, k := range keys {
		d, err := keyBranch(k, pcr7)
		if err != nil {
			return nil, err
		}
		branches = append(branches, tpm2.TPM2BDigest{Buffer: d})
	}
	return branches, nil
}

// boundPolicy is the authPolicy of an object bound to keys (one or
// maxTrustedKeys) and to PCR 7 holding pcr7: the one key's branch, or
// TPM2_PolicyOR of every key's.
func boundPolicy(keys []*rsa.PublicKey, pcr7 []byte) ([]byte, error) {
	if len(keys) == 0 || len(keys) > maxTrustedKeys {
		return nil, fmt.Errorf("a bound seal trusts 1 to %d PCR keys, not %d", maxTrustedKeys, len(keys))
	}
	branches, err := keyBranches(keys, pcr7)
	if err != nil {
		return nil, err
	}
	if len(branches) == 1 {
		return branches[0].Buffer, nil
	}
	calc, err := tpm2.NewPolicyCalculator(tpm2.TPMAlgSHA256)
	if err != nil {
		return nil, err
	}
	if err := (tpm2.PolicyOr{PHashList: tpm2.TPMLDigest{Digests: branches}}).Update(calc); err != nil {
		return nil, fmt.Errorf("PolicyOR digest: %w", err)
	}
	return calc.Hash().Digest, nil
}

func ptr[T any](v T) *T { return &v }

// boundTemplate is the public template of an object sealed under policy.
func boundTemplate(policy []byte) tpm2.TPMTPublic {
	t := sealTemplate
	t.ObjectAttributes = boundAttributes
	t.AuthPolicy = tpm2.TPM2BDigest{Buffer: policy}
	return t
}

// unsealBound opens a bound object, loaded at obj: it proves to the TPM,
// in a policy session, that PCR 11 holds a value one of the blob's keys
// signed and that PCR 7 is what it was when sealing. It returns the key
// and which PCR key opened it. The caller holds t.mu.
func (t *TPM) unsealBound(s *srk, b *blob, obj tpm2.NamedHandle) ([]byte, *rsa.PublicKey, error) {
	keys, err := pcrKeysOf(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrMalformedBlob, err)
	}
	key, approved, err := t.approvedSignature(keys, b.pcr7)
	if err != nil {
		return nil, nil, err
	}
	secret, err := t.policyUnseal(s, b, obj, keys, key, approved)
	return secret, key, err
}

// approvedSignature finds the signature of this boot, by one of keys,
// that approves PCR 11's value, after checking PCR 7 against pcr7, so
// that a refusal says which of the two failed; the TPM checks both again
// in policyUnseal.
func (t *TPM) approvedSignature(keys []*rsa.PublicKey, pcr7 []byte) (*rsa.PublicKey, *PCRSignature, error) {
	if t.binding == nil {
		return nil, nil, fmt.Errorf("%w: it was sealed bound to a signed release, and this boot carries no signature of one", ErrNotSigned)
	}
	var sigs []PCRSignature
	var trusted []string
	for _, k := range keys {
		fp := KeyFingerprint(k)
		trusted = append(trusted, fmt.Sprintf("%x", fp[:8]))
		for _, sig := range t.binding.Signatures {
			if sig.KeyFingerprint == fp {
				sigs = append(sigs, sig)
			}
		}
	}
	if len(sigs) == 0 {
		return nil, nil, fmt.Errorf("%w: it trusts the PCR keys %v, and this boot carries no signature by them", ErrNotSigned, trusted)
	}
	now7, err := readPCR(t.tp, 7)
	if err != nil {
		return nil, nil, err
	}
	if !bytes.Equal(now7, pcr7) {
		return nil, nil, fmt.Errorf("%w: PCR 7 is %x, it was %x", ErrPCR7Changed, now7, pcr7)
	}
	pcr11, err := readPCR(t.tp, 11)
	if err != nil {
		return nil, nil, err
	}
	policy := PCR11Policy([sha256.Size]byte(pcr11))
	for i := range sigs {
		if !bytes.Equal(sigs[i].Policy, policy) {
			continue
		}
		for _, k := range keys {
			if KeyFingerprint(k) == sigs[i].KeyFingerprint {
				return k, &sigs[i], nil
			}
		}
	}
	return nil, nil, fmt.Errorf("%w: PCR 11 is %x, and none of the %d signatures of this boot approves it (another kernel, initramfs or command line, or this boot's unsealing is over)", ErrNotSigned, pcr11, len(sigs))
}

// policyUnseal has the TPM check approved, by key (one of keys, the
// blob's): its signature, and that PCR 11 holds the value it approves;
// then PCR 7, and, for a blob that trusts several keys, that key's branch
// among theirs; and unseal obj. The caller holds t.mu.
func (t *TPM) policyUnseal(s *srk, b *blob, obj tpm2.NamedHandle, keys []*rsa.PublicKey, key *rsa.PublicKey, approved *PCRSignature) ([]byte, error) {
	loaded, err := tpm2.LoadExternal{
		InPublic:  tpm2.New2B(keyPublic(key)),
		Hierarchy: tpm2.TPMRHOwner,
	}.Execute(t.tp)
	if err != nil {
		return nil, fmt.Errorf("loading the PCR key: %w", err)
	}
	defer flush(t.tp, loaded.ObjectHandle)
	aHash := sha256.Sum256(approved.Policy)
	verified, err := tpm2.VerifySignature{
		KeyHandle: tpm2.NamedHandle{Handle: loaded.ObjectHandle, Name: loaded.Name},
		Digest:    tpm2.TPM2BDigest{Buffer: aHash[:]},
		Signature: tpm2.TPMTSignature{
			SigAlg: tpm2.TPMAlgRSASSA,
			Signature: tpm2.NewTPMUSignature(tpm2.TPMAlgRSASSA, &tpm2.TPMSSignatureRSA{
				Hash: tpm2.TPMAlgSHA256,
				Sig:  tpm2.TPM2BPublicKeyRSA{Buffer: approved.Signature},
			}),
		},
	}.Execute(t.tp)
	if err != nil {
		return nil, fmt.Errorf("%w: the TPM finds the signature of PCR 11's policy invalid: %w", ErrNotSigned, err)
	}

	sess, closeSession, err := tpm2.PolicySession(t.tp, tpm2.TPMAlgSHA256, 16,
		tpm2.Salted(s.handle, s.public), tpm2.AESEncryption(128, tpm2.EncryptOut))
	if err != nil {
		return nil, fmt.Errorf("starting a policy session: %w", err)
	}
	defer closeSession()
	if _, err := (tpm2.PolicyPCR{PolicySession: sess.Handle(), Pcrs: pcrSelection(11)}).Execute(t.tp); err != nil {
		return nil, fmt.Errorf("PolicyPCR on PCR 11: %w", err)
	}
	if _, err := (tpm2.PolicyAuthorize{
		PolicySession:  sess.Handle(),
		ApprovedPolicy: tpm2.TPM2BDigest{Buffer: approved.Policy},
		KeySign:        loaded.Name,
		CheckTicket:    verified.Validation,
	}).Execute(t.tp); err != nil {
		return nil, fmt.Errorf("%w: the TPM refused PCR 11's signed policy: %w", ErrNotSigned, err)
	}
	pcr7Digest := sha256.Sum256(b.pcr7)
	if _, err := (tpm2.PolicyPCR{PolicySession: sess.Handle(), PcrDigest: tpm2.TPM2BDigest{Buffer: pcr7Digest[:]}, Pcrs: pcrSelection(7)}).Execute(t.tp); err != nil {
		return nil, fmt.Errorf("%w: the TPM: %w", ErrPCR7Changed, err)
	}
	if len(keys) > 1 {
		branches, err := keyBranches(keys, b.pcr7)
		if err != nil {
			return nil, err
		}
		if _, err := (tpm2.PolicyOr{PolicySession: sess.Handle(), PHashList: tpm2.TPMLDigest{Digests: branches}}).Execute(t.tp); err != nil {
			return nil, fmt.Errorf("PolicyOR over the trusted keys: %w", err)
		}
	}
	rsp, err := tpm2.Unseal{ItemHandle: tpm2.AuthHandle{Handle: obj.Handle, Name: obj.Name, Auth: sess}}.Execute(t.tp)
	if err != nil {
		return nil, fmt.Errorf("unsealing under the release's policy: %w", err)
	}
	return rsp.OutData.Buffer, nil
}

// endMarker is what EndUnsealing measures into PCR 11.
var endMarker = sha256.Sum256([]byte("cairn: unsealing is over for this boot"))

// EndUnsealing extends PCR 11 with a marker of Cairn's, so that PCR 11
// holds no value a release signed for the rest of this boot: no bound
// seal opens again until the machine restarts through its firmware.
func (t *TPM) EndUnsealing() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tp == nil {
		return errors.New("the TPM is closed")
	}
	if err := extendPCR(t.tp, 11, endMarker); err != nil {
		return fmt.Errorf("ending unsealing: %w", err)
	}
	return nil
}
