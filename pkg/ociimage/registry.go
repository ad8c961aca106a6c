package ociimage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
)

// MaxManifestSize bounds what Manifest reads: a manifest is a page of
// JSON, and a registry that sends more is not trusted with memory.
const MaxManifestSize = 4 << 20

// A Registry is one repository of a registry, reached through the OCI
// distribution API: enough to push an image or artifact and to read one
// back, blobs as streams.
type Registry struct {
	// Client makes the requests; nil is http.DefaultClient.
	Client *http.Client
	// Base is the registry's URL, like "http://127.0.0.1:5000" or
	// "https://registry.example".
	Base string
	// Repository is the repository's name, like "cairn/release".
	Repository string
}

// A Reference names a manifest in a registry: host/repository:tag or
// host/repository@sha256:<hex>.
type Reference struct {
	// Host is the registry's host and port, like "10.42.0.1:5000".
	Host string
	// Repository is the path below the host, like "cairn/release".
	Repository string
	// Tag or Digest names the manifest; exactly one is set.
	Tag, Digest string
}

var (
	repositoryPattern = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$`)
	tagPattern        = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
	digestPattern     = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

// ParseReference reads host/repository:tag or host/repository@sha256:…,
// as the OCI distribution specification spells names, tags and digests.
func ParseReference(s string) (Reference, error) {
	host, rest, ok := strings.Cut(s, "/")
	if !ok || host == "" || strings.ContainsAny(host, "@ ") {
		return Reference{}, fmt.Errorf("reference %q: want HOST/REPOSITORY:TAG or HOST/REPOSITORY@sha256:DIGEST", s)
	}
	var r Reference
	if repo, digest, ok := strings.Cut(rest, "@"); ok {
		r = Reference{Host: host, Repository: repo, Digest: digest}
		if !digestPattern.MatchString(digest) {
			return Reference{}, fmt.Errorf("reference %q: digest %q is not sha256: and 64 lowercase hex digits", s, digest)
		}
	} else {
		i := strings.LastIndex(rest, ":")
		if i < 0 {
			return Reference{}, fmt.Errorf("reference %q has neither a tag nor a digest", s)
		}
		r = Reference{Host: host, Repository: rest[:i], Tag: rest[i+1:]}
		if !tagPattern.MatchString(r.Tag) {
			return Reference{}, fmt.Errorf("reference %q: %q is not a valid tag", s, r.Tag)
		}
	}
	if !repositoryPattern.MatchString(r.Repository) {
		return Reference{}, fmt.Errorf("reference %q: %q is not a valid repository name", s, r.Repository)
	}
	return r, nil
}

// String returns the reference as ParseReference reads it.
func (r Reference) String() string {
	if r.Digest != "" {
		return r.Host + "/" + r.Repository + "@" + r.Digest
	}
	return r.Host + "/" + r.Repository + ":" + r.Tag
}

// Name is the tag or the digest, as the API's manifest paths take it.
func (r Reference) Name() string {
	if r.Digest != "" {
		return r.Digest
	}
	return r.Tag
}

// Registry returns the repository r names. plainHTTP speaks HTTP instead
// of HTTPS, for registries on a private network such as the test
// cluster's.
func (r Reference) Registry(client *http.Client, plainHTTP bool) Registry {
	scheme := "https://"
	if plainHTTP {
		scheme = "http://"
	}
	return Registry{Client: client, Base: scheme + r.Host, Repository: r.Repository}
}

// Digest returns the "sha256:<hex>" digest of data.
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ErrNotFound is what the registry answers for a manifest or blob it does
// not hold.
var ErrNotFound = errors.New("not found in the registry")

// HasBlob reports whether the repository holds the blob digest.
func (r Registry) HasBlob(ctx context.Context, digest string) (bool, error) {
	resp, err := r.do(ctx, http.MethodHead, r.url("blobs", digest), "", nil, -1)
	if err != nil {
		return false, fmt.Errorf("when looking for blob %s: %w", digest, err)
	}
	return resp.StatusCode == http.StatusOK, nil
}

// PushBlob uploads the blob d, read from content, unless the repository
// holds it already. It is one monolithic upload (a POST, then a PUT with
// the whole blob), which every distribution registry takes; content is
// streamed, not held in memory, and must be exactly d.Size bytes.
func (r Registry) PushBlob(ctx context.Context, d Descriptor, content io.Reader) error {
	if ok, err := r.HasBlob(ctx, d.Digest); err != nil || ok {
		return err
	}
	resp, err := r.do(ctx, http.MethodPost, r.url("blobs", "uploads/"), "", nil, -1)
	if err != nil {
		return fmt.Errorf("when starting the upload of blob %s: %w", d.Digest, err)
	}
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("when starting the upload of blob %s: registry answered %s", d.Digest, resp.Status)
	}
	loc, err := url.Parse(r.Base)
	if err == nil {
		loc, err = loc.Parse(resp.Header.Get("Location"))
	}
	if err != nil {
		return fmt.Errorf("when reading the upload location of blob %s: %w", d.Digest, err)
	}
	q := loc.Query()
	q.Set("digest", d.Digest)
	loc.RawQuery = q.Encode()
	resp, err = r.do(ctx, http.MethodPut, loc.String(), "application/octet-stream", content, d.Size)
	if err != nil {
		return fmt.Errorf("when uploading blob %s: %w", d.Digest, err)
	}
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("when uploading blob %s: registry answered %s", d.Digest, resp.Status)
	}
	return nil
}

// PushManifest stores manifest under reference, a tag or its digest.
func (r Registry) PushManifest(ctx context.Context, reference string, manifest Blob) error {
	resp, err := r.do(ctx, http.MethodPut, r.url("manifests", reference), manifest.Descriptor.MediaType,
		bytes.NewReader(manifest.Data), int64(len(manifest.Data)))
	if err != nil {
		return fmt.Errorf("when pushing manifest %s:%s: %w", r.Repository, reference, err)
	}
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("when pushing manifest %s:%s: registry answered %s", r.Repository, reference, resp.Status)
	}
	return nil
}

// Manifest fetches the manifest reference (a tag or a digest) names,
// asking for mediaType. The descriptor's digest is the one asked for when
// reference is a digest, else the one the registry says it served, else
// that of the bytes: either way, a caller that checks the bytes against
// it learns whether the registry sent what it claims.
func (r Registry) Manifest(ctx context.Context, reference, mediaType string) (Blob, error) {
	resp, err := r.get(ctx, r.url("manifests", reference), mediaType)
	if err != nil {
		return Blob{}, fmt.Errorf("when fetching manifest %s:%s: %w", r.Repository, reference, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxManifestSize+1))
	if err != nil {
		return Blob{}, fmt.Errorf("when reading manifest %s:%s: %w", r.Repository, reference, err)
	}
	if len(data) > MaxManifestSize {
		return Blob{}, fmt.Errorf("manifest %s:%s is larger than %d bytes", r.Repository, reference, MaxManifestSize)
	}
	d := Descriptor{MediaType: resp.Header.Get("Content-Type"), Digest: resp.Header.Get("Docker-Content-Digest"), Size: int64(len(data))}
	if digestPattern.MatchString(reference) {
		d.Digest = reference
	}
	if d.Digest == "" {
		d.Digest = Digest(data)
	}
	return Blob{Descriptor: d, Data: data}, nil
}

// Blob opens the blob digest for reading, and returns its length as the
// registry gives it (-1 when it does not). The caller closes it, and
// checks what it read against the digest.
func (r Registry) Blob(ctx context.Context, digest string) (io.ReadCloser, int64, error) {
	resp, err := r.get(ctx, r.url("blobs", digest), "")
	if err != nil {
		return nil, 0, fmt.Errorf("when fetching blob %s: %w", digest, err)
	}
	return resp.Body, resp.ContentLength, nil
}

// get makes a GET and returns the response of a 200, whose body the
// caller closes; any other answer is an error (ErrNotFound for 404).
func (r Registry) get(ctx context.Context, u, accept string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := r.client().Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, ErrNotFound
	}
	return nil, fmt.Errorf("registry answered %s", resp.Status)
}

func (r Registry) url(kind, name string) string {
	return r.Base + "/v2/" + r.Repository + "/" + kind + "/" + name
}

func (r Registry) client() *http.Client {
	if r.Client != nil {
		return r.Client
	}
	return http.DefaultClient
}

// do makes one request whose answer needs no body and discards it. size
// is body's length, -1 when there is no body.
func (r Registry) do(ctx context.Context, method, u, contentType string, body io.Reader, size int64) (*http.Response, error) {
	if body == nil {
		body = http.NoBody
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if size >= 0 {
		// A reader the request does not know (a file, a tar entry) would
		// otherwise go out chunked; registries want the length.
		req.ContentLength = size
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := r.client().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return nil, err
	}
	return resp, nil
}
