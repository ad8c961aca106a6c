// Command mkimage builds the pieces of a Cairn boot image, one subcommand
// per make step:
//
//	mkimage system -cmdline build/cmdline -cmdline-out cmdline
//	               [-deps FILE] [-kubernetes DIR] -o system.img
//	mkimage initramfs -kernel DIR -init BIN [-modules=false]
//	                  [-system-links=false] -o initramfs.img
//	mkimage uki -stub linuxx64.efi.stub -kernel vmlinuz -initramfs initramfs.img
//	            -cmdline cmdline -release RELEASE -o cairn.efi
//	mkimage disk -uki cairn.efi [-system system.img] -o cairn.img
//
// The logic lives in build/system, build/modules, build/initramfs,
// build/uki and build/disk; this file only parses flags and reports what
// each step made.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	steps := map[string]func(args []string) error{
		"system":    systemCmd,
		"initramfs": initramfsCmd,
		"uki":       ukiCmd,
		"disk":      diskCmd,
	}
	step, ok := steps[os.Args[1]]
	if !ok {
		usage()
	}
	if err := step(os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "mkimage %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: mkimage system|initramfs|uki|disk [flags]; see -h of each")
	os.Exit(2)
}

// need fails when a required flag is empty.
func need(flags map[string]string) error {
	for name, value := range flags {
		if value == "" {
			return fmt.Errorf("flag -%s is required", name)
		}
	}
	return nil
}

// writeFile writes data to a temporary file next to path and renames it
// into place, so make never sees half an output.
func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func mb(n int64) string {
	return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
}
