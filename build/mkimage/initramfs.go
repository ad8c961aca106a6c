package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"cairn.dev/cairn/build/initramfs"
	"cairn.dev/cairn/build/modules"
	"cairn.dev/cairn/build/system"
)

func initramfsCmd(args []string) error {
	fs := flag.NewFlagSet("initramfs", flag.ExitOnError)
	kernel := fs.String("kernel", "", "unpacked kernel package (holds lib/modules/<release>)")
	release := fs.String("release", "", "kernel release, e.g. 6.1.0-56-amd64")
	initBin := fs.String("init", "", "static binary to run as /init")
	withModules := fs.Bool("modules", true, "carry the kernel modules the boot needs before the system partition (modules.Early)")
	withLinks := fs.Bool("system-links", true, "carry system.LoaderLinks, through which the system image's binaries run")
	out := fs.String("o", "", "output file")
	name := fs.String("name", "initramfs", "what to call the result in the report")
	fs.Parse(args)
	if err := need(map[string]string{"init": *initBin, "o": *out}); err != nil {
		return err
	}

	binary, err := os.ReadFile(*initBin)
	if err != nil {
		return fmt.Errorf("when reading /init: %w", err)
	}
	a := initramfs.New()
	a.AddInit(binary)
	carried := ""
	if *withModules {
		if err := need(map[string]string{"kernel": *kernel, "release": *release}); err != nil {
			return err
		}
		set, err := modules.Load(filepath.Join(*kernel, "lib/modules", *release), modules.Early())
		if err != nil {
			return err
		}
		a.AddModules(set)
		carried = fmt.Sprintf(", %d modules (%s uncompressed)", len(set.Modules), mb(set.ModuleBytes))
	}
	if *withLinks {
		for _, l := range system.LoaderLinks {
			a.Add(initramfs.Entry{Name: strings.TrimPrefix(l.Path, "/"), Mode: initramfs.TypeSymlink | 0o777, Data: []byte(l.Target)})
		}
		carried += fmt.Sprintf(", %d links into %s", len(system.LoaderLinks), system.MountPoint)
	}
	data, err := a.Compressed()
	if err != nil {
		return err
	}
	if err := writeFile(*out, data); err != nil {
		return fmt.Errorf("when writing the initramfs: %w", err)
	}
	fmt.Printf("image: %s %s, init %s%s\n", *name, mb(int64(len(data))), mb(int64(len(binary))), carried)
	return nil
}
