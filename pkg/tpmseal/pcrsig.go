package tpmseal

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"

	"github.com/google/go-tpm/tpm2"
)

// A release approves the PCR 11 values of its UKIs by signing, with its
// PCR key, the TPM policy that checks PCR 11 for that value. The UKI
// carries the signatures in its .pcrsig section and the public key in
// .pcrpkey, in the format of systemd-measure, whose stub hands both to
// the initramfs (/.extra/tpm2-pcr-signature.json and
// /.extra/tpm2-pcr-public-key.pem):
//
//	{"sha256": [{"pcrs": [11], "pkfp": "<hex SHA-256 of the key's DER>",
//	             "pol": "<hex policy digest>", "sig": "<base64 signature>"}]}
//
// where pol is the digest of TPM2_PolicyPCR over PCR 11 of the SHA-256
// bank holding the value, and sig is RSASSA-PKCS1-v1_5 with SHA-256 over
// SHA-256(pol): what TPM2_VerifySignature checks before
// TPM2_PolicyAuthorize (whose policyRef Cairn leaves empty) accepts pol.

// PCRKeyBits is the size of a PCR key: an RSA key, as TPMs verify no
// ed25519, of the size every TPM 2.0 supports.
const PCRKeyBits = 2048

// maxSignatureFile bounds a signature file; a UKI's holds a few entries
// of under 500 bytes each.
const maxSignatureFile = 64 << 10

// ErrNoPCRKey means the boot carries no PCR key or signatures: it did
// not come through a UKI of a signed release.
var ErrNoPCRKey = errors.New("this boot carries no signed PCR policy")

// PCRSignature is one signed PCR 11 policy of a release.
type PCRSignature struct {
	// KeyFingerprint is the SHA-256 of the signing key's DER encoding
	// (KeyFingerprint).
	KeyFingerprint [sha256.Size]byte
	// Policy is the approved policy digest (PCR11Policy of a value).
	Policy []byte
	// Signature is the key's signature over SHA-256(Policy).
	Signature []byte
}

// signatureFile is the JSON of a .pcrsig section.
type signatureFile struct {
	SHA256 []signatureEntry `json:"sha256"`
}

type signatureEntry struct {
	PCRs      []int  `json:"pcrs"`
	PKFP      string `json:"pkfp"`
	Policy    string `json:"pol"`
	Signature string `json:"sig"`
}

// pcrPolicy extends policy by TPM2_PolicyPCR for PCR index holding value.
func pcrPolicy(policy *tpm2.PolicyCalculator, index int, value []byte) error {
	digest := sha256.Sum256(value)
	return tpm2.PolicyPCR{PcrDigest: tpm2.TPM2BDigest{Buffer: digest[:]}, Pcrs: pcrSelection(index)}.Update(policy)
}

// PCR11Policy is the digest of the policy that PCR 11 (SHA-256 bank)
// holds value: what a release signs for each UKI it ships.
func PCR11Policy(value [sha256.Size]byte) []byte {
	calc, err := tpm2.NewPolicyCalculator(tpm2.TPMAlgSHA256)
	if err != nil {
		panic(fmt.Sprintf("SHA-256 policy calculator: %v", err))
	}
	if err := pcrPolicy(calc, 11, value[:]); err != nil {
		panic(fmt.Sprintf("PolicyPCR digest: %v", err))
	}
	return calc.Hash().Digest
}

