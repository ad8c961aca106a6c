package initramfs

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/klauspost/compress/zstd"

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
	first, err := sampleArchive().Compressed()
	if err != nil {
		t.Fatalf("Compressed: %v", err)
	}
	second, err := sampleArchive().Compressed()
	if err != nil {
		t.Fatalf("Compressed: %v", err)
	}
	if !bytes.Equal(first, second) {
		t.Error("two builds of the same archive differ")
	}
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	raw, err := dec.DecodeAll(first, nil)
	if err != nil {
		t.Fatalf("decompressing: %v", err)
	}
	var want bytes.Buffer
	if err := sampleArchive().Write(&want); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, want.Bytes()) {
		t.Error("decompressed archive differs from the uncompressed one")
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
