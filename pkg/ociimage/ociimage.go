// Package ociimage builds small container images in Go and writes them as
// OCI image layout archives, which `ctr images import` reads: the pause
// image of every pod, built with Cairn rather than pulled.
//
//	files ─▶ layer tar ─┐
//	entrypoint ─▶ config ┼─▶ manifest ─▶ index.json ─▶ archive (tar)
//	                     └── blobs/sha256/<digest> for each
//
// The output is deterministic: the same files and entrypoint give the same
// bytes, so a build that changed nothing changes no image.
package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"
)

// Media types of the OCI image specification.
const (
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
)

// Annotations that name an image in an index: containerd's, with the full
// reference, and OCI's, with the tag.
const (
	// AnnotationImageName is containerd's: the full reference.
	AnnotationImageName = "io.containerd.image.name"
	// AnnotationRefName is the tag of a manifest in an index;
	// PushArchive pushes the manifest under it.
	AnnotationRefName = "org.opencontainers.image.ref.name"
)

// A File is one entry of an image's only layer: a regular file, or a
// directory or a symlink as its Mode says.
type File struct {
	// Path is the file's absolute path in the image, like "/pause".
	Path string
	// Mode is the permission bits, and fs.ModeDir for a directory (with
	// fs.ModeSticky if it has the sticky bit) or fs.ModeSymlink for a
	// symlink to Link; a regular file may have fs.ModeSetuid. Parent
	// directories not listed are 0755.
	Mode fs.FileMode
	Data []byte
	// Link is a symlink's target.
	Link string
}

// A Config is how an image runs, when a pod does not say otherwise: its
// entrypoint, the arguments it gets (Cmd), its environment ("NAME=value"),
// and the user it runs as ("1234"; empty is root).
type Config struct {
	Entrypoint, Cmd, Env []string
	User                 string
}

