package initramfs

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/pierrec/lz4/v4"

	"cairn.dev/cairn/build/modules"
)

func sampleArchive() *Archive {
	a := New()
	a.AddInit([]byte("init binary"))
	a.AddModules(&modules.Set{
		Release: "6.1.0-99-amd64",
		Files: []modules.File{
			{Name: "kernel/fs/xfs/xfs.ko", Data: []byte("xfs")},
			{Name: "modules.dep", Data: []byte("kernel/fs/xfs/xfs.ko:\n")},
		},
	})
	a.Add(Entry{Name: "lib-extra", Mode: TypeRegular | 0o644})
	return a
}

func TestArchiveLayout(t *testing.T) {
	var buf bytes.Buffer
	if err := sampleArchive().Write(&buf); err != nil {
		t.Fatalf("Write: %v", err)
	}
	entries, err := readNewc(buf.Bytes())
	if err != nil {
		t.Fatalf("reading the archive back: %v", err)
	}
	var got []string
	modes := map[string]uint32{}
	for _, e := range entries {
		got = append(got, e.Name)
		modes[e.Name] = e.Mode
	}
	// Directories come first and before their contents; "lib/..." stays
	// together ahead of "lib-extra".
	want := []string{
		"dev", "dev/console", "dev/null", "dev/ttyS0", "etc", "init",
		"lib", "lib/modules", "lib/modules/6.1.0-99-amd64",
		"lib/modules/6.1.0-99-amd64/kernel",
		"lib/modules/6.1.0-99-amd64/kernel/fs",
		"lib/modules/6.1.0-99-amd64/kernel/fs/xfs",
		"lib/modules/6.1.0-99-amd64/kernel/fs/xfs/xfs.ko",
		"lib/modules/6.1.0-99-amd64/modules.dep",
		"lib-extra", "proc", "run", "sys", "tmp",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("archive entries (-want +got):\n%s", diff)
	}
	for name, mode := range map[string]uint32{
		"init":        TypeRegular | 0o755,
		"dev/console": TypeChar | 0o600,
		"tmp":         TypeDir | 0o1777,
		"lib/modules": TypeDir | 0o755,
	} {
		if modes[name] != mode {
			t.Errorf("mode of %s = %#o, want %#o", name, modes[name], mode)
		}
	}
}

func TestCompressedIsReproducibleAndDecodes(t *testing.T) {
	// An /init larger than one 8 MiB block, half of it incompressible, so
	// the stream has more than one block and both kinds of data.
	big := make([]byte, 9<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < len(big)/2; i += 8 {
		binary.LittleEndian.PutUint64(big[i:], rng.Uint64())
	}
	archive := func() *Archive {
		a := sampleArchive()
		a.AddInit(big)
		return a
	}
	first, err := archive().Compressed()
	if err != nil {
		t.Fatalf("Compressed: %v", err)
	}
	second, err := archive().Compressed()
	if err != nil {
		t.Fatalf("Compressed: %v", err)
	}
	if !bytes.Equal(first, second) {
		t.Error("two builds of the same archive differ")
	}
	// The kernel's unpacker knows LZ4 only by the legacy frame's magic.
	if magic := binary.LittleEndian.Uint32(first); magic != 0x184C2102 {
		t.Errorf("stream starts with %#x, want the LZ4 legacy magic 0x184c2102", magic)
	}
	// Without an end mark the kernel would read an archive appended after
	// the stream as one more block.
	if end := first[len(first)-4:]; !bytes.Equal(end, []byte{0, 0, 0, 0}) {
		t.Errorf("stream ends with %x, want the zero block size that ends it for the kernel", end)
	}
	raw, err := io.ReadAll(lz4.NewReader(bytes.NewReader(first)))
	if err != nil {
		t.Fatalf("decompressing: %v", err)
	}
	var want bytes.Buffer
	if err := archive().Write(&want); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, want.Bytes()) {
		t.Errorf("decompressed archive (%d bytes) differs from the uncompressed one (%d bytes)", len(raw), want.Len())
	}
}

func TestComparePaths(t *testing.T) {
	for _, tc := range []struct {
		x, y string
		want int
	}{
		{"a", "a/b", -1},
		{"a/b", "a-b", -1},
		{"a-b", "a/b", 1},
		{"lib/modules", "lib/modules", 0},
		{"dev/null", "etc", -1},
	} {
		if got := comparePaths(tc.x, tc.y); got != tc.want {
			t.Errorf("comparePaths(%q, %q) = %d, want %d", tc.x, tc.y, got, tc.want)
		}
	}
}
