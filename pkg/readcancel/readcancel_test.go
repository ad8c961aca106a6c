package readcancel

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// TestBind: a read blocked on a pipe ends with os.ErrDeadlineExceeded when
// its context ends; after release, a read bound to a new context waits for
// data again and gets it, however soon after the cancel it comes, and
// also when the context ended after its read had returned data.
func TestBind(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	buf := make([]byte, 1)

	for i := range 200 {
		ctx, cancel := context.WithCancel(context.Background())
		release, err := Bind(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			// Once, the cancel comes while the read blocks.
			time.AfterFunc(20*time.Millisecond, cancel)
		} else {
			cancel()
		}
		if _, err := r.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("round %d: read after its context ended = %v, want os.ErrDeadlineExceeded", i, err)
		}
		release()

		// A read that got its data, and a context that ends just after.
		ctx, cancel = context.WithCancel(context.Background())
		if release, err = Bind(ctx, r); err != nil {
			t.Fatal(err)
		}
		readByte(t, r, w, byte(i))
		cancel()
		release()

		if release, err = Bind(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		readByte(t, r, w, byte(i+1))
		release()
	}
}

// readByte writes b into the pipe w and reads it back from r.
func readByte(t *testing.T, r, w *os.File, b byte) {
	t.Helper()
	if _, err := w.Write([]byte{b}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if n, err := r.Read(buf); err != nil || n != 1 || buf[0] != b {
		t.Fatalf("read = %d, %v (byte %d), want byte %d", n, err, buf[0], b)
	}
}

// TestBindClosed: a file that cannot take a deadline is an error.
func TestBindClosed(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	r.Close()
	if _, err := Bind(context.Background(), r); err == nil {
		t.Error("Bind on a closed file succeeded")
	}
}
