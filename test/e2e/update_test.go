//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"cairn.dev/cairn/pkg/gpt"
	"cairn.dev/cairn/pkg/ociimage"
	"cairn.dev/cairn/pkg/release"
	"cairn.dev/cairn/pkg/verity"
	"cairn.dev/cairn/test/launch"
	"cairn.dev/cairn/test/launch/cluster"
)

var releaseKeyFlag = flag.String("release-key", "", "the release key the image's cluster trusts, to sign test releases with (default .cache/release/dev-release.key at the repository root, as make release keeps it)")

// TestUpdateStaged is the first half of an OS update (issue 36), on one
// node booted through OVMF whose cluster trusts the build's release key,
// with the harness's registry:
//
//	(d) releases the node must refuse, each before it writes a byte: signed
//	    by a key the cluster does not trust, older than the running one,
//	    for another architecture, and one whose system image was changed
//	    in the registry after it was pushed; the slot it does not run
//	    (b) is read from its disk before them and after each, and unchanged;
//	(s) a good release, the build's own UKI as version 1.0.0 with a
//	    system image no slot of the node holds, is staged: the node
//	    downloads the image, node slots shows slot b staged at 1.0.0, and
//	    slot b, read from the node's disk, holds the release's system
//	    image.
//
// Every release here has that other system image: the build's data under
// another verity salt. One whose image is the build's the node copies from
// its running slot instead of downloading; TestUpdateTrial stages those.
// Booting a staged slot is TestUpdateTrial's.
func TestUpdateStaged(t *testing.T) {
	s := newSuite(t, 1, 25*time.Minute)
	c, n, key, rb := s.updateCluster(t)
	rb = rb.otherSystem(t)
	id := n.ID()

	slotB := func() [32]byte { return hashSlot(t, n.Disk(), gpt.TypeCairnSystemB, 0) }
	t.Run("d-refused", func(t *testing.T) {
		// Slot b as the image left it, which no refusal may change.
		before := slotB()
		other, err := release.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name, version, arch string
			key                 release.PrivateKey
			tamper              bool
			want                string
		}{
			{name: "unknown key", version: "1.0.0", arch: runtime.GOARCH, key: other, want: "not signed by a trusted key"},
			{name: "older", version: "0.0.0-20000101000000-000000000000", arch: runtime.GOARCH, key: key, want: "use --allow-downgrade"},
			{name: "other architecture", version: "1.0.0", arch: "arm64", key: key, want: "is for arm64"},
			{name: "changed in the registry", version: "1.0.1", arch: runtime.GOARCH, key: key, tamper: true, want: "does not match its digest"},
		} {
			ref := rb.push(t, tc.name, tc.version, tc.arch, tc.key)
			var blob string
			if tc.tamper {
				// Every release here shares the build's system image,
				// stored once: it is changed for this case alone.
				blob = registryBlob(t, c, rb.systemDigest())
				if err := flipByteAt(blob, 1000); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			out, err := s.updateNode(c, id, ref)
			if tc.tamper {
				if err := flipByteAt(blob, 1000); err != nil {
					t.Fatal(err)
				}
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: node update %s: %v\n%s\nwant a refusal saying %q", tc.name, ref, err, out, tc.want)
				continue
			}
			s.step("refused: "+tc.name, time.Since(start))
			if slotB() != before {
				t.Errorf("%s: slot b changed on node %s's disk", tc.name, id)
			}
		}
	})

	t.Run("s-staged", func(t *testing.T) {
		ref := rb.push(t, "good", "1.0.0", runtime.GOARCH, key)
		from := n.Mark()
		start := time.Now()
		out, err := s.updateNode(c, id, ref)
		if err != nil {
			t.Fatalf("node update %s: %v\n%s", ref, err, out)
		}
		s.step("update command → 1.0.0 staged (UKI + system image downloaded)", time.Since(start))
		s.waitNode(t, n, from, launch.Substring("Update: downloading the system image"))
		if want := "staged release 1.0.0 in system slot b"; !strings.Contains(out, want) {
			t.Errorf("node update printed %q, want %q", out, want)
		}
		s.checkSlots(t, c, id, slotView{"a", true, "good", readVersion(t), ""}, slotView{"b", false, "staged", "1.0.0", ""})
		if got, want := hashSlot(t, n.Disk(), gpt.TypeCairnSystemB, rb.systemSize), rb.systemHash; got != want {
			t.Errorf("slot b on node %s's disk does not hold the release's system image", id)
		}
	})
}

// updateCluster forms the update suites' cluster: one node booted through
// OVMF with opts, the harness's registry, the build's release key
// trusted. It returns the cluster, its node, that key to sign releases
// with, and a builder of releases pushed to the registry.
func (s *suite) updateCluster(t *testing.T, opts ...launch.Option) (*cluster.Cluster, *cluster.Node, release.PrivateKey, *releaseBuilder) {
	t.Helper()
	cfg := s.clusterConfig(1, 0, opts...)
	cfg.Registry = artifact(t, "registry")
	c := s.startCluster(cfg)
	if err := c.Form(s.ctx); err != nil {
		t.Fatalf("forming the one-node cluster: %v", err)
	}
	return c, c.Node(0), readReleaseKey(t), newReleaseBuilder(t, c)
}

// updateNode runs cairnctl node update --stage on node id and returns its
// output.
func (s *suite) updateNode(c *cluster.Cluster, id, ref string) (string, error) {
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Minute)
	defer cancel()
	return runUpdate(ctx, c, id, ref, "--stage")
}

