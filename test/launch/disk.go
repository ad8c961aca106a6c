package launch

import (
	"fmt"
	"os"
)

// DiskSize is the size of every node's disk: the image (ESP and system
// slots, 2.3 GiB) and room for the data partition the node makes on first
// boot, which holds etcd, containerd's images and the volumes. It costs
// the host only what the node writes: an overlay reads the image's holes
// as zeros, and a writable image is grown sparsely. An image larger than
// this keeps its size.
const DiskSize = 8 << 30

// growDisk extends the raw image at path to size bytes, sparsely, when it
// is smaller: the node's first boot then grows its GPT to the new end.
func growDisk(path string, size int64) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("when sizing the disk: %w", err)
	}
	if st.Size() >= size {
		return nil
	}
	if err := os.Truncate(path, size); err != nil {
		return fmt.Errorf("when growing the disk to %d bytes: %w", size, err)
	}
	return nil
}

// diskSize returns the size of a node's disk over the raw image at path:
// DiskSize, or the image's own size if that is larger.
func diskSize(path string) (int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("when sizing the image: %w", err)
	}
	return max(st.Size(), DiskSize), nil
}
