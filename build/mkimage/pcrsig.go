package main

import (
	"bytes"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"

	"cairn.dev/cairn/build/uki"
	"cairn.dev/cairn/pkg/tpmseal"
	ukiread "cairn.dev/cairn/pkg/uki"
)

// The PCR sections of a UKI (pkg/tpmseal): .pcrpkey holds the release's
// PCR key, which the stub measures into PCR 11 with the rest, and .pcrsig
// the key's signature of the PCR 11 value the stub leaves, which it does
// not measure. So the signature is made over the image built with
// .pcrpkey, and adding .pcrsig changes no measurement.

// pcrSections returns sections with .pcrpkey and .pcrsig for the release's
// PCR keys in keyFiles (PEM, RSA-2048), signed by each for the PCR 11
// value of the image stub and sections make, and that value. The first
// key is the image's own (.pcrpkey); a second is the key a rotation
// replaces, whose signature lets nodes sealed to it open their seals and
// follow to the first.
func pcrSections(stub []byte, sections []uki.Section, keyFiles []string) ([]uki.Section, [32]byte, error) {
	var pcr [32]byte
	var keys []*rsa.PrivateKey
	for _, f := range keyFiles {
		key, err := readPCRKey(f)
		if err != nil {
			return nil, pcr, err
		}
		keys = append(keys, key)
	}
	pub, err := tpmseal.PCRKeyPEM(&keys[0].PublicKey)
	if err != nil {
		return nil, pcr, err
	}
	sections = withSections(sections, uki.Section{Name: ".pcrpkey", Data: pub})
	img, err := uki.Build(stub, sections)
	if err != nil {
		return nil, pcr, err
	}
	if pcr, err = ukiread.PCR11(bytes.NewReader(img)); err != nil {
		return nil, pcr, fmt.Errorf("when predicting the image's PCR 11: %w", err)
	}
	sig, err := tpmseal.SignPCR11(pcr, keys...)
	if err != nil {
		return nil, pcr, err
	}
	return withSections(sections, uki.Section{Name: ".pcrsig", Data: sig}), pcr, nil
}

// copiedPCRSections returns sections with the .pcrpkey and .pcrsig of the
// UKI in file, unchanged: a test's UKI that carries a release's signature
// of another image's PCR 11.
func copiedPCRSections(sections []uki.Section, file string) ([]uki.Section, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("when opening the UKI to copy PCR sections from: %w", err)
	}
	defer f.Close()
	for _, name := range []string{".pcrpkey", ".pcrsig"} {
		data, err := ukiread.Section(f, name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if data == nil {
			return nil, fmt.Errorf("%s has no %s section", file, name)
		}
		sections = withSections(sections, uki.Section{Name: name, Data: data})
	}
	return sections, nil
}

// withSections adds extra before the last of sections, the kernel, which
// build/uki's Sections puts last.
func withSections(sections []uki.Section, extra ...uki.Section) []uki.Section {
	n := len(sections)
	out := append([]uki.Section{}, sections[:n-1]...)
	out = append(out, extra...)
	return append(out, sections[n-1])
}

// readPCRKey reads an RSA private key from PEM, PKCS #8 (as openssl
// genrsa writes it) or PKCS #1.
func readPCRKey(file string) (*rsa.PrivateKey, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("when reading the PCR key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("PCR key %s: no PEM block", file)
	}
	switch block.Type {
	case "RSA PRIVATE KEY":
		k, err := x509.ParsePKCS1PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PCR key %s: %w", file, err)
		}
		return k, nil
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PCR key %s: %w", file, err)
		}
		rk, ok := k.(*rsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("PCR key %s: a %T, want RSA", file, k)
		}
		return rk, nil
	}
	return nil, fmt.Errorf("PCR key %s: a PEM %s, want a private key", file, block.Type)
}
