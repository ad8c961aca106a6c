package tpmseal

import (
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
)

// ReadPCR returns the SHA-256 bank's PCR index (0 to 23): what was
// measured into it since the TPM was reset, such as a UKI's sections,
// which systemd's stub measures into PCR 11.
func (t *TPM) ReadPCR(index int) ([sha256.Size]byte, error) {
	var v [sha256.Size]byte
	if index < 0 || index > 23 {
		return v, fmt.Errorf("PCR %d: a TPM has PCRs 0 to 23", index)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tp == nil {
		return v, errors.New("the TPM is closed")
	}
	b, err := readPCR(t.tp, index)
	if err != nil {
		return v, err
	}
	return [sha256.Size]byte(b), nil
}

// pcrSelection selects one PCR of the SHA-256 bank.
func pcrSelection(index int) tpm2.TPMLPCRSelection {
	sel := make([]byte, 3)
	sel[index/8] = 1 << (index % 8)
	return tpm2.TPMLPCRSelection{PCRSelections: []tpm2.TPMSPCRSelection{{Hash: tpm2.TPMAlgSHA256, PCRSelect: sel}}}
}

// readPCR reads PCR index of the SHA-256 bank; the caller holds t.mu.
func readPCR(tp transport.TPM, index int) ([]byte, error) {
	rsp, err := tpm2.PCRRead{PCRSelectionIn: pcrSelection(index)}.Execute(tp)
	if err != nil {
		return nil, fmt.Errorf("when reading PCR %d: %w", index, err)
	}
	if len(rsp.PCRValues.Digests) != 1 || len(rsp.PCRValues.Digests[0].Buffer) != sha256.Size {
		return nil, fmt.Errorf("when reading PCR %d: the TPM has no SHA-256 bank for it (%d values)", index, len(rsp.PCRValues.Digests))
	}
	return rsp.PCRValues.Digests[0].Buffer, nil
}

// extendPCR extends PCR index of the SHA-256 bank with digest.
func extendPCR(tp transport.TPM, index int, digest [sha256.Size]byte) error {
	_, err := tpm2.PCRExtend{
		PCRHandle: tpm2.AuthHandle{Handle: tpm2.TPMHandle(index), Auth: tpm2.PasswordAuth(nil)},
		Digests:   tpm2.TPMLDigestValues{Digests: []tpm2.TPMTHA{{HashAlg: tpm2.TPMAlgSHA256, Digest: digest[:]}}},
	}.Execute(tp)
	if err != nil {
		return fmt.Errorf("extending PCR %d: %w", index, err)
	}
	return nil
}
