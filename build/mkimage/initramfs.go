package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"cairn.dev/cairn/build/elfdeps"
	"cairn.dev/cairn/build/initramfs"
	"cairn.dev/cairn/build/modules"
)

func initramfsCmd(args []string) error {
	fs := flag.NewFlagSet("initramfs", flag.ExitOnError)
	kernel := fs.String("kernel", "", "unpacked kernel package (holds lib/modules/<release>)")
	release := fs.String("release", "", "kernel release, e.g. 6.1.0-56-amd64")
	initBin := fs.String("init", "", "static binary to run as /init")
	withModules := fs.Bool("modules", true, "carry the kernel modules")
	withHost := fs.Bool("host-binaries", true, "carry initramfs.HostBinaries and their libraries")
	depfile := fs.String("deps", "", "write a make rule naming the host files read here")
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
		set, err := modules.Load(filepath.Join(*kernel, "lib/modules", *release), modules.Carried)
		if err != nil {
			return err
		}
		a.AddModules(set)
		carried = fmt.Sprintf(", %d modules (%s uncompressed)", len(set.Modules), mb(set.ModuleBytes))
	}
	var hostFiles []string
	if *withHost {
		paths := initramfs.HostBinaryPaths(initramfs.HostBinaries)
		closure, err := elfdeps.Resolve(paths)
		if err != nil {
			return fmt.Errorf("when resolving host binaries: %w", err)
		}
		size, err := a.AddHostFiles(closure.Files)
		if err != nil {
			return err
		}
		for _, f := range closure.Files {
			hostFiles = append(hostFiles, f.Path)
		}
		carried += fmt.Sprintf(", %d host binaries with %d shared objects (%s, %d files)",
			len(paths), len(closure.Libraries), mb(size), len(closure.Files))
	}
	data, err := a.Compressed()
	if err != nil {
		return err
	}
	if err := writeFile(*out, data); err != nil {
		return fmt.Errorf("when writing the initramfs: %w", err)
	}
	if *depfile != "" {
		if err := writeDepfile(*depfile, *out, hostFiles); err != nil {
			return fmt.Errorf("when writing %s: %w", *depfile, err)
		}
	}
	fmt.Printf("image: %s %s, init %s%s\n", *name, mb(int64(len(data))), mb(int64(len(binary))), carried)
	return nil
}

// writeDepfile writes a make rule saying that target depends on files,
// plus an empty rule for each file, so that make rebuilds target when a
// carried binary or library changes and does not fail when one is gone.
func writeDepfile(path, target string, files []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:", target)
	for _, f := range files {
		if strings.ContainsAny(f, " \t\n:#$%\\") {
			return fmt.Errorf("path %q cannot be written in a make rule", f)
		}
		fmt.Fprintf(&b, " \\\n  %s", f)
	}
	b.WriteString("\n")
	for _, f := range files {
		fmt.Fprintf(&b, "%s:\n", f)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return writeFile(path, []byte(b.String()))
}
