package kubernetes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadThrough reads a file of several buffers and a bit to its end,
// names a file it cannot open, and stops when its context does.
func TestReadThrough(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "program")
	want := 3*4096 + 17
	if err := os.WriteFile(path, make([]byte, want), 0o644); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := readThrough(context.Background(), path, buf)
	if err != nil || n != int64(want) {
		t.Errorf("readThrough(%s) = %d, %v; want %d, nil", path, n, err, want)
	}
	missing := filepath.Join(dir, "missing")
	if _, err := readThrough(context.Background(), missing, buf); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("readThrough(%s) = %v; want an error naming it", missing, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if n, err := readThrough(ctx, path, buf); !errors.Is(err, context.Canceled) || n != 0 {
		t.Errorf("readThrough with a cancelled context = %d, %v; want 0, context.Canceled", n, err)
	}
}
