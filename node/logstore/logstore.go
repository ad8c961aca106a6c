// Package logstore keeps the node's log tree on its data partition, so
// that a crash or a reboot leaves its story behind: every entry of a boot
// is appended to that boot's file, and the files of the last few boots
// are kept. NodeManagement.Logs reads them back through the Store
// (cairnctl logs --boot -1).
//
//	log tree ──stream (and the backlog from before the data partition
//	           was mounted)──▶ Store ──▶ <dir>/boot-<seq>.log
//	                                     <dir>/boot-<seq>.prev.log
//
// Each boot takes the next sequence number. Its entries are
// length-delimited cairn.api.LogEntry messages, written through a buffer
// that is flushed and synced every second, and at once for an error: a
// power cut loses at most the last second of ordinary entries, and a
// record cut short at the end of a file is left out when read. A boot's
// file that reaches SegmentBytes becomes its .prev file (replacing the
// one before), so a boot holds at most two segments and the store at
// most KeepBoots boots of them: a bounded share of the data partition,
// whatever a node logs.
package logstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protodelim"

	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/pkg/supervisor"
	api "cairn.dev/cairn/proto/api"
)

const (
	// DefaultSegmentBytes is a segment's size before it is set aside.
	DefaultSegmentBytes = 4 << 20
	// DefaultKeepBoots is how many boots are kept, the running one
	// included.
	DefaultKeepBoots = 5
	// syncInterval is how often written entries are flushed and synced.
	syncInterval = time.Second
)

// Config is a store's configuration.
type Config struct {
	// Tree is the log tree whose every entry is kept.
	Tree *logtree.LogTree
	// Dir is the directory of the boots' files, on the data partition.
	Dir string
	// SegmentBytes bounds one segment; zero means DefaultSegmentBytes.
	SegmentBytes int64
	// KeepBoots is how many boots are kept, this one included; zero means
	// DefaultKeepBoots.
	KeepBoots int
}

// Store writes the running boot's entries, and reads the past boots'.
// Run it once per boot.
type Store struct {
	cfg Config

	mu sync.Mutex
	// seq is the running boot's sequence number, zero until Run has
	// started its file.
	seq int
}

// New returns a store of cfg.
func New(cfg Config) *Store {
	if cfg.SegmentBytes <= 0 {
		cfg.SegmentBytes = DefaultSegmentBytes
	}
	if cfg.KeepBoots <= 0 {
		cfg.KeepBoots = DefaultKeepBoots
	}
	return &Store{cfg: cfg}
}

// Run starts this boot's file, removes the oldest boots beyond KeepBoots,
// and writes every entry of the tree (the backlog first) until ctx ends.
func (s *Store) Run(ctx context.Context) error {
	if err := os.MkdirAll(s.cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("when making the log directory: %w", err)
	}
	s.mu.Lock()
	seq := s.seq
	s.mu.Unlock()
	// A restart within the boot goes on with the boot's file; the backlog
	// it writes again may repeat entries, but loses none.
	restart := seq != 0
	if !restart {
		var err error
		if seq, err = s.newBoot(); err != nil {
			return err
		}
	}
	reader, err := s.cfg.Tree.Read("", logtree.WithChildren(), logtree.WithBacklog(logtree.BacklogAll), logtree.WithStream())
	if err != nil {
		return fmt.Errorf("when reading the log tree: %w", err)
	}
	defer reader.Close()
	w, err := openSegment(s.cfg.Dir, seq, s.cfg.SegmentBytes, restart)
	if err != nil {
		return err
	}
	defer w.close()
	s.mu.Lock()
	s.seq = seq
	s.mu.Unlock()
	for _, e := range reader.Backlog {
		if err := w.write(e); err != nil {
			return err
		}
	}
	if err := w.sync(); err != nil {
		return err
	}
	supervisor.Logger(ctx).Infof("Keeping this boot's logs in %s (boot %d, the last %d boots kept)", w.path, seq, s.cfg.KeepBoots)
	supervisor.Signal(ctx, supervisor.SignalHealthy)
	tick := time.NewTicker(syncInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			// What was logged up to the end of the boot, as far as it
			// is already there.
			if err := drain(w, reader.Stream); err != nil {
				return err
			}
			return ctx.Err()
		case e, ok := <-reader.Stream:
			if !ok {
				return w.sync()
			}
			if err := w.write(e); err != nil {
				return err
			}
			if e.Severity >= logtree.ERROR {
				if err := w.sync(); err != nil {
					return err
				}
			}
		case <-tick.C:
			if err := w.sync(); err != nil {
				return err
			}
		}
	}
}

// drain writes the entries waiting in stream, then syncs.
func drain(w *segment, stream <-chan *logtree.LogEntry) error {
	for {
		select {
		case e, ok := <-stream:
			if !ok {
				return w.sync()
			}
			if err := w.write(e); err != nil {
				return err
			}
		default:
			return w.sync()
		}
	}
}

// newBoot returns the next boot's sequence number, after removing the
// oldest boots so that, with it, KeepBoots are kept.
func (s *Store) newBoot() (int, error) {
	boots, err := listBoots(s.cfg.Dir)
	if err != nil {
		return 0, err
	}
	seq := 1
	if len(boots) > 0 {
		seq = boots[len(boots)-1] + 1
	}
	for len(boots) >= s.cfg.KeepBoots {
		for _, f := range bootFiles(s.cfg.Dir, boots[0]) {
			if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
				return 0, fmt.Errorf("when removing an old boot's logs: %w", err)
			}
		}
		boots = boots[1:]
	}
	return seq, nil
}

