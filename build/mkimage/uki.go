package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"

	"cairn.dev/cairn/build/uki"
	ukiread "cairn.dev/cairn/pkg/uki"
)

func ukiCmd(args []string) error {
	fs := flag.NewFlagSet("uki", flag.ExitOnError)
	stub := fs.String("stub", "", "systemd EFI stub (linuxx64.efi.stub)")
	kernel := fs.String("kernel", "", "kernel image (vmlinuz)")
	initrd := fs.String("initramfs", "", "compressed initramfs")
	cmdline := fs.String("cmdline", "", "file holding the kernel command line")
	release := fs.String("release", "", "kernel release, e.g. 6.1.0-56-amd64")
	version := fs.String("version", "dev", "Cairn version for os-release")
	out := fs.String("o", "", "output file")
	var pcrKeys []string
	fs.Func("pcr-key", "release PCR key (RSA-2048, PEM): sign the image's PCR 11 with it (.pcrsig); the first is the image's (.pcrpkey), a second one (the key a rotation replaces) signs too", func(v string) error {
		pcrKeys = append(pcrKeys, v)
		return nil
	})
	pcrFrom := fs.String("pcr-sections-from", "", "UKI whose .pcrpkey and .pcrsig to copy, unchanged (a test image)")
	fs.Parse(args)
	if len(pcrKeys) > 0 && *pcrFrom != "" {
		return fmt.Errorf("-pcr-key and -pcr-sections-from exclude each other")
	}
	if err := need(map[string]string{"stub": *stub, "kernel": *kernel, "initramfs": *initrd,
		"cmdline": *cmdline, "release": *release, "o": *out}); err != nil {
		return err
	}
	inputs := map[string][]byte{}
	for _, path := range []string{*stub, *kernel, *initrd, *cmdline} {
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("when reading input: %w", err)
		}
		inputs[path] = data
	}
	// The stub hands .cmdline to the kernel as is; a trailing newline from
	// the file would become part of the last parameter.
	line := strings.TrimSpace(string(inputs[*cmdline]))
	sections := uki.Sections(
		uki.OSRelease(*version, *release), []byte(line), []byte(*release),
		inputs[*initrd], inputs[*kernel])
	var err error
	var signed [32]byte
	switch {
	case len(pcrKeys) > 0:
		sections, signed, err = pcrSections(inputs[*stub], sections, pcrKeys)
	case *pcrFrom != "":
		sections, err = copiedPCRSections(sections, *pcrFrom)
	}
	if err != nil {
		return err
	}
	img, err := uki.Build(inputs[*stub], sections)
	if err != nil {
		return err
	}
	if err := writeFile(*out, img); err != nil {
		return fmt.Errorf("when writing the unified kernel image: %w", err)
	}
	// What a seal bound to this image will name: the stub's
	// measurements, which a Secure Boot signature leaves alone.
	pcr, err := ukiread.PCR11(bytes.NewReader(img))
	if err != nil {
		return fmt.Errorf("when predicting the image's PCR 11: %w", err)
	}
	if len(pcrKeys) > 0 && pcr != signed {
		return fmt.Errorf("the image's PCR 11 is %x, its signature approves %x: .pcrsig changed a measurement", pcr, signed)
	}
	how := "unsigned"
	switch {
	case len(pcrKeys) > 0:
		how = fmt.Sprintf("signed by %d PCR key(s)", len(pcrKeys))
	case *pcrFrom != "":
		how = "with the PCR signature of " + *pcrFrom
	}
	fmt.Printf("image: unified kernel image %s (%s), PCR 11 after the stub %x, %s\n", mb(int64(len(img))), *out, pcr, how)
	return nil
}
