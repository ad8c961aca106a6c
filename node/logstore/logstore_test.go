package logstore_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"cairn.dev/cairn/node/logstore"
	"cairn.dev/cairn/node/logstore/logstoretest"
	"cairn.dev/cairn/pkg/logtree"
	api "cairn.dev/cairn/proto/api"
)

// messages lists the messages of entries of logger dn.
func messages(es []*api.LogEntry, dn string) []string {
	var out []string
	for _, e := range es {
		if e.Dn == dn {
			out = append(out, e.Message)
		}
	}
	return out
}

func TestBootsKept(t *testing.T) {
	cfg := logstore.Config{Dir: filepath.Join(t.TempDir(), "logs"), KeepBoots: 3}
	var last *logstore.Store
	for b := 1; b <= 5; b++ {
		tree := logtree.New()
		cfg.Tree = tree
		lg := tree.LeveledFor("root.test")
		lg.Infof("boot %d before the store", b)
		last = logstoretest.Boot(t, cfg, func() {
			lg.Infof("boot %d running", b)
			lg.Errorf("boot %d failing", b)
		})
	}
	for _, c := range []struct {
		boot int
		want []string
	}{
		{0, []string{"boot 5 before the store", "boot 5 running", "boot 5 failing"}},
		{-1, []string{"boot 4 before the store", "boot 4 running", "boot 4 failing"}},
		{-2, []string{"boot 3 before the store", "boot 3 running", "boot 3 failing"}},
	} {
		es, err := last.Read(c.boot)
		if got := messages(es, "root.test"); err != nil || !slices.Equal(got, c.want) {
			t.Errorf("Read(%d) = %q, %v; want %q", c.boot, got, err, c.want)
		}
	}
	for _, b := range []int{-3, 1} {
		if _, err := last.Read(b); !errors.Is(err, logstore.ErrNoSuchBoot) {
			t.Errorf("Read(%d) = %v, want ErrNoSuchBoot", b, err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(cfg.Dir, "*"))
	if len(files) != 3 {
		t.Errorf("files kept %q, want the 3 boots' files alone", files)
	}
}

func TestSegmentsBounded(t *testing.T) {
	cfg := logstore.Config{Dir: t.TempDir(), SegmentBytes: 2 << 10}
	tree := logtree.New()
	cfg.Tree = tree
	lg := tree.LeveledFor("root.chatty")
	const n = 500
	st := logstoretest.Boot(t, cfg, func() {
		for i := range n {
			lg.Infof("entry %04d", i)
		}
	})
	es, err := st.Read(0)
	if err != nil {
		t.Fatal(err)
	}
	got := messages(es, "root.chatty")
	if len(got) == 0 || len(got) >= n || got[len(got)-1] != fmt.Sprintf("entry %04d", n-1) {
		t.Fatalf("read %d entries ending %q; want the last ones of %d, not all", len(got), got[len(got)-1:], n)
	}
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("entries out of order: %q after %q", got[i], got[i-1])
		}
	}
	var total int64
	files, _ := filepath.Glob(filepath.Join(cfg.Dir, "*"))
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		total += fi.Size()
	}
	// Two segments, each at most one record past the limit.
	if len(files) != 2 || total > 2*cfg.SegmentBytes+1024 {
		t.Errorf("%d files of %d bytes in all, want 2 of at most about %d", len(files), total, 2*cfg.SegmentBytes)
	}
}

// TestCutShort reads a boot whose last record a power cut left half
// written: the records before it are all there.
func TestCutShort(t *testing.T) {
	cfg := logstore.Config{Dir: t.TempDir()}
	tree := logtree.New()
	cfg.Tree = tree
	lg := tree.LeveledFor("root.test")
	st := logstoretest.Boot(t, cfg, func() {
		lg.Info("first")
		lg.Info("second, the one cut short")
	})
	path := logstore.BootFiles(cfg.Dir, 1)[1]
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	es, err := st.Read(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()-5); err != nil {
		t.Fatal(err)
	}
	cut, err := st.Read(0)
	if err != nil || len(cut) != len(es)-1 || messages(cut, "root.test")[0] != "first" {
		t.Errorf("after the cut: %d entries (%v), want %d ending before the cut record", len(cut), err, len(es)-1)
	}
}

// TestReadBeforeRunning checks that a store asked before it runs says so,
// rather than taking the last boot on disk for the one before this.
func TestReadBeforeRunning(t *testing.T) {
	dir := t.TempDir()
	logstoretest.Boot(t, logstore.Config{Tree: logtree.New(), Dir: dir}, func() {})
	if _, err := logstore.New(logstore.Config{Tree: logtree.New(), Dir: dir}).Read(-1); !errors.Is(err, logstore.ErrNotRunning) {
		t.Errorf("Read before Run = %v, want ErrNotRunning", err)
	}
}

// TestRestartWithinBoot runs a store twice in one boot, as the supervisor
// restarts a failed runnable: the boot keeps one file, with the entries of
// both runs.
func TestRestartWithinBoot(t *testing.T) {
	tree := logtree.New()
	s := logstore.New(logstore.Config{Tree: tree, Dir: t.TempDir()})
	lg := tree.LeveledFor("root.test")
	logstoretest.Run(t, s, func() { lg.Info("first run") })
	logstoretest.Run(t, s, func() { lg.Info("second run") })
	es, err := s.Read(0)
	got := messages(es, "root.test")
	if err != nil || len(got) < 2 || got[len(got)-1] != "second run" || !slices.Contains(got, "first run") {
		t.Errorf("Read(0) = %q, %v; want both runs' entries", got, err)
	}
	if _, err := s.Read(-1); !errors.Is(err, logstore.ErrNoSuchBoot) {
		t.Errorf("Read(-1) = %v: the restart made a boot of its own", err)
	}
}