// A segment is the file of the running boot being written.
type segment struct {
	dir     string
	seq     int
	path    string
	limit   int64
	f       *os.File
	buf     *bufio.Writer
	size    int64
	pending bool
}

// openSegment opens the current segment of boot seq: a new one, or with
// appendTo the one there is.
func openSegment(dir string, seq int, limit int64, appendTo bool) (*segment, error) {
	s := &segment{dir: dir, seq: seq, path: bootFiles(dir, seq)[1], limit: limit}
	return s, s.open(appendTo)
}

func (s *segment) open(appendTo bool) error {
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if appendTo {
		flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND
	}
	f, err := os.OpenFile(s.path, flags, 0o600)
	if err != nil {
		return fmt.Errorf("when opening the boot's log file: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("when opening the boot's log file: %w", err)
	}
	s.f, s.buf, s.size = f, bufio.NewWriterSize(f, 64<<10), fi.Size()
	return nil
}

// write appends e, and sets the segment aside for a new one once it is
// full.
func (s *segment) write(e *logtree.LogEntry) error {
	n, err := protodelim.MarshalTo(s.buf, api.LogEntryOf(e))
	if err != nil {
		return fmt.Errorf("when writing to %s: %w", s.path, err)
	}
	s.size += int64(n)
	s.pending = true
	if s.size < s.limit {
		return nil
	}
	if err := s.sync(); err != nil {
		return err
	}
	if err := s.f.Close(); err != nil {
		return fmt.Errorf("when closing %s: %w", s.path, err)
	}
	if err := os.Rename(s.path, bootFiles(s.dir, s.seq)[0]); err != nil {
		return fmt.Errorf("when setting %s aside: %w", s.path, err)
	}
	return s.open(false)
}

// sync flushes and syncs what was written since the last sync.
func (s *segment) sync() error {
	if !s.pending {
		return nil
	}
	if err := s.buf.Flush(); err != nil {
		return fmt.Errorf("when writing to %s: %w", s.path, err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("when syncing %s: %w", s.path, err)
	}
	s.pending = false
	return nil
}

func (s *segment) close() {
	s.sync()
	s.f.Close()
}

// bootFiles are the files of boot seq in dir, oldest first: its set-aside
// segment and its current one.
func bootFiles(dir string, seq int) []string {
	base := filepath.Join(dir, fmt.Sprintf("boot-%08d", seq))
	return []string{base + ".prev.log", base + ".log"}
}

// listBoots returns the sequence numbers of the boots in dir, in order.
func listBoots(dir string) ([]int, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("when listing the kept logs: %w", err)
	}
	var seqs []int
	for _, de := range des {
		name, ok := strings.CutPrefix(de.Name(), "boot-")
		if !ok {
			continue
		}
		name, _ = strings.CutSuffix(name, ".log")
		name, _ = strings.CutSuffix(name, ".prev")
		if n, err := strconv.Atoi(name); err == nil && n > 0 && !slices.Contains(seqs, n) {
			seqs = append(seqs, n)
		}
	}
	slices.Sort(seqs)
	return seqs, nil
}

var (
	// ErrNoSuchBoot is returned by Read for a boot the store does not
	// keep.
	ErrNoSuchBoot = errors.New("no such boot kept")
	// ErrNotRunning is returned by Read before Run has started this
	// boot's file: until then, which boot is which is not known.
	ErrNotRunning = errors.New("the log store has not started yet (the data partition is not mounted yet)")
)

// Read returns the kept entries of a boot, oldest first: boot 0 is the
// running one, -1 the one before, and so on. A record cut short at the
// end of a file (a power cut while it was written) is left out, and so
// is everything after a record that cannot be read.
func (s *Store) Read(boot int) ([]*api.LogEntry, error) {
	s.mu.Lock()
	seq := s.seq
	s.mu.Unlock()
	if seq == 0 {
		return nil, ErrNotRunning
	}
	boots, err := listBoots(s.cfg.Dir)
	if err != nil {
		return nil, err
	}
	boots = slices.DeleteFunc(boots, func(b int) bool { return b > seq })
	i := len(boots) - 1 + boot
	if boot > 0 || i < 0 || boots[len(boots)-1] != seq {
		return nil, fmt.Errorf("boot %d: %w (this node keeps %d, 0 to %d)", boot, ErrNoSuchBoot, len(boots), 1-len(boots))
	}
	var out []*api.LogEntry
	for _, path := range bootFiles(s.cfg.Dir, boots[i]) {
		es, err := readFile(path)
		if err != nil {
			return nil, err
		}
		out = append(out, es...)
	}
	return out, nil
}

// readFile reads the records of one file until its end or the first that
// cannot be read.
func readFile(path string) ([]*api.LogEntry, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("when reading kept logs: %w", err)
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var out []*api.LogEntry
	for {
		e := &api.LogEntry{}
		err := protodelim.UnmarshalFrom(r, e)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			// A cut-short or damaged record: what came before stands.
			return out, nil
		}
		out = append(out, e)
	}
}
