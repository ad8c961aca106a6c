package main

import (
	"flag"
	"fmt"
	"os"

	"cairn.dev/cairn/build/disk"
)

func diskCmd(args []string) error {
	fs := flag.NewFlagSet("disk", flag.ExitOnError)
	ukiPath := fs.String("uki", "", "unified kernel image to boot")
	size := fs.Int64("size-mib", disk.DefaultSize/disk.MiB, "image size in MiB")
	espSize := fs.Int64("esp-mib", disk.DefaultESPSize/disk.MiB, "EFI system partition size in MiB")
	out := fs.String("o", "", "output file")
	fs.Parse(args)
	if err := need(map[string]string{"uki": *ukiPath, "o": *out}); err != nil {
		return err
	}
	tmp := *out + ".tmp"
	err := disk.Write(tmp, disk.Config{
		Size:    *size * disk.MiB,
		ESPSize: *espSize * disk.MiB,
		Files:   map[string]string{disk.BootPath: *ukiPath},
		Dirs:    []string{"/cairn"},
	})
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, *out); err != nil {
		return err
	}
	fmt.Printf("image: disk %s, %d MiB (ESP %d MiB, rest free for data)\n", *out, *size, *espSize)
	return nil
}
