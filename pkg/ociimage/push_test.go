package ociimage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestPushArchive pushes an archive to a registry that checks every
// upload's digest, the way a distribution registry does, and pushes it
// again without uploading a blob twice.
func TestPushArchive(t *testing.T) {
	img, err := Build([]string{"/agent"}, []File{{Path: "/agent", Mode: 0o755, Data: []byte("program")}})
	if err != nil {
		t.Fatal(err)
	}
	var archive bytes.Buffer
	if err := img.WriteArchive(&archive, "docker.io/cairn/agent:1"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	stored := map[string][]byte{}
	uploads := 0
	var manifests []string
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		switch {
		case r.Method == http.MethodHead && strings.HasPrefix(r.URL.Path, "/v2/cairn/agent/blobs/"):
			if _, ok := stored[strings.TrimPrefix(r.URL.Path, "/v2/cairn/agent/blobs/")]; !ok {
				w.WriteHeader(http.StatusNotFound)
			}
		case r.Method == http.MethodPost && r.URL.Path == "/v2/cairn/agent/blobs/uploads/":
			w.Header().Set("Location", "/v2/cairn/agent/blobs/uploads/u1?state=x")
			w.WriteHeader(http.StatusAccepted)
		case r.Method == http.MethodPut && r.URL.Path == "/v2/cairn/agent/blobs/uploads/u1":
			sum := sha256.Sum256(body)
			digest := r.URL.Query().Get("digest")
			if r.URL.Query().Get("state") != "x" || digest != "sha256:"+hex.EncodeToString(sum[:]) {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			stored[digest] = body
			uploads++
			w.WriteHeader(http.StatusCreated)
		case r.Method == http.MethodPut && r.URL.Path == "/v2/cairn/agent/manifests/1":
			if r.Header.Get("Content-Type") != MediaTypeManifest || !bytes.Equal(body, img.Manifest.Data) {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			manifests = append(manifests, string(body))
			w.WriteHeader(http.StatusCreated)
		default:
			w.WriteHeader(http.StatusMethodNotAllowed)
		}
	}))
	defer reg.Close()
	repoTag := func(name string) (string, string, error) {
		if name != "docker.io/cairn/agent:1" {
			t.Errorf("the archive's image is named %q, want docker.io/cairn/agent:1", name)
		}
		return "cairn/agent", "1", nil
	}
	for range 2 {
		pushed, err := PushArchive(context.Background(), reg.Client(), reg.URL, bytes.NewReader(archive.Bytes()), repoTag)
		if err != nil {
			t.Fatalf("PushArchive: %v", err)
		}
		if len(pushed) != 1 || pushed[0] != "cairn/agent:1" {
			t.Errorf("PushArchive pushed %q, want cairn/agent:1", pushed)
		}
	}
	if uploads != 2 || len(manifests) != 2 {
		t.Errorf("two pushes uploaded %d blobs and %d manifests, want the config and layer once, the manifest twice", uploads, len(manifests))
	}
	if !bytes.Equal(stored[img.Layer.Descriptor.Digest], img.Layer.Data) {
		t.Errorf("the registry holds a different layer")
	}
}