// runUpdate runs cairnctl node update of ref on node id with flags, and
// returns its output.
func runUpdate(ctx context.Context, c *cluster.Cluster, id, ref string, flags ...string) (string, error) {
	out, err := c.Cairnctl(ctx, append([]string{"node", "update", id, "--image", ref}, flags...)...)
	return string(out), err
}

// readReleaseKey reads the build's release key.
func readReleaseKey(t *testing.T) release.PrivateKey {
	t.Helper()
	path := *releaseKeyFlag
	if path == "" {
		path = filepath.Join(repoRoot(t), ".cache", "release", "dev-release.key")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the release key: %v (make release makes it; or pass -release-key)", err)
	}
	k, err := release.ParsePrivateKey(b)
	if err != nil {
		t.Fatalf("the release key %s: %v", path, err)
	}
	return k
}

// releaseBuilder makes releases of the build's UKI and system image and
// pushes them to the cluster's registry.
type releaseBuilder struct {
	c          *cluster.Cluster
	uki        []byte
	system     string
	verity     string
	systemSize int64
	systemHash [32]byte
}

// otherSystem returns a builder of releases whose system image is the
// build's data under another verity salt: an image no node holds, which
// staging downloads, for releases that never boot (a UKI names its
// image's verity root hash).
func (rb *releaseBuilder) otherSystem(t *testing.T) *releaseBuilder {
	t.Helper()
	p, err := verity.ParseParams(rb.verity)
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(rb.system)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	salt := append([]byte("other"), p.Salt...)[:max(len(p.Salt), 5)]
	tree, err := verity.Compute(io.NewSectionReader(in, 0, int64(p.DataBlocks)*verity.BlockSize), salt)
	if err != nil {
		t.Fatal(err)
	}
	own := *rb
	own.system = filepath.Join(t.TempDir(), "system-other.img")
	out, err := os.Create(own.system)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	// The data, and whatever lies between it and the tree, as built.
	h := sha256.New()
	w := io.MultiWriter(out, h)
	if _, err := io.Copy(w, io.NewSectionReader(in, 0, int64(p.HashOffset))); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(tree.Hashes); err != nil {
		t.Fatal(err)
	}
	other := tree.Params(salt)
	other.HashOffset = p.HashOffset
	own.verity = other.String()
	own.systemSize = int64(p.HashOffset) + int64(len(tree.Hashes))
	copy(own.systemHash[:], h.Sum(nil))
	return &own
}

// systemDigest is the system image's digest as a blob's.
func (rb *releaseBuilder) systemDigest() string { return fmt.Sprintf("sha256:%x", rb.systemHash) }

func newReleaseBuilder(t *testing.T, c *cluster.Cluster) *releaseBuilder {
	t.Helper()
	uki, err := os.ReadFile(artifact(t, "cairn.efi"))
	if err != nil {
		t.Fatal(err)
	}
	rb := &releaseBuilder{c: c, uki: uki, system: artifact(t, "system.img"), verity: systemParams(t).String()}
	f, err := os.Open(rb.system)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if rb.systemSize, err = io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	copy(rb.systemHash[:], h.Sum(nil))
	return rb
}

// push pushes the release of version for arch signed with key to the
// repository cairn/<name>, and returns the reference nodes reach it by.
func (rb *releaseBuilder) push(t *testing.T, name, version, arch string, key release.PrivateKey) string {
	t.Helper()
	repo := "cairn/" + strings.ReplaceAll(name, " ", "-")
	sysD := ociimage.Descriptor{MediaType: release.MediaTypeSystem, Digest: rb.systemDigest(), Size: rb.systemSize}
	m := release.Metadata{Version: version, Commit: strings.Repeat("0", 40), Architecture: arch, Verity: rb.verity}
	a, err := release.NewArtifact(m, ociimage.NewBlob(release.MediaTypeUKI, rb.uki).Descriptor, sysD, key)
	if err != nil {
		t.Fatal(err)
	}
	sys, err := os.Open(rb.system)
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(a.WriteArchive(pw, repo, bytes.NewReader(rb.uki), sys)) }()
	repoTag := func(name string) (string, string, error) {
		r, tag, _ := strings.Cut(name, ":")
		return r, tag, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := ociimage.PushArchive(ctx, nil, "http://"+rb.c.RegistryHost(), pr, repoTag); err != nil {
		pr.CloseWithError(err)
		t.Fatalf("pushing release %s: %v", version, err)
	}
	return fmt.Sprintf("%s/%s:%s", cluster.RegistryAddr(), repo, a.Tag())
}

// registryBlob finds where the harness's registry stores the blob digest.
func registryBlob(t *testing.T, c *cluster.Cluster, digest string) string {
	t.Helper()
	hex := strings.TrimPrefix(digest, "sha256:")
	var found string
	err := filepath.WalkDir(filepath.Join(c.Config().Dir, "registry"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Name() == "data" && filepath.Base(filepath.Dir(p)) == hex && !d.IsDir() {
			found = p
			return fs.SkipAll
		}
		return nil
	})
	if err != nil || found == "" {
		t.Fatalf("the registry's storage holds no blob %s (%v)", digest, err)
	}
	return found
}

// flipByteAt inverts the byte at off of the file at path.
func flipByteAt(path string, off int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if err := flipByte(f, off); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// hashSlot hashes the first n bytes (all of it when n is 0) of the
// partition of type typ on the disk at path.
func hashSlot(t *testing.T, path string, typ uuid.UUID, n int64) [32]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tab := readGPT(t, f)
	i := tab.Find(typ)
	if i < 0 {
		t.Fatalf("the disk %s has no partition of type %x", path, typ)
	}
	p := tab.Entries[i]
	size := int64(p.Sectors()) * 512
	if n > 0 {
		size = n
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, int64(p.FirstLBA)*512, size)); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}
