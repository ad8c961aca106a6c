package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"cairn.dev/cairn/build/modules"
	"cairn.dev/cairn/build/system"
)

func systemCmd(args []string) error {
	fs := flag.NewFlagSet("system", flag.ExitOnError)
	base := fs.String("cmdline", "", "file holding the base kernel command line (build/cmdline)")
	cmdlineOut := fs.String("cmdline-out", "", "write the base command line with the system image's verity parameters here")
	depfile := fs.String("deps", "", "write a make rule naming the host files read here")
	kernel := fs.String("kernel", "", "unpacked kernel package (holds lib/modules/<release>); carry its modules.Carried at "+system.ModulesDir)
	release := fs.String("release", "", "kernel release, e.g. 6.1.0-56-amd64")
	kube := fs.String("kubernetes", "", "carry this directory of the Kubernetes payload (build/kubernetes) at /system"+system.KubernetesBin)
	out := fs.String("o", "", "output file")
	fs.Parse(args)
	if err := need(map[string]string{"cmdline": *base, "cmdline-out": *cmdlineOut, "o": *out}); err != nil {
		return err
	}
	baseLine, err := os.ReadFile(*base)
	if err != nil {
		return fmt.Errorf("when reading the command line: %w", err)
	}
	paths := system.HostBinaryPaths(system.HostBinaries)
	c := system.Config{Binaries: paths, Kubernetes: *kube}
	if *kernel != "" {
		if c.Modules, err = modules.Load(filepath.Join(*kernel, "lib/modules", *release), modules.Carried); err != nil {
			return err
		}
	}
	img, err := system.Build(*out, c)
	if err != nil {
		return err
	}
	line := system.Cmdline(string(baseLine), img.Params)
	if err := writeFile(*cmdlineOut, []byte(line+"\n")); err != nil {
		return fmt.Errorf("when writing the command line: %w", err)
	}
	if *depfile != "" {
		deps := append(img.HostFiles, img.KubernetesFiles...)
		if *kube != "" {
			// The payload's directories too: a program added to the
			// payload changes its directory, not a file named here.
			deps = append(deps, payloadDirs(*kube, img.KubernetesFiles)...)
		}
		if err := writeDepfile(*depfile, *out+" "+*cmdlineOut, deps); err != nil {
			return fmt.Errorf("when writing %s: %w", *depfile, err)
		}
	}
	if c.Modules != nil {
		fmt.Printf("image: system image carries %d kernel modules (%s uncompressed)\n", len(c.Modules.Modules), mb(c.Modules.ModuleBytes))
	}
	fmt.Printf("image: system image %s: EROFS %s + verity hash tree %d KiB; %d host binaries with their libraries (%d files)\n",
		mb(img.FilesystemSize+img.TreeSize), mb(img.FilesystemSize), img.TreeSize>>10, len(paths), len(img.HostFiles))
	if *kube != "" {
		fmt.Printf("image: system image carries the Kubernetes payload of %s at /system%s: %d files, %s before compression\n",
			*kube, system.KubernetesBin, len(img.KubernetesFiles), mb(img.KubernetesSize))
	}
	fmt.Printf("image: system image verity root hash %x (a node mounts the slot that matches it)\n", img.Params.RootHash)
	return nil
}

// payloadDirs are dir and the directories below it that hold files, each
// once, in the order files first names them.
func payloadDirs(dir string, files []string) []string {
	dirs := []string{dir}
	seen := map[string]bool{dir: true}
	for _, f := range files {
		if d := filepath.Dir(f); !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	return dirs
}

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
