package espimage

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/diskfs/go-diskfs/partition/gpt"
)

// FuzzReadFile feeds arbitrary images to ReadFile and WriteFile: a damaged
// or foreign image must give an error, never a panic or a hang.
func FuzzReadFile(f *testing.F) {
	img := newImage(f, gpt.EFISystemPartition, true)
	if err := WriteFile(img, "cairn/parameters.pb", []byte("seed")); err != nil {
		f.Fatal(err)
	}
	data, err := os.ReadFile(img)
	if err != nil {
		f.Fatal(err)
	}
	// The interesting part is the first MiBs: MBR, GPT and the ESP's
	// boot sector, FATs and root directory.
	f.Add(data[:3<<20])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, image []byte) {
		p := filepath.Join(t.TempDir(), "fuzz.img")
		if err := os.WriteFile(p, image, 0o600); err != nil {
			t.Fatal(err)
		}
		ReadFile(p, "cairn/parameters.pb")
		WriteFile(p, "cairn/parameters.pb", []byte("x"))
	})
}
