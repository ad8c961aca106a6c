// Command pauseimage builds the pause program (build/pause), static, and
// writes the pause image of Cairn's pods as an OCI archive that containerd
// imports at start (node/kubernetes):
//
//	go run ./build/pauseimage -out out/kubernetes/bin/pause.oci.tar
//
// With -pkg, -path and -ref it packs another program of the repository
// the same way, such as the e2e suites' test agent, which the harness
// pushes to its registry:
//
//	go run ./build/pauseimage -pkg ./build/testagent -path /agent \
//	  -ref docker.io/cairn/agent:1 -out out/testagent.oci.tar
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"cairn.dev/cairn/build/goprog"
	"cairn.dev/cairn/pkg/ociimage"
)

func main() {
	out := flag.String("out", "", "where to write the image archive")
	ref := flag.String("ref", "registry.k8s.io/pause:3.10", "the image's name (node/kubernetes.PauseImage)")
	pkg := flag.String("pkg", "./build/pause", "the program's package")
	file := flag.String("path", "/pause", "the program's path in the image, its entrypoint")
	flag.Parse()
	if *out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: pauseimage [-pkg PKG -path PATH -ref REF] -out FILE")
		os.Exit(2)
	}
	if err := run(*out, *ref, *pkg, *file); err != nil {
		fmt.Fprintf(os.Stderr, "pauseimage: %v\n", err)
		os.Exit(1)
	}
}

func run(out, ref, pkg, file string) error {
	data, err := goprog.Static("", pkg)
	if err != nil {
		return err
	}
	img, err := ociimage.Build([]string{file}, []ociimage.File{{Path: file, Mode: 0o755, Data: data}})
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := img.WriteArchive(&buf, ref); err != nil {
		return err
	}
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("when writing the image: %w", err)
	}
	return nil
}
