package verity

import (
	"bytes"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// randomData returns n blocks of reproducible pseudo-random bytes, with a
// run of zero blocks in the middle, which hash like any other.
func randomData(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n*BlockSize)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	if n > 4 {
		clear(b[2*BlockSize : 4*BlockSize])
	}
	return b
}

// veritysetupFormat runs Debian's veritysetup over data with salt, no
// superblock, and returns the hash device it wrote and the root hash it
// printed.
func veritysetupFormat(t *testing.T, data, salt []byte) ([]byte, []byte) {
	t.Helper()
	dir := t.TempDir()
	dataFile, hashFile := filepath.Join(dir, "data"), filepath.Join(dir, "hash")
	if err := os.WriteFile(dataFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	saltArg := hex.EncodeToString(salt)
	if len(salt) == 0 {
		saltArg = "-"
	}
	out, err := exec.Command("veritysetup", "format", "--no-superblock", "--format=1",
		"--hash=sha256", "--data-block-size=4096", "--hash-block-size=4096",
		"--salt="+saltArg, dataFile, hashFile).CombinedOutput()
	if err != nil {
		t.Fatalf("veritysetup format: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`(?m)^Root hash:\s+([0-9a-f]+)$`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("veritysetup printed no root hash:\n%s", out)
	}
	root, err := hex.DecodeString(string(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	hashes, err := os.ReadFile(hashFile)
	if err != nil {
		t.Fatal(err)
	}
	return hashes, root
}

// TestComputeMatchesVeritysetup checks the tree and the root hash byte for
// byte against veritysetup, at the sizes where the tree changes shape: one
// block (no tree), one full hash block, one more (a second level), two
// full levels and one more (a third level).
func TestComputeMatchesVeritysetup(t *testing.T) {
	if _, err := exec.LookPath("veritysetup"); err != nil {
		t.Skip("veritysetup is not installed (cryptsetup-bin; build/deps.sh installs it): cannot cross-check the tree")
	}
	salt, _ := hex.DecodeString("5ca1ab1e00112233445566778899aabbccddeeff00112233445566778899aabb")
	for _, tc := range []struct {
		blocks int
		salt   []byte
	}{
		{1, salt}, {2, salt}, {128, salt}, {129, salt}, {1000, nil},
		{128 * 128, salt}, {128*128 + 1, []byte{0x42}},
	} {
		data := randomData(tc.blocks, uint64(tc.blocks))
		tree, err := Compute(bytes.NewReader(data), tc.salt)
		if err != nil {
			t.Fatalf("Compute(%d blocks): %v", tc.blocks, err)
		}
		hashes, root := veritysetupFormat(t, data, tc.salt)
		if !bytes.Equal(tree.RootHash, root) {
			t.Errorf("Compute(%d blocks) root hash = %x, veritysetup says %x", tc.blocks, tree.RootHash, root)
		}
		if !bytes.Equal(tree.Hashes, hashes) {
			t.Errorf("Compute(%d blocks) wrote %d bytes of hashes, veritysetup %d, and they differ",
				tc.blocks, len(tree.Hashes), len(hashes))
		}
		if got, want := HashBlocks(uint64(tc.blocks))*BlockSize, uint64(len(hashes)); got != want {
			t.Errorf("HashBlocks(%d) = %d blocks, veritysetup wrote %d bytes", tc.blocks, got/BlockSize, want)
		}
		if tree.DataBlocks != uint64(tc.blocks) {
			t.Errorf("Compute(%d blocks).DataBlocks = %d", tc.blocks, tree.DataBlocks)
		}
	}
}

// TestComputeDetectsChange flips one bit anywhere and expects another
// root hash.
func TestComputeDetectsChange(t *testing.T) {
	data := randomData(300, 7)
	base, err := Compute(bytes.NewReader(data), []byte("salt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []int{0, 1024, 299*BlockSize + 4095} {
		changed := bytes.Clone(data)
		changed[off] ^= 1
		tree, err := Compute(bytes.NewReader(changed), []byte("salt"))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(tree.RootHash, base.RootHash) {
			t.Errorf("flipping a bit at byte %d left the root hash %x", off, base.RootHash)
		}
	}
	other, err := Compute(bytes.NewReader(data), []byte("other salt"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(other.RootHash, base.RootHash) {
		t.Error("another salt gave the same root hash")
	}
}

func TestComputeRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		data []byte
		salt []byte
		want string
	}{
		"empty":         {nil, nil, "no data"},
		"partial block": {make([]byte, BlockSize+1), nil, "not a whole number"},
		"long salt":     {make([]byte, BlockSize), make([]byte, MaxSaltSize+1), "salt"},
	} {
		_, err := Compute(bytes.NewReader(tc.data), tc.salt)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Compute(%s) = %v, want an error containing %q", name, err, tc.want)
		}
	}
}

func TestParams(t *testing.T) {
	tree, err := Compute(bytes.NewReader(randomData(130, 3)), []byte{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	p := tree.Params([]byte{1, 2})
	s := p.String()
	want := hex.EncodeToString(tree.RootHash) + ",0102,130,532480"
	if s != want {
		t.Errorf("Params.String() = %q, want %q", s, want)
	}
	got, err := ParseParams(s)
	if err != nil {
		t.Fatalf("ParseParams(%q): %v", s, err)
	}
	if diff := cmp.Diff(p, got); diff != "" {
		t.Errorf("ParseParams(String()) differs (-want +got):\n%s", diff)
	}
	if got.HashStartBlock() != 130 || got.End() != (130+3)*BlockSize {
		t.Errorf("HashStartBlock, End = %d, %d; want 130, %d", got.HashStartBlock(), got.End(), (130+3)*BlockSize)
	}
	root := hex.EncodeToString(tree.RootHash)
	for _, bad := range []string{
		"",
		root + ",0102,130",
		root + ",0102,130,532480,1",
		root[:62] + ",0102,130,532480",
		"zz" + root[2:] + ",0102,130,532480",
		root + ",010,130,532480",
		root + ",0102,0,0",
		root + ",0102,130,532481",
		root + ",0102,130,4096",
		root + ",0102,-1,532480",
		root + ",0102,130," + strings.Repeat("9", 30),
		root + "," + strings.Repeat("00", MaxSaltSize+1) + ",130,532480",
	} {
		if p, err := ParseParams(bad); err == nil {
			t.Errorf("ParseParams(%q) = %+v, want an error", bad, p)
		}
	}
	if _, err := ParseParams(root + ",,1,4096"); err != nil {
		t.Errorf("ParseParams with an empty salt: %v", err)
	}
}

// TestIsTop reads the block at TopOffset of images with and without a
// tree, and of another image, as a node does before it maps a slot.
func TestIsTop(t *testing.T) {
	for _, blocks := range []int{1, 2, 130} {
		data := randomData(blocks, 5)
		tree, err := Compute(bytes.NewReader(data), []byte{7})
		if err != nil {
			t.Fatal(err)
		}
		p := tree.Params([]byte{7})
		device := append(append([]byte{}, data...), tree.Hashes...)
		top := device[p.TopOffset() : p.TopOffset()+BlockSize]
		if !p.IsTop(top) {
			t.Errorf("%d blocks: IsTop(block at TopOffset %d) = false, want true", blocks, p.TopOffset())
		}
		other := randomData(blocks, 6)
		if p.IsTop(other[:BlockSize]) || p.IsTop(make([]byte, BlockSize)) || p.IsTop(top[:100]) {
			t.Errorf("%d blocks: IsTop accepted another image's block, zeros or a short block", blocks)
		}
	}
}

// FuzzParseParams feeds ParseParams command line text: it must never
// panic, and what it accepts must check and survive a round trip.
func FuzzParseParams(f *testing.F) {
	root := strings.Repeat("ab", DigestSize)
	f.Add(root + ",0102,130,532480")
	f.Add(root + ",,1,4096")
	f.Add(",,,")
	f.Add(root + ",0102,18446744073709551615,18446744073709551615")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseParams(s)
		if err != nil {
			return
		}
		if err := p.Check(); err != nil {
			t.Fatalf("ParseParams(%q) accepted parameters that fail Check: %v", s, err)
		}
		again, err := ParseParams(p.String())
		if err != nil {
			t.Fatalf("ParseParams(%q) fails on its own String(): %v", p.String(), err)
		}
		if diff := cmp.Diff(p, again); diff != "" {
			t.Fatalf("round trip of %q differs:\n%s", s, diff)
		}
		if p.End() < p.HashOffset {
			t.Fatalf("End() = %d overflows past the hash offset %d", p.End(), p.HashOffset)
		}
	})
}
