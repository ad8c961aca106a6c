package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"slices"
	"testing"
)

// readArchive returns the files of a tar archive by name.
func readArchive(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = data
	}
}

// blobOf returns the blob of digest d, checking that its content has it.
func blobOf(t *testing.T, files map[string][]byte, d Descriptor) []byte {
	t.Helper()
	data, ok := files["blobs/sha256/"+d.Digest[len("sha256:"):]]
	if !ok {
		t.Fatalf("no blob %s in the archive", d.Digest)
	}
	sum := sha256.Sum256(data)
	if "sha256:"+hex.EncodeToString(sum[:]) != d.Digest || int64(len(data)) != d.Size {
		t.Fatalf("blob %s has the wrong digest or size", d.Digest)
	}
	return data
}

func TestArchiveRoundTrip(t *testing.T) {
	files := []File{{Path: "/pause", Mode: 0o755, Data: []byte("\x7fELF...")}, {Path: "/etc/x/y", Mode: 0o600, Data: []byte("y")}}
	write := func() []byte {
		img, err := Build([]string{"/pause"}, files)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := img.WriteArchive(&buf, "registry.k8s.io/pause:3.10"); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	a := write()
	if !bytes.Equal(a, write()) {
		t.Error("two builds of the same image differ")
	}
	got := readArchive(t, a)
	if _, ok := got["oci-layout"]; !ok {
		t.Fatal("no oci-layout file")
	}
	var index struct {
		Manifests []Descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(got["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 1 || index.Manifests[0].Annotations[AnnotationImageName] != "registry.k8s.io/pause:3.10" ||
		index.Manifests[0].Annotations[AnnotationRefName] != "3.10" || index.Manifests[0].MediaType != MediaTypeManifest {
		t.Fatalf("index = %+v", index.Manifests)
	}
	var manifest struct {
		Config Descriptor   `json:"config"`
		Layers []Descriptor `json:"layers"`
	}
	if err := json.Unmarshal(blobOf(t, got, index.Manifests[0]), &manifest); err != nil {
		t.Fatal(err)
	}
	var config struct {
		Config struct{ Entrypoint []string }
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(blobOf(t, got, manifest.Config), &config); err != nil {
		t.Fatal(err)
	}
	if len(config.Config.Entrypoint) != 1 || config.Config.Entrypoint[0] != "/pause" {
		t.Errorf("entrypoint = %q", config.Config.Entrypoint)
	}
	if len(manifest.Layers) != 1 || len(config.RootFS.DiffIDs) != 1 || config.RootFS.DiffIDs[0] != manifest.Layers[0].Digest {
		t.Fatalf("layers %+v, diff IDs %q: want one uncompressed layer whose digest is its diff ID", manifest.Layers, config.RootFS.DiffIDs)
	}
	modes := map[string]int64{}
	for _, h := range layerHeaders(t, blobOf(t, got, manifest.Layers[0])) {
		modes[h.Name] = h.Mode
	}
	if modes["pause"] != 0o755 || modes["etc/x/y"] != 0o600 || modes["etc/"] != 0o755 || modes["etc/x/"] != 0o755 {
		t.Errorf("layer entries and modes = %v", modes)
	}
}

func TestBuildRefusesRelativePaths(t *testing.T) {
	if _, err := Build(nil, []File{{Path: "pause"}}); err == nil {
		t.Error("Build took a relative path")
	}
}

// TestBuildConfigEntries builds an image of a directory with the sticky
// bit, a symlink, a file and a set-user-ID file, run by a command with an
// environment as a user, and reads them back from its layer and config.
func TestBuildConfigEntries(t *testing.T) {
	img, err := BuildConfig(Config{Cmd: []string{"sh"}, Env: []string{"PATH=/bin"}, User: "1234"}, []File{
		{Path: "/bin/sh", Mode: fs.ModeSymlink | 0o777, Link: "busybox"},
		{Path: "/bin/busybox", Mode: 0o755, Data: []byte("\x7fELF")},
		{Path: "/bin/su", Mode: fs.ModeSetuid | 0o755, Data: []byte("\x7fELF")},
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
	})
	if err != nil {
		t.Fatal(err)
	}
	var config struct {
		Config struct {
			Entrypoint, Cmd, Env []string
			User                 string
		}
	}
	if err := json.Unmarshal(img.Config.Data, &config); err != nil {
		t.Fatal(err)
	}
	if c := config.Config; c.Entrypoint != nil || !slices.Equal(c.Cmd, []string{"sh"}) || !slices.Equal(c.Env, []string{"PATH=/bin"}) || c.User != "1234" {
		t.Errorf("config = %+v, want no entrypoint, Cmd sh, Env PATH=/bin, User 1234", config.Config)
	}
	got := map[string]string{}
	for _, h := range layerHeaders(t, img.Layer.Data) {
		got[h.Name] = fmt.Sprintf("%c %o %s", h.Typeflag, h.Mode, h.Linkname)
	}
	want := map[string]string{
		"bin/":        fmt.Sprintf("%c 755 ", tar.TypeDir),
		"bin/busybox": fmt.Sprintf("%c 755 ", tar.TypeReg),
		"bin/sh":      fmt.Sprintf("%c 777 busybox", tar.TypeSymlink),
		"bin/su":      fmt.Sprintf("%c 4755 ", tar.TypeReg),
		"tmp/":        fmt.Sprintf("%c 1777 ", tar.TypeDir),
	}
	if !maps.Equal(got, want) {
		t.Errorf("layer entries = %q, want %q", got, want)
	}
	for _, files := range [][]File{
		{{Path: "/a", Mode: 0o644}, {Path: "/a", Mode: 0o644}},
		{{Path: "/a", Mode: fs.ModeDir | 0o755}, {Path: "/a", Mode: 0o644}},
		{{Path: "/", Mode: fs.ModeDir | 0o755}},
	} {
		if _, err := Build(nil, files); err == nil {
			t.Errorf("Build of %+v = nil error, want one: a path twice, or the root", files)
		}
	}
}

// layerHeaders returns the headers of the entries of a layer's tar, in
// order.
func layerHeaders(t *testing.T, layer []byte) []*tar.Header {
	t.Helper()
	var hs []*tar.Header
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return hs
		}
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
}
