package tpmseal

import (
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/google/go-tpm/tpm2"
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
	sel := make([]byte, 3)
	sel[index/8] = 1 << (index % 8)
	rsp, err := tpm2.PCRRead{PCRSelectionIn: tpm2.TPMLPCRSelection{
		PCRSelections: []tpm2.TPMSPCRSelection{{Hash: tpm2.TPMAlgSHA256, PCRSelect: sel}},
	}}.Execute(t.tp)
	if err != nil {
		return v, fmt.Errorf("when reading PCR %d: %w", index, err)
	}
	if len(rsp.PCRValues.Digests) != 1 || len(rsp.PCRValues.Digests[0].Buffer) != sha256.Size {
		return v, fmt.Errorf("when reading PCR %d: the TPM has no SHA-256 bank for it (%d values)", index, len(rsp.PCRValues.Digests))
	}
	copy(v[:], rsp.PCRValues.Digests[0].Buffer)
	return v, nil
}
