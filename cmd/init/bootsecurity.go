package main

import (
	"errors"

	"cairn.dev/cairn/pkg/efivar"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/tpmseal"
	api "cairn.dev/cairn/proto/api"
)

// secureBoot says whether the firmware booted this machine with Secure
// Boot on. An unreadable variable counts as off: kexec then tries, and a
// locked-down kernel refuses it, which the reboot says.
func secureBoot() bool {
	on, err := efivar.ReadSecureBoot(efiVars.target)
	return err == nil && on
}

// bootSecurity is what the firmware and the TPM say of this boot, for
// the node's status: nil, not said, when the firmware's SecureBoot
// variable cannot be read. A machine that did not boot through EFI has
// none, and no Secure Boot; one without a TPM reports no PCR 11.
func bootSecurity(log logtree.LeveledLogger) *api.BootSecurity {
	on, err := efivar.ReadSecureBoot(efiVars.target)
	if err != nil {
		log.Warningf("Not reporting whether Secure Boot is on: %v", err)
		return nil
	}
	b := &api.BootSecurity{SecureBoot: on}
	tpm, err := tpmseal.Open()
	if errors.Is(err, tpmseal.ErrNoTPM) {
		return b
	}
	if err != nil {
		log.Warningf("Not reporting PCR 11: %v", err)
		return b
	}
	defer tpm.Close()
	pcr, err := tpm.ReadPCR(11)
	if err != nil {
		log.Warningf("Not reporting PCR 11: %v", err)
		return b
	}
	log.Infof("PCR 11 (SHA-256) is %x", pcr)
	b.Pcr11 = pcr[:]
	return b
}

// pcrBinding is what binds this boot's seals to its release: the PCR key
// and signatures of the UKI the firmware booted, under Secure Boot only.
// Without Secure Boot, anything the firmware runs can extend PCR 11 with
// the values a signed UKI would leave there, so a PCR 11 policy alone
// would protect nothing; with it, PCR 7 names the key that let the UKI
// run. Nil, with the reason logged, when the boot cannot bind.
func pcrBinding(log logtree.LeveledLogger, secureBoot bool) *tpmseal.Binding {
	if !secureBoot {
		log.Infof("Seals are bound to the TPM alone: Secure Boot is off, so no boot can be told from a signed one")
		return nil
	}
	b, err := tpmseal.ReadBinding(tpmseal.StubKeyFile, tpmseal.StubSignatureFile)
	if err != nil {
		log.Warningf("Seals are bound to the TPM alone, not to the release: %v", err)
		return nil
	}
	fp := tpmseal.KeyFingerprint(b.Key)
	log.Infof("Seals are bound to the release's PCR key %x (%d signed PCR 11 values) and to PCR 7", fp[:8], len(b.Signatures))
	return b
}
