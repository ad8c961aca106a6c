package release

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

// testRegistry serves the part of the OCI distribution API that pushing
// and fetching a release use, for one repository, from memory. Tests
// change what it stores to play a registry that serves other bytes.
type testRegistry struct {
	mu        sync.Mutex
	blobs     map[string][]byte
	manifests map[string][]byte // by tag and by digest
	srv       *httptest.Server
}

func newTestRegistry(t *testing.T, repo string) *testRegistry {
	r := &testRegistry{blobs: map[string][]byte{}, manifests: map[string][]byte{}}
	prefix := "/v2/" + repo + "/"
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		defer r.mu.Unlock()
		body, err := io.ReadAll(req.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
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
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// change replaces a stored blob's bytes, keeping its digest.
func (r *testRegistry) change(digest string, f func([]byte) []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.blobs[digest] = f(bytes.Clone(r.blobs[digest]))
}
