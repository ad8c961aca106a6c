package tpmseal

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/google/go-tpm/tpm2"
)

// The sealing marker is a small NV index that says "a configuration was
// sealed with this TPM". It lives in the TPM, not on any disk, so someone
// who can only write the disk cannot remove it: a node that finds its
// configuration stored unsealed on a machine whose TPM holds the marker
// knows the file was swapped, and refuses it.
const (
	// markerIndex is the NV index of the marker, in the range the TCG
	// leaves to the owner (0x01800000-0x01BFFFFF).
	markerIndex = tpm2.TPMHandle(0x0181CA1F)
	// markerValue is what the index holds.
	markerValue = "CAIRNTPM"
)

// markerPublic describes the marker's index: written and read with the
// owner hierarchy's (empty) authorization, and once written never
// rewritten (WriteDefine after the first write).
var markerPublic = tpm2.TPMSNVPublic{
	NVIndex: markerIndex,
	NameAlg: tpm2.TPMAlgSHA256,
	Attributes: tpm2.TPMANV{
		OwnerWrite:  true,
		OwnerRead:   true,
		WriteDefine: true,
		NoDA:        true,
		NT:          tpm2.TPMNTOrdinary,
	},
	DataSize: uint16(len(markerValue)),
}

// SetSealingMarker records in the TPM that a configuration was sealed
// with it. Setting it again is harmless.
func (t *TPM) SetSealingMarker() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tp == nil {
		return errors.New("the TPM is closed")
	}
	set, err := t.markerSet()
	if err != nil || set {
		return err
	}
	def := tpm2.NVDefineSpace{
		AuthHandle: tpm2.TPMRHOwner,
		PublicInfo: tpm2.New2B(markerPublic),
	}
	if _, err := def.Execute(t.tp); err != nil && !errors.Is(err, tpm2.TPMRCNVDefined) {
		return fmt.Errorf("when defining the sealing marker: %w", err)
	}
	name, err := tpm2.NVName(&markerPublic)
	if err != nil {
		return fmt.Errorf("when naming the sealing marker: %w", err)
	}
	write := tpm2.NVWrite{
		AuthHandle: tpm2.AuthHandle{Handle: tpm2.TPMRHOwner, Auth: tpm2.PasswordAuth(nil)},
		NVIndex:    tpm2.NamedHandle{Handle: markerIndex, Name: *name},
		Data:       tpm2.TPM2BMaxNVBuffer{Buffer: []byte(markerValue)},
	}
	if _, err := write.Execute(t.tp); err != nil {
		return fmt.Errorf("when writing the sealing marker: %w", err)
	}
	return nil
}

// SealingMarker reports whether the TPM says a configuration was sealed
// with it.
func (t *TPM) SealingMarker() (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tp == nil {
		return false, errors.New("the TPM is closed")
	}
	return t.markerSet()
}

// markerSet reads the marker; the caller holds t.mu.
func (t *TPM) markerSet() (bool, error) {
	pub, err := tpm2.NVReadPublic{NVIndex: markerIndex}.Execute(t.tp)
	if errors.Is(err, tpm2.TPMRCHandle) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("when looking for the sealing marker: %w", err)
	}
	contents, err := pub.NVPublic.Contents()
	if err != nil {
		return false, fmt.Errorf("when reading the sealing marker's description: %w", err)
	}
	if !contents.Attributes.Written {
		return false, nil
	}
	read := tpm2.NVRead{
		AuthHandle: tpm2.AuthHandle{Handle: tpm2.TPMRHOwner, Auth: tpm2.PasswordAuth(nil)},
		NVIndex:    tpm2.NamedHandle{Handle: markerIndex, Name: pub.NVName},
		Size:       uint16(len(markerValue)),
	}
	rsp, err := read.Execute(t.tp)
	if err != nil {
		return false, fmt.Errorf("when reading the sealing marker: %w", err)
	}
	if !bytes.Equal(rsp.Data.Buffer, []byte(markerValue)) {
		return false, fmt.Errorf("NV index %#x holds %q, not the sealing marker", uint32(markerIndex), rsp.Data.Buffer)
	}
	return true, nil
}
