// Command testimages builds the container images that Kubernetes'
// conformance tests run (k8s.io/kubernetes/test/utils/image), from source
// and from Debian's packages, since nothing here is pulled from the
// internet, and pushes them into the registry of make cluster:
//
//	go run ./build/testimages -kube build/kubernetes -push 127.0.0.1:5000 \
//	    -repo-list out/conformance/repo-list.yaml
//
// Each image is pushed under the name the suite gives it, below the
// registry the nodes reach (-registry, 10.42.0.1:5000), and -repo-list is
// written: the KUBE_TEST_REPO_LIST file that points the suite's registries
// there. The images (images.go) are pause, busybox, agnhost, nginx,
// kitten, nautilus, glibc-dns-testing, sample-apiserver, etcd, nonewprivs
// and nonroot; the programs they carry from Debian come from the build
// machine, installed by build/deps.sh conformance, but nginx, whose
// package is downloaded and unpacked.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"cairn.dev/cairn/pkg/ociimage"
)

func main() {
	kube := flag.String("kube", "build/kubernetes", "the module of the Kubernetes payload, whose release agnhost is built at")
	registry := flag.String("registry", "10.42.0.1:5000", "the registry as the nodes reach it: the images' names start with it")
	push := flag.String("push", "127.0.0.1:5000", "where this machine reaches the same registry, to push the images")
	repoList := flag.String("repo-list", "", "where to write the KUBE_TEST_REPO_LIST file (default: none)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: testimages [-kube DIR] [-registry ADDR] [-push ADDR] [-repo-list FILE]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *kube, *registry, *push, *repoList); err != nil {
		fmt.Fprintf(os.Stderr, "testimages: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kube, registry, push, repoList string) error {
	b := &builder{kube: kube}
	client := &http.Client{Timeout: 10 * time.Minute}
	for _, img := range images {
		start := time.Now()
		built, err := img.build(b)
		if err != nil {
			return fmt.Errorf("when building %s: %w", img.ref(""), err)
		}
		var archive bytes.Buffer
		if err := built.WriteArchive(&archive, img.ref(registry)); err != nil {
			return fmt.Errorf("when writing %s: %w", img.ref(""), err)
		}
		pushed, err := ociimage.PushArchive(ctx, client, "http://"+push, &archive, func(string) (string, string, error) {
			return img.repository, img.tags[0], nil
		})
		if err != nil {
			return fmt.Errorf("when pushing %s to %s (is make cluster up?): %w", img.ref(""), push, err)
		}
		// Further tags name the same manifest.
		for _, tag := range img.tags[1:] {
			reg := ociimage.Registry{Client: client, Base: "http://" + push, Repository: img.repository}
			if err := reg.PushManifest(ctx, tag, built.Manifest); err != nil {
				return fmt.Errorf("when tagging %s as %s: %w", img.ref(""), tag, err)
			}
			pushed = append(pushed, img.repository+":"+tag)
		}
		fmt.Printf("testimages: %s (%d MiB) pushed as %s, in %s\n", img.ref(registry), built.Layer.Descriptor.Size>>20,
			strings.Join(pushed, ", "), time.Since(start).Round(time.Second))
	}
	if repoList == "" {
		return nil
	}
	list := fmt.Sprintf("# KUBE_TEST_REPO_LIST of e2e.test: the registries of the images build/testimages\n"+
		"# built, mapped to the cluster's registry at %[1]s.\n"+
		"promoterE2eRegistry: %[1]s/e2e-test-images\n"+
		"gcRegistry: %[1]s\n"+
		"gcEtcdRegistry: %[1]s\n", registry)
	if err := os.WriteFile(repoList, []byte(list), 0o644); err != nil {
		return fmt.Errorf("when writing the repository list: %w", err)
	}
	return nil
}
