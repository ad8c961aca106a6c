// Package ocitest serves, for tests, the part of the OCI distribution API
// that pkg/ociimage's Registry speaks, for one repository, from memory.
// Like pkg/fixture, only tests should import it.
package ocitest

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"cairn.dev/cairn/pkg/ociimage"
)

// Registry is a registry of one repository in memory. Tests change what
// it stores to play a registry that serves other bytes.
type Registry struct {
	// Repository is the one repository it serves.
	Repository string

	mu        sync.Mutex
	blobs     map[string][]byte
	manifests map[string][]byte // by tag and by digest
	srv       *httptest.Server
}

// New starts a Registry serving repo over plain HTTP, stopped when t
// ends.
func New(t testing.TB, repo string) *Registry {
	r := &Registry{Repository: repo, blobs: map[string][]byte{}, manifests: map[string][]byte{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

// Host is the registry's host:port, as a reference names it.
func (r *Registry) Host() string { return strings.TrimPrefix(r.srv.URL, "http://") }

// Client is the HTTP client that reaches the registry.
func (r *Registry) Client() *http.Client { return r.srv.Client() }

// Registry returns the client side of the repository.
func (r *Registry) Registry() ociimage.Registry {
	return ociimage.Registry{Client: r.Client(), Base: r.srv.URL, Repository: r.Repository}
}

// Change replaces a stored blob's bytes, keeping its digest.
func (r *Registry) Change(digest string, f func([]byte) []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.blobs[digest] = f(bytes.Clone(r.blobs[digest]))
}

// ChangeManifest replaces the bytes of the manifest stored under name (a
// tag or a digest), under that name only.
func (r *Registry) ChangeManifest(name string, f func([]byte) []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.manifests[name] = f(bytes.Clone(r.manifests[name]))
}

// DeleteManifest forgets the manifest stored under name.
func (r *Registry) DeleteManifest(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.manifests, name)
}

func (r *Registry) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	body, err := io.ReadAll(req.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	prefix := "/v2/" + r.Repository + "/"
	p, ok := strings.CutPrefix(req.URL.Path, prefix)
	kind, name, _ := strings.Cut(p, "/")
	switch {
	case !ok:
		w.WriteHeader(http.StatusNotFound)
	case kind == "blobs" && req.Method == http.MethodPost && name == "uploads/":
		w.Header().Set("Location", prefix+"blobs/uploads/u")
		w.WriteHeader(http.StatusAccepted)
	case kind == "blobs" && req.Method == http.MethodPut && name == "uploads/u":
		digest := req.URL.Query().Get("digest")
		if digest != ociimage.Digest(body) {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		r.blobs[digest] = body
		w.WriteHeader(http.StatusCreated)
	case kind == "blobs" && (req.Method == http.MethodGet || req.Method == http.MethodHead):
		b, ok := r.blobs[name]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Write(b)
	case kind == "manifests" && req.Method == http.MethodPut:
		r.manifests[name] = body
		r.manifests[ociimage.Digest(body)] = body
		w.WriteHeader(http.StatusCreated)
	case kind == "manifests" && req.Method == http.MethodGet:
		m, ok := r.manifests[name]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", ociimage.MediaTypeManifest)
		w.Write(m)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}
