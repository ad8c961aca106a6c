// Command release makes Cairn's signed release artifact (pkg/release) from
// the outputs of `make image`, and the version and release key it needs:
//
//	release -version-out out/version [-version V]
//	release -genkey -key .cache/release/dev-release.key
//	release -key KEY -uki out/cairn.efi -system out/system.img
//	        -cmdline out/cmdline -version-file out/version
//	        [-kubernetes-version v1.37.2] -pub out/release.pub
//	        -o out/release.oci.tar [-push HOST/REPO[:TAG] [-plain-http]]
//
// The version is computed from git here and nowhere else (gitVersion):
// make writes it to out/version, which /init and the UKI are built with
// and the release is named by, so a node reports exactly its release's
// version. -genkey makes the release key when it is missing and prints its
// public half; make keeps the development key in the git-ignored .cache,
// so it never enters the repository. The archive is an OCI image layout
// holding the release and its signature, which `launch-cluster -push`
// pushes as it is; -push pushes the same to a registry directly.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"cairn.dev/cairn/build/system"
	"cairn.dev/cairn/pkg/cmdline"
	"cairn.dev/cairn/pkg/ociimage"
	"cairn.dev/cairn/pkg/release"
)

func main() {
	var c config
	flag.StringVar(&c.versionOut, "version-out", "", "write the version to this file (only when it changed) and exit")
	flag.StringVar(&c.version, "version", "", "the version, instead of the one git gives")
	flag.StringVar(&c.versionFile, "version-file", "", "read the version from this file (written by -version-out)")
	flag.BoolVar(&c.genkey, "genkey", false, "make the release key -key if it is missing, print its public key and exit")
	flag.StringVar(&c.key, "key", "", "the release key (PEM, PKCS #8 ed25519)")
	flag.StringVar(&c.uki, "uki", "", "the unified kernel image (out/cairn.efi)")
	flag.StringVar(&c.system, "system", "", "the system image with its hash tree (out/system.img)")
	flag.StringVar(&c.cmdline, "cmdline", "", "the UKI's command line (out/cmdline), which holds cairn.verity=")
	flag.StringVar(&c.kubernetes, "kubernetes-version", "", "the Kubernetes release the system image carries; empty when none")
	flag.StringVar(&c.arch, "arch", "amd64", "the architecture of the images, GOARCH spelling")
	flag.StringVar(&c.name, "name", "cairn/release", "the repository the archive names the release in")
	flag.StringVar(&c.pub, "pub", "", "write the release key's public half here")
	flag.StringVar(&c.out, "o", "", "write the release archive here")
	flag.StringVar(&c.push, "push", "", "push the release to HOST/REPO[:TAG] (TAG: the version)")
	flag.BoolVar(&c.plainHTTP, "plain-http", false, "speak plain HTTP to the -push registry")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "release: unexpected arguments; see -h")
		os.Exit(2)
	}
	if err := run(c); err != nil {
		fmt.Fprintf(os.Stderr, "release: %v\n", err)
		os.Exit(1)
	}
}

type config struct {
	versionOut, version, versionFile    string
	genkey                              bool
	key, uki, system, cmdline, pub, out string
	kubernetes, arch, name, push        string
	plainHTTP                           bool
}

func run(c config) error {
	switch {
	case c.versionOut != "":
		return writeVersion(c.versionOut, c.version)
	case c.genkey:
		if c.key == "" {
			return errors.New("-genkey needs -key")
		}
		key, err := loadOrMakeKey(c.key)
		if err != nil {
			return err
		}
		fmt.Println(key.Public())
		return nil
	}
	for name, v := range map[string]string{"key": c.key, "uki": c.uki, "system": c.system, "cmdline": c.cmdline, "o": c.out} {
		if v == "" {
			return fmt.Errorf("flag -%s is required", name)
		}
	}
	start := time.Now()
	a, err := build(c)
	if err != nil {
		return err
	}
	if c.pub != "" {
		if err := writeAtomic(c.pub, []byte(a.pub.String()+"\n"), 0o644); err != nil {
			return fmt.Errorf("when writing the public key: %w", err)
		}
	}
	if err := writeArchive(c.out, c.name, a.Artifact, c.uki, c.system); err != nil {
		return err
	}
	st, err := os.Stat(c.out)
	if err != nil {
		return err
	}
	fmt.Printf("release: %s (%s, UKI %s, system image %s), signed by key %s: %s, %.1f MB, in %.1f s\n",
		a.Metadata.Version, a.Metadata.Architecture, mb(a.UKI.Size), mb(a.System.Size), a.pub.ID(),
		c.out, float64(st.Size())/(1<<20), time.Since(start).Seconds())
	if c.push != "" {
		return push(c, a.Artifact)
	}
	return nil
}

// signed is an artifact and the public key that signed it.
type signed struct {
	*release.Artifact
	pub release.PublicKey
}

