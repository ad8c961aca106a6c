package gpt

import (
	"errors"
	"os"
	"testing"
)

var errPowerCut = errors.New("power cut")

// cuttingDevice loses power during its cut-th write: that write lands
// torn (only its first half of sectors), later writes never land.
type cuttingDevice struct {
	*os.File
	cut, writes int
}

func (d *cuttingDevice) WriteAt(b []byte, off int64) (int, error) {
	d.writes++
	switch {
	case d.writes < d.cut:
		return d.File.WriteAt(b, off)
	case d.writes == d.cut:
		half := len(b) / 512 / 2 * 512
		d.File.WriteAt(b[:half], off)
		return half, errPowerCut
	default:
		return 0, errPowerCut
	}
}

// TestPowerCut cuts power at every write of a first boot, on an image
// sized disk and on a grown one, and wants the next boot to finish the
// job with the ESP untouched.
func TestPowerCut(t *testing.T) {
	for _, grow := range []int64{1, 4} {
		for cut := 1; ; cut++ {
			path := builderImage(t, imageSize)
			if err := os.Truncate(path, grow*imageSize); err != nil {
				t.Fatal(err)
			}
			f, size := openImage(t, path)
			dev := &cuttingDevice{File: f, cut: cut}
			_, _, err := EnsurePartition(dev, size, 512, dataTemplate, 2048)
			if err == nil {
				if cut < 4 {
					t.Fatalf("first boot survived a power cut at write %d", cut)
				}
				break // every write happened before the cut
			}
			p, _, err := EnsurePartition(f, size, 512, dataTemplate, 2048)
			if err != nil {
				t.Fatalf("disk %dx, cut at write %d: next boot: %v", grow, cut, err)
			}
			total := uint64(size / 512)
			if p.FirstLBA != espEnd+1 || p.LastLBA != total-34 {
				t.Errorf("disk %dx, cut at write %d: data partition at %d..%d, want %d..%d",
					grow, cut, p.FirstLBA, p.LastLBA, espEnd+1, total-34)
			}
			tab := checkBothValid(t, f, size)
			if esp := tab.Entries[0]; esp.Type != TypeEFISystem || esp.FirstLBA != 2048 || esp.LastLBA != espEnd {
				t.Errorf("disk %dx, cut at write %d: ESP entry became %+v", grow, cut, esp)
			}
		}
	}
}
