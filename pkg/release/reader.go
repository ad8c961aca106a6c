package release

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"

	"cairn.dev/cairn/pkg/ociimage"
)

// A DigestReader reads a blob through while hashing it, and fails at the
// end when the blob was not its descriptor's: the bytes before the end
// are unverified, so whoever writes them to a disk commits (marks the
// slot bootable, say) only once Read returned io.EOF.
type DigestReader struct {
	r    io.Reader
	d    ociimage.Descriptor
	h    hash.Hash
	n    int64
	done error
}

// NewDigestReader reads r, which should hold the blob d.
func NewDigestReader(r io.Reader, d ociimage.Descriptor) *DigestReader {
	return &DigestReader{r: r, d: d, h: sha256.New()}
}

// Read reads from the blob. It returns io.EOF only after the whole blob
// matched; a blob that is longer, shorter or different ends in an error
// wrapping ErrDigestMismatch (or the underlying read error) instead.
func (r *DigestReader) Read(p []byte) (int, error) {
	if r.done != nil {
		return 0, r.done
	}
	// Never read beyond the size, so that a longer blob is caught
	// without buffering what follows.
	if left := r.d.Size - r.n; int64(len(p)) > left+1 {
		p = p[:left+1]
	}
	n, err := r.r.Read(p)
	r.n += int64(n)
	r.h.Write(p[:n])
	if r.n > r.d.Size {
		r.done = fmt.Errorf("%w: blob %s is longer than its %d bytes", ErrDigestMismatch, r.d.Digest, r.d.Size)
		return n, r.done
	}
	switch {
	case errors.Is(err, io.EOF):
		r.done = r.check()
		return n, r.done
	case err != nil:
		r.done = fmt.Errorf("when reading blob %s: %w", r.d.Digest, err)
		return n, r.done
	}
	return n, nil
}

func (r *DigestReader) check() error {
	if r.n != r.d.Size {
		return fmt.Errorf("%w: blob %s ended after %d of its %d bytes", ErrDigestMismatch, r.d.Digest, r.n, r.d.Size)
	}
	if got := "sha256:" + hex.EncodeToString(r.h.Sum(nil)); got != r.d.Digest {
		return fmt.Errorf("%w: blob %s hashes to %s", ErrDigestMismatch, r.d.Digest, got)
	}
	return io.EOF
}
