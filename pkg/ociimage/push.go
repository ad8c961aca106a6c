package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// ReadArchive reads an archive that WriteArchive wrote: the reference it
// names and its manifest's blobs, by digest.
func ReadArchive(r io.Reader) (ref string, manifest Blob, blobs map[string][]byte, err error) {
	blobs = map[string][]byte{}
	var index []byte
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", Blob{}, nil, fmt.Errorf("when reading the archive: %w", err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return "", Blob{}, nil, fmt.Errorf("when reading %s from the archive: %w", h.Name, err)
		}
		switch {
		case h.Name == "index.json":
			index = data
		case strings.HasPrefix(h.Name, "blobs/sha256/"):
			blobs["sha256:"+path.Base(h.Name)] = data
		}
	}
	var idx struct {
		Manifests []Descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(index, &idx); err != nil {
		return "", Blob{}, nil, fmt.Errorf("when decoding the archive's index.json: %w", err)
	}
	if len(idx.Manifests) != 1 {
		return "", Blob{}, nil, fmt.Errorf("the archive's index lists %d images, want 1", len(idx.Manifests))
	}
	d := idx.Manifests[0]
	ref = d.Annotations[annotationContainerdName]
	data, ok := blobs[d.Digest]
	if !ok || ref == "" {
		return "", Blob{}, nil, fmt.Errorf("the archive lacks its manifest %s or its name", d.Digest)
	}
	for digest, b := range blobs {
		sum := sha256.Sum256(b)
		if digest != "sha256:"+hex.EncodeToString(sum[:]) {
			return "", Blob{}, nil, fmt.Errorf("blob %s of the archive does not match its digest", digest)
		}
	}
	return ref, Blob{Descriptor: Descriptor{MediaType: d.MediaType, Digest: d.Digest, Size: int64(len(data))}, Data: data}, blobs, nil
}

// Push uploads an image to the registry at base (like
// "http://127.0.0.1:5000") as repository repo and tag (OCI distribution
// API: each blob in one monolithic upload, then the manifest), skipping
// blobs the registry has already.
func Push(ctx context.Context, client *http.Client, base, repo, tag string, manifest Blob, blobs map[string][]byte) error {
	var m struct {
		Config Descriptor   `json:"config"`
		Layers []Descriptor `json:"layers"`
	}
	if err := json.Unmarshal(manifest.Data, &m); err != nil {
		return fmt.Errorf("when decoding the manifest: %w", err)
	}
	for _, d := range append([]Descriptor{m.Config}, m.Layers...) {
		data, ok := blobs[d.Digest]
		if !ok {
			return fmt.Errorf("blob %s of the manifest is missing", d.Digest)
		}
		if err := pushBlob(ctx, client, base, repo, d.Digest, data); err != nil {
			return err
		}
	}
	resp, err := do(ctx, client, http.MethodPut, base+"/v2/"+repo+"/manifests/"+tag, manifest.Descriptor.MediaType, manifest.Data)
	if err != nil {
		return fmt.Errorf("when pushing the manifest of %s:%s: %w", repo, tag, err)
	}
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("when pushing the manifest of %s:%s: registry answered %s", repo, tag, resp.Status)
	}
	return nil
}

// pushBlob uploads one blob unless the registry has it.
func pushBlob(ctx context.Context, client *http.Client, base, repo, digest string, data []byte) error {
	resp, err := do(ctx, client, http.MethodHead, base+"/v2/"+repo+"/blobs/"+digest, "", nil)
	if err != nil {
		return fmt.Errorf("when looking for blob %s: %w", digest, err)
	}
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	resp, err = do(ctx, client, http.MethodPost, base+"/v2/"+repo+"/blobs/uploads/", "", nil)
	if err != nil {
		return fmt.Errorf("when starting the upload of blob %s: %w", digest, err)
	}
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("when starting the upload of blob %s: registry answered %s", digest, resp.Status)
	}
	loc, err := url.Parse(base)
	if err == nil {
		loc, err = loc.Parse(resp.Header.Get("Location"))
	}
	if err != nil {
		return fmt.Errorf("when reading the upload location of blob %s: %w", digest, err)
	}
	q := loc.Query()
	q.Set("digest", digest)
	loc.RawQuery = q.Encode()
	resp, err = do(ctx, client, http.MethodPut, loc.String(), "application/octet-stream", data)
	if err != nil {
		return fmt.Errorf("when uploading blob %s: %w", digest, err)
	}
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("when uploading blob %s: registry answered %s", digest, resp.Status)
	}
	return nil
}

// do makes one request and reads its answer whole.
func do(ctx context.Context, client *http.Client, method, u, contentType string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return nil, err
	}
	return resp, nil
}