// SignPCR11 returns the signature file (.pcrsig) that approves the PCR 11
// value pcr11 with each of the release's PCR keys.
func SignPCR11(pcr11 [sha256.Size]byte, keys ...*rsa.PrivateKey) ([]byte, error) {
	pol := PCR11Policy(pcr11)
	aHash := sha256.Sum256(pol)
	var f signatureFile
	for _, key := range keys {
		if err := checkPCRKey(&key.PublicKey); err != nil {
			return nil, err
		}
		sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, aHash[:])
		if err != nil {
			return nil, fmt.Errorf("signing the PCR 11 policy: %w", err)
		}
		fp := KeyFingerprint(&key.PublicKey)
		f.SHA256 = append(f.SHA256, signatureEntry{
			PCRs:      []int{11},
			PKFP:      hex.EncodeToString(fp[:]),
			Policy:    hex.EncodeToString(pol),
			Signature: base64.StdEncoding.EncodeToString(sig),
		})
	}
	if len(f.SHA256) == 0 {
		return nil, errors.New("signing the PCR 11 policy: no key")
	}
	return json.Marshal(f)
}

// ParsePCRSignatures reads a signature file (.pcrsig). Entries for other
// PCRs than 11 alone are skipped: Cairn signs only PCR 11.
func ParsePCRSignatures(data []byte) ([]PCRSignature, error) {
	if len(data) > maxSignatureFile {
		return nil, fmt.Errorf("PCR signature file of %d bytes: at most %d", len(data), maxSignatureFile)
	}
	var f signatureFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("PCR signature file: %w", err)
	}
	var sigs []PCRSignature
	for i, e := range f.SHA256 {
		if len(e.PCRs) != 1 || e.PCRs[0] != 11 {
			continue
		}
		var s PCRSignature
		fp, err := hex.DecodeString(e.PKFP)
		if err != nil || len(fp) != sha256.Size {
			return nil, fmt.Errorf("PCR signature %d: pkfp %q is not a SHA-256 in hex", i, e.PKFP)
		}
		copy(s.KeyFingerprint[:], fp)
		if s.Policy, err = hex.DecodeString(e.Policy); err != nil || len(s.Policy) != sha256.Size {
			return nil, fmt.Errorf("PCR signature %d: pol %q is not a SHA-256 policy digest in hex", i, e.Policy)
		}
		if s.Signature, err = base64.StdEncoding.DecodeString(e.Signature); err != nil || len(s.Signature) != PCRKeyBits/8 {
			return nil, fmt.Errorf("PCR signature %d: sig is not a base64 signature of a %d-bit RSA key", i, PCRKeyBits)
		}
		sigs = append(sigs, s)
	}
	if len(sigs) == 0 {
		return nil, errors.New("PCR signature file: no signature for PCR 11 of the SHA-256 bank")
	}
	return sigs, nil
}

// ParsePCRKey reads a PCR key's public half from PEM (a "PUBLIC KEY"
// block, as in a UKI's .pcrpkey section).
func ParsePCRKey(data []byte) (*rsa.PublicKey, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PUBLIC KEY" {
		return nil, errors.New("PCR public key: no PEM PUBLIC KEY block")
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("PCR public key: %w", err)
	}
	rk, ok := k.(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("PCR public key: a %T, want RSA", k)
	}
	if err := checkPCRKey(rk); err != nil {
		return nil, err
	}
	return rk, nil
}

// PCRKeyPEM encodes a PCR key's public half as ParsePCRKey reads it.
func PCRKeyPEM(k *rsa.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		return nil, fmt.Errorf("encoding the PCR public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// KeyFingerprint is the SHA-256 of k's DER encoding
// (SubjectPublicKeyInfo), as systemd names PCR keys.
func KeyFingerprint(k *rsa.PublicKey) [sha256.Size]byte {
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		// An RSA public key always encodes.
		panic(fmt.Sprintf("encoding an RSA public key: %v", err))
	}
	return sha256.Sum256(der)
}

// checkPCRKey accepts an RSA key a TPM can verify with.
func checkPCRKey(k *rsa.PublicKey) error {
	if k.N.BitLen() != PCRKeyBits {
		return fmt.Errorf("PCR key of %d bits: TPMs verify %d-bit RSA keys", k.N.BitLen(), PCRKeyBits)
	}
	if k.E != 65537 {
		return fmt.Errorf("PCR key with exponent %d: want 65537", k.E)
	}
	return nil
}
