package ociimage

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"slices"
	"strings"
)

func decodeIndex(index []byte) ([]Descriptor, error) {
	var idx struct {
		Manifests []Descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(index, &idx); err != nil {
		return nil, fmt.Errorf("when decoding the archive's index.json: %w", err)
	}
	return idx.Manifests, nil
}

// PushArchive pushes every manifest an archive's index lists, and every
// blob of the archive, to the registry at base (like
// "http://127.0.0.1:5000"), in one pass over the archive: blobs stream
// from it to the registry as they come (a release's system image is over
// 100 MB), skipping those the registry holds, and the manifests follow in
// the index's order. repoTag maps each manifest's name (its
// io.containerd.image.name annotation) to a repository and tag; all must
// be in one repository. The archive must hold index.json before its
// blobs, as WriteLayout writes it. It returns the references it pushed.
func PushArchive(ctx context.Context, client *http.Client, base string, archive io.Reader, repoTag func(name string) (repo, tag string, err error)) ([]string, error) {
	tr := tar.NewReader(archive)
	var index []Descriptor
	var tags []string
	reg := Registry{Client: client, Base: base}
	manifests := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("when reading the archive: %w", err)
		}
		switch {
		case h.Name == "index.json":
			data, err := io.ReadAll(io.LimitReader(tr, MaxManifestSize))
			if err != nil {
				return nil, fmt.Errorf("when reading index.json from the archive: %w", err)
			}
			if index, err = decodeIndex(data); err != nil {
				return nil, err
			}
			if reg.Repository, tags, err = indexTags(index, repoTag); err != nil {
				return nil, err
			}
		case strings.HasPrefix(h.Name, "blobs/sha256/"):
			if index == nil {
				return nil, fmt.Errorf("the archive holds blob %s before index.json", h.Name)
			}
			digest := "sha256:" + path.Base(h.Name)
			if !slices.ContainsFunc(index, func(d Descriptor) bool { return d.Digest == digest }) {
				if err := reg.PushBlob(ctx, Descriptor{Digest: digest, Size: h.Size}, tr); err != nil {
					return nil, err
				}
				continue
			}
			data, err := io.ReadAll(io.LimitReader(tr, MaxManifestSize+1))
			if err != nil {
				return nil, fmt.Errorf("when reading manifest %s from the archive: %w", digest, err)
			}
			if len(data) > MaxManifestSize {
				return nil, fmt.Errorf("manifest %s of the archive is larger than %d bytes", digest, MaxManifestSize)
			}
			manifests[digest] = data
		}
	}
	if index == nil {
		return nil, errors.New("the archive has no index.json")
	}
	var pushed []string
	for i, d := range index {
		data, ok := manifests[d.Digest]
		if !ok {
			return nil, fmt.Errorf("the archive lacks manifest %s that its index lists", d.Digest)
		}
		if err := reg.PushManifest(ctx, tags[i], Blob{Descriptor: d, Data: data}); err != nil {
			return nil, err
		}
		pushed = append(pushed, reg.Repository+":"+tags[i])
	}
	return pushed, nil
}

// indexTags maps the names of an index's manifests to their one
// repository and their tags.
func indexTags(index []Descriptor, repoTag func(name string) (repo, tag string, err error)) (string, []string, error) {
	if len(index) == 0 {
		return "", nil, errors.New("the archive's index lists no manifests")
	}
	var repo string
	tags := make([]string, len(index))
	for i, d := range index {
		r, tag, err := repoTag(d.Annotations[AnnotationImageName])
		if err != nil {
			return "", nil, err
		}
		if i > 0 && r != repo {
			return "", nil, fmt.Errorf("the archive's manifests are in repositories %s and %s, want one", repo, r)
		}
		repo, tags[i] = r, tag
	}
	return repo, tags, nil
}
