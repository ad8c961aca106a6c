package update

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"cairn.dev/cairn/pkg/release/releasetest"
	"cairn.dev/cairn/pkg/verity"
)

// TestInstallBusy refuses a second install while one runs.
func TestInstallBusy(t *testing.T) {
	i := New(Config{})
	i.busy.Lock()
	defer i.busy.Unlock()
	if _, err := i.Install(context.Background(), Request{Reference: "x/y:z"}, func(Progress) {}); !errors.Is(err, ErrBusy) {
		t.Fatalf("Install during another: %v, want ErrBusy", err)
	}
}

// TestCheckSlot reads back a slot whose data or stored tree differs from
// what the release names.
func TestCheckSlot(t *testing.T) {
	sys, params := releasetest.SystemImage(t, 20, []byte("salt"))
	for _, tc := range []struct {
		name string
		flip int // byte to flip; -1 none
		want error
	}{
		{"as written", -1, nil},
		{"a data byte", 5 * verity.BlockSize, ErrReadBack},
		{"a tree byte", int(params.HashOffset) + 7, ErrReadBack},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := bytes.Clone(sys)
			if tc.flip >= 0 {
				img[tc.flip] ^= 1
			}
			p := filepath.Join(t.TempDir(), "slot")
			if err := os.WriteFile(p, append(img, make([]byte, verity.BlockSize)...), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := checkSlot(p, params); !errors.Is(err, tc.want) {
				t.Errorf("checkSlot: %v, want %v", err, tc.want)
			}
		})
	}
}