// build reads the image's outputs, hashes the images and signs the
// release.
func build(c config) (*signed, error) {
	keyData, err := os.ReadFile(c.key)
	if err != nil {
		return nil, fmt.Errorf("when reading the release key (make one with -genkey): %w", err)
	}
	key, err := release.ParsePrivateKey(keyData)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.key, err)
	}
	version := c.version
	if c.versionFile != "" {
		data, err := os.ReadFile(c.versionFile)
		if err != nil {
			return nil, fmt.Errorf("when reading the version: %w", err)
		}
		version = strings.TrimSpace(string(data))
	}
	git, err := gitVersion(".")
	if err != nil {
		return nil, err
	}
	if version == "" {
		version = git.version.String()
	}
	line, err := os.ReadFile(c.cmdline)
	if err != nil {
		return nil, fmt.Errorf("when reading the command line: %w", err)
	}
	verity, ok := cmdline.Parse(string(line)).Lookup(system.VerityFlag)
	if !ok {
		return nil, fmt.Errorf("command line %s has no %s=", c.cmdline, system.VerityFlag)
	}
	uki, err := describeFile(c.uki, release.MediaTypeUKI)
	if err != nil {
		return nil, err
	}
	sys, err := describeFile(c.system, release.MediaTypeSystem)
	if err != nil {
		return nil, err
	}
	a, err := release.NewArtifact(release.Metadata{
		Version:           version,
		Commit:            git.commit,
		KubernetesVersion: c.kubernetes,
		Architecture:      c.arch,
		Verity:            verity.Value,
	}, uki, sys, key)
	if err != nil {
		return nil, err
	}
	return &signed{Artifact: a, pub: key.Public()}, nil
}

// describeFile hashes a file into a descriptor.
func describeFile(path, mediaType string) (ociimage.Descriptor, error) {
	f, err := os.Open(path)
	if err != nil {
		return ociimage.Descriptor{}, fmt.Errorf("when reading %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return ociimage.Descriptor{}, fmt.Errorf("when hashing %s: %w", path, err)
	}
	return ociimage.Descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(h.Sum(nil)), Size: n}, nil
}

// writeArchive writes the release archive next to out and renames it into
// place, so make never sees half an archive.
func writeArchive(out, name string, a *release.Artifact, ukiPath, systemPath string) error {
	uki, err := os.Open(ukiPath)
	if err != nil {
		return err
	}
	defer uki.Close()
	sys, err := os.Open(systemPath)
	if err != nil {
		return err
	}
	defer sys.Close()
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("when writing the release archive: %w", err)
	}
	defer os.Remove(tmp)
	if err := a.WriteArchive(f, name, uki, sys); err != nil {
		f.Close()
		return fmt.Errorf("when writing the release archive: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("when writing the release archive: %w", err)
	}
	return os.Rename(tmp, out)
}

// push pushes the archive just written to the -push registry: the release
// under the reference's tag (or its version), its signature under its
// signature tag.
func push(c config, a *release.Artifact) error {
	ref, err := ociimage.ParseReference(c.push)
	if err != nil {
		// HOST/REPO without a tag is the version's tag.
		if ref, err = ociimage.ParseReference(c.push + ":" + a.Tag()); err != nil {
			return fmt.Errorf("-push: %w", err)
		}
	}
	if ref.Digest != "" {
		return fmt.Errorf("-push %s: name a tag, not a digest", c.push)
	}
	f, err := os.Open(c.out)
	if err != nil {
		return err
	}
	defer f.Close()
	reg := ref.Registry(nil, c.plainHTTP)
	repoTag := func(name string) (string, string, error) {
		_, tag, _ := strings.Cut(name, ":")
		if tag == a.Tag() {
			tag = ref.Tag
		}
		return ref.Repository, tag, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pushed, err := ociimage.PushArchive(ctx, reg.Client, reg.Base, f, repoTag)
	if err != nil {
		return err
	}
	fmt.Printf("release: pushed %s to %s\n", strings.Join(pushed, " and "), ref.Host)
	return nil
}

// loadOrMakeKey reads the release key at path, or makes it there (0600,
// in a directory of 0700) when there is none.
func loadOrMakeKey(path string) (release.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		return release.ParsePrivateKey(data)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("when reading the release key: %w", err)
	}
	key, err := release.GenerateKey()
	if err != nil {
		return nil, err
	}
	pem, err := release.MarshalPrivateKey(key)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("when making the release key's directory: %w", err)
	}
	if err := writeAtomic(path, pem, 0o600); err != nil {
		return nil, fmt.Errorf("when writing the release key: %w", err)
	}
	fmt.Fprintf(os.Stderr, "release: made a new release key %s in %s\n", key.Public().ID(), path)
	return key, nil
}

// writeVersion writes the version (v, or git's) to path unless it holds
// it already, so that make rebuilds what carries the version only when it
// changed.
func writeVersion(path, v string) error {
	if v == "" {
		git, err := gitVersion(".")
		if err != nil {
			return err
		}
		v = git.version.String()
	} else if _, err := release.ParseVersion(v); err != nil {
		return fmt.Errorf("-version: %w", err)
	}
	line := []byte(v + "\n")
	if old, err := os.ReadFile(path); err == nil && string(old) == string(line) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := writeAtomic(path, line, 0o644); err != nil {
		return fmt.Errorf("when writing the version: %w", err)
	}
	fmt.Printf("release: version %s\n", v)
	return nil
}

// writeAtomic writes data to a temporary file next to path, with mode
// perm, and renames it into place.
func writeAtomic(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func mb(n int64) string {
	return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
}