// A Descriptor points at a blob.
type Descriptor struct {
	MediaType string `json:"mediaType"`
	// ArtifactType is the type of an artifact's manifest that the
	// descriptor points at (OCI 1.1), such as a release's.
	ArtifactType string            `json:"artifactType,omitempty"`
	Digest       string            `json:"digest"`
	Size         int64             `json:"size"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	Platform     *Platform         `json:"platform,omitempty"`
}

// Platform is what an image runs on.
type Platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// A Blob is content and its descriptor.
type Blob struct {
	Descriptor Descriptor
	Data       []byte
}

// Reader reads the blob's data.
func (b Blob) Reader() io.Reader { return bytes.NewReader(b.Data) }

// An Image is a built image: its manifest and every blob it refers to.
type Image struct {
	Manifest Blob
	Config   Blob
	Layer    Blob
}

// epoch is the modification time of every file in a layer and archive:
// fixed, for reproducible bytes.
var epoch = time.Unix(0, 0).UTC()

// NewBlob returns data as a blob of mediaType.
func NewBlob(mediaType string, data []byte) Blob {
	return Blob{Descriptor: Descriptor{MediaType: mediaType, Digest: Digest(data), Size: int64(len(data))}, Data: data}
}

// Build makes a linux/amd64 image of files that runs entrypoint.
func Build(entrypoint []string, files []File) (*Image, error) {
	return BuildConfig(Config{Entrypoint: entrypoint}, files)
}

// BuildConfig makes a linux/amd64 image of files that runs as c says.
func BuildConfig(c Config, files []File) (*Image, error) {
	layer, err := layerTar(files)
	if err != nil {
		return nil, err
	}
	img := &Image{Layer: NewBlob(MediaTypeLayer, layer)}
	run := map[string]any{"Entrypoint": c.Entrypoint}
	if c.Cmd != nil {
		run["Cmd"] = c.Cmd
	}
	if c.Env != nil {
		run["Env"] = c.Env
	}
	if c.User != "" {
		run["User"] = c.User
	}
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config":       run,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{img.Layer.Descriptor.Digest}},
	})
	if err != nil {
		return nil, fmt.Errorf("when encoding the image config: %w", err)
	}
	img.Config = NewBlob(MediaTypeConfig, config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     MediaTypeManifest,
		"config":        img.Config.Descriptor,
		"layers":        []Descriptor{img.Layer.Descriptor},
	})
	if err != nil {
		return nil, fmt.Errorf("when encoding the image manifest: %w", err)
	}
	img.Manifest = NewBlob(MediaTypeManifest, manifest)
	return img, nil
}

// layerTar is an uncompressed tar of files and their parent directories,
// sorted, owned by root, dated epoch. Two files of one path are an error.
func layerTar(files []File) ([]byte, error) {
	sorted := append([]File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for i, f := range sorted {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path {
			return nil, fmt.Errorf("image file path %q is not absolute and clean", f.Path)
		}
		if f.Path == "/" {
			return nil, fmt.Errorf("image file path %q is the root", f.Path)
		}
		name := strings.TrimPrefix(f.Path, "/")
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			if dirs[d] {
				break
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
				return nil, fmt.Errorf("when writing the layer: %w", err)
			}
		}
		if dirs[name] || (i > 0 && sorted[i-1].Path == f.Path) {
			return nil, fmt.Errorf("image file path %s is listed twice, or as a file and a directory", f.Path)
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(f.Mode.Perm()), Size: int64(len(f.Data)), ModTime: epoch, Format: tar.FormatPAX}
		switch {
		case f.Mode.IsDir():
			dirs[name] = true
			h.Typeflag, h.Name, h.Size = tar.TypeDir, name+"/", 0
			if f.Mode&fs.ModeSticky != 0 {
				h.Mode |= 0o1000
			}
		case f.Mode&fs.ModeSymlink != 0:
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, f.Link, 0
		case f.Mode&fs.ModeSetuid != 0:
			h.Mode |= 0o4000
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("when writing the layer: %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, fmt.Errorf("when writing the layer: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("when writing the layer: %w", err)
	}
	return buf.Bytes(), nil
}

// WriteArchive writes img as an OCI image layout in a tar to w, named ref
// (a full reference like "registry.k8s.io/pause:3.10").
func (img *Image) WriteArchive(w io.Writer, ref string) error {
	_, tag, ok := strings.Cut(path.Base(ref), ":")
	if !ok || tag == "" {
		return fmt.Errorf("image reference %q has no tag", ref)
	}
	desc := img.Manifest.Descriptor
	desc.Annotations = map[string]string{AnnotationImageName: ref, AnnotationRefName: tag}
	desc.Platform = &Platform{Architecture: "amd64", OS: "linux"}
	var blobs []ArchiveBlob
	for _, b := range []Blob{img.Layer, img.Config, img.Manifest} {
		blobs = append(blobs, ArchiveBlob{Descriptor: b.Descriptor, Content: b.Reader()})
	}
	return WriteLayout(w, []Descriptor{desc}, blobs)
}

// An ArchiveBlob is a blob for WriteLayout: its descriptor, and its
// content, read once as it is written.
type ArchiveBlob struct {
	Descriptor Descriptor
	Content    io.Reader
}

// WriteLayout writes an OCI image layout in a tar to w: the oci-layout
// file, index.json listing index, then blobs in order. index.json comes
// before the blobs so that PushArchive can push in one pass. Each blob's
// content is streamed, and must be exactly its descriptor's size; its
// digest is the caller's to get right.
func WriteLayout(w io.Writer, index []Descriptor, blobs []ArchiveBlob) error {
	data, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     MediaTypeIndex,
		"manifests":     index,
	})
	if err != nil {
		return fmt.Errorf("when encoding the image index: %w", err)
	}
	tw := tar.NewWriter(w)
	put := func(name string, size int64, content io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: size, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return fmt.Errorf("when writing %s to the archive: %w", name, err)
		}
		if n, err := io.Copy(tw, content); err != nil {
			return fmt.Errorf("when writing %s to the archive: %w", name, err)
		} else if n != size {
			return fmt.Errorf("when writing %s to the archive: %d bytes, want %d", name, n, size)
		}
		return nil
	}
	layout := `{"imageLayoutVersion":"1.0.0"}`
	if err := put("oci-layout", int64(len(layout)), strings.NewReader(layout)); err != nil {
		return err
	}
	if err := put("index.json", int64(len(data)), bytes.NewReader(data)); err != nil {
		return err
	}
	for _, b := range blobs {
		name := "blobs/sha256/" + strings.TrimPrefix(b.Descriptor.Digest, "sha256:")
		if err := put(name, b.Descriptor.Size, b.Content); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("when finishing the archive: %w", err)
	}
	return nil
}
