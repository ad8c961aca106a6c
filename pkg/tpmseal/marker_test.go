package tpmseal

import "testing"

// TestSealingMarker sets the marker on a software TPM and finds it again
// after the TPM restarts (it is in NV memory), while another TPM has none.
func TestSealingMarker(t *testing.T) {
	sw := newSWTPM(t)
	tpm := sw.open()
	if set, err := tpm.SealingMarker(); err != nil || set {
		t.Fatalf("SealingMarker on a new TPM = %v, %v, want false", set, err)
	}
	for range 2 { // setting it again is harmless
		if err := tpm.SetSealingMarker(); err != nil {
			t.Fatalf("SetSealingMarker: %v", err)
		}
	}
	if set, err := tpm.SealingMarker(); err != nil || !set {
		t.Fatalf("SealingMarker after setting it = %v, %v, want true", set, err)
	}
	tpm.Close()

	sw.stop()
	sw.start()
	tpm = sw.open()
	defer tpm.Close()
	if set, err := tpm.SealingMarker(); err != nil || !set {
		t.Errorf("SealingMarker after a restart of the TPM = %v, %v, want true", set, err)
	}
	other := newSWTPM(t).open()
	defer other.Close()
	if set, err := other.SealingMarker(); err != nil || set {
		t.Errorf("SealingMarker on another TPM = %v, %v, want false", set, err)
	}
}
