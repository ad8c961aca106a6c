package launch

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestOverlaySize checks that a node's overlay is DiskSize large over a
// smaller image, and as large as an image larger than that.
func TestOverlaySize(t *testing.T) {
	if _, err := exec.LookPath(DefaultQEMUImg); err != nil {
		t.Skip("qemu-img is not installed (qemu-utils; build/deps.sh installs it)")
	}
	dir := t.TempDir()
	for _, size := range []int64{4 << 20, DiskSize + 1<<20} {
		image := filepath.Join(dir, "image.img")
		os.Remove(image)
		if err := os.WriteFile(image, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(image, size); err != nil {
			t.Fatal(err)
		}
		overlay := filepath.Join(dir, "disk.qcow2")
		os.Remove(overlay)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := createOverlay(ctx, DefaultQEMUImg, image, overlay); err != nil {
			t.Fatalf("createOverlay: %v", err)
		}
		out, err := exec.Command(DefaultQEMUImg, "info", "--output=json", overlay).Output()
		if err != nil {
			t.Fatalf("qemu-img info: %v", err)
		}
		var info struct {
			VirtualSize int64 `json:"virtual-size"`
		}
		if err := json.Unmarshal(out, &info); err != nil {
			t.Fatal(err)
		}
		if want := max(size, DiskSize); info.VirtualSize != want {
			t.Errorf("overlay of an image of %d bytes is %d bytes, want %d", size, info.VirtualSize, want)
		}
	}
}

// TestGrowDisk grows a small writable image sparsely and leaves a larger
// one as it is.
func TestGrowDisk(t *testing.T) {
	image := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(image, []byte("image"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := growDisk(image, DiskSize); err != nil {
		t.Fatalf("growDisk: %v", err)
	}
	st, err := os.Stat(image)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != DiskSize {
		t.Errorf("grown image is %d bytes, want %d", st.Size(), DiskSize)
	}
	if err := growDisk(image, 1<<20); err != nil {
		t.Errorf("growDisk to a smaller size: %v", err)
	}
	f, err := os.Open(image)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := make([]byte, 5)
	if _, err := f.ReadAt(head, 0); err != nil || string(head) != "image" {
		t.Errorf("the grown image starts with %q, %v; want its old bytes", head, err)
	}
	if st, err := f.Stat(); err != nil {
		t.Fatal(err)
	} else if st.Size() != DiskSize {
		t.Errorf("growDisk to a smaller size left %d bytes, want %d", st.Size(), DiskSize)
	}
	if growDisk(filepath.Join(t.TempDir(), "none"), DiskSize) == nil {
		t.Error("growDisk of a missing file succeeded")
	}
}
