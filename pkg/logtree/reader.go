package logtree

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
)

// BacklogAll asks WithBacklog for every entry the tree still holds.
const BacklogAll = -1

// defaultStreamBuffer is how many entries a streaming reader may fall behind
// the loggers before entries are dropped for it.
const defaultStreamBuffer = 1024

// ReadOption configures Read.
type ReadOption func(*readConfig)

type readConfig struct {
	children     bool
	backlog      int // entries wanted, BacklogAll for all; 0 for none
	wantBacklog  bool
	stream       bool
	streamBuffer int
	minSeverity  Severity
}

// WithChildren makes Read return the entries of the node and of all nodes
// below it, merged in the order the tree accepted them.
func WithChildren() ReadOption {
	return func(c *readConfig) { c.children = true }
}

// WithBacklog makes Read return, in LogReader.Backlog, the newest n entries
// the tree holds, or all of them for BacklogAll.
func WithBacklog(n int) ReadOption {
	return func(c *readConfig) {
		c.wantBacklog = true
		c.backlog = n
	}
}

// WithStream makes Read return, in LogReader.Stream, a channel of the entries
// logged from now on, until LogReader.Close.
func WithStream() ReadOption {
	return func(c *readConfig) { c.stream = true }
}

// WithMinimumSeverity leaves out entries less severe than s, in the backlog
// and in the stream. Raw entries count as INFO.
func WithMinimumSeverity(s Severity) ReadOption {
	return func(c *readConfig) { c.minSeverity = s }
}

// withStreamBuffer sets the capacity of the stream channel; for tests and the
// console.
func withStreamBuffer(n int) ReadOption {
	return func(c *readConfig) { c.streamBuffer = max(n, 1) }
}

// LogReader is what Read returns: a backlog, a stream, or both.
type LogReader struct {
	// Backlog holds the entries the tree had when Read was called, oldest
	// first. It is nil unless Read was given WithBacklog.
	Backlog []*LogEntry
	// Stream delivers entries logged after Read returned; it is nil unless
	// Read was given WithStream. It never repeats an entry of Backlog and
	// misses none, except that a reader that falls behind by the stream's
	// buffer loses entries instead of slowing the loggers down. The tree
	// then delivers, once there is room again, a WARNING entry saying how
	// many were lost, and counts them in Dropped. Close closes the channel.
	Stream <-chan *LogEntry

	tree *LogTree
	sub  *subscriber
}

// Read returns the entries of the node dn, and with WithChildren also of all
// nodes below it. At least one of WithBacklog and WithStream is required.
// A DN with an empty part is an error. Streaming from a DN nothing has
// logged to yet creates its node, so that what is logged there later is
// seen.
func (t *LogTree) Read(dn DN, opts ...ReadOption) (*LogReader, error) {
	parts, err := dn.split()
	if err != nil {
		return nil, err
	}
	c := readConfig{streamBuffer: defaultStreamBuffer}
	for _, o := range opts {
		o(&c)
	}
	if !c.wantBacklog && !c.stream {
		return nil, errors.New("neither WithBacklog nor WithStream given")
	}
	if c.wantBacklog && c.backlog < BacklogAll {
		return nil, fmt.Errorf("invalid backlog size %d", c.backlog)
	}
	return t.read(parts, c), nil
}

// read does Read's work for already checked arguments.
func (t *LogTree) read(parts []string, c readConfig) *LogReader {
	r := &LogReader{tree: t}
	var backlog []*entry

	t.mu.Lock()
	var n *node
	if c.stream {
		n = t.nodeForLocked(parts)
	} else {
		n = t.lookupLocked(parts)
	}
	switch {
	case !c.wantBacklog || n == nil:
	case c.children:
		backlog = n.collectTree(nil, c.backlog, c.minSeverity)
	default:
		backlog = n.collect(nil, c.backlog, c.minSeverity)
	}
	if c.stream {
		r.sub = &subscriber{
			node:        n,
			children:    c.children,
			minSeverity: c.minSeverity,
			ch:          make(chan *LogEntry, c.streamBuffer),
		}
		n.readers = append(n.readers, r.sub)
		r.Stream = r.sub.ch
	}
	t.mu.Unlock()

	if c.wantBacklog {
		r.Backlog = mergeBacklog(backlog, c.children, c.backlog)
	}
	return r
}

// mergeBacklog orders entries, if they come from several nodes, keeps the
// newest limit of them (all for BacklogAll) and returns them as LogEntries.
func mergeBacklog(entries []*entry, several bool, limit int) []*LogEntry {
	if several {
		slices.SortFunc(entries, func(a, b *entry) int { return cmp.Compare(a.seq, b.seq) })
	}
	if limit >= 0 && len(entries) > limit {
		entries = entries[len(entries)-limit:]
	}
	out := make([]*LogEntry, len(entries))
	for i, e := range entries {
		out[i] = &e.LogEntry
	}
	return out
}

// Dropped returns how many entries the stream has lost so far because the
// reader fell behind.
func (r *LogReader) Dropped() uint64 {
	if r.sub == nil {
		return 0
	}
	return r.sub.dropped.Load()
}

// Close stops the stream, closes the Stream channel and releases the reader.
// Entries already in the channel can still be received. Close may be called
// more than once, and from any goroutine.
func (r *LogReader) Close() {
	s := r.sub
	if s == nil {
		return
	}
	t := r.tree
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	n := s.node
	n.readers = slices.DeleteFunc(n.readers, func(o *subscriber) bool { return o == s })
	close(s.ch)
}

// finalNote returns, once the stream is closed, the note of entries lost
// after the last one delivered, or nil if there were none. Readers that
// drain their stream to the end, like the console, use it so that a loss
// just before Close is not kept silent.
func (r *LogReader) finalNote() *LogEntry {
	s := r.sub
	r.tree.mu.Lock()
	defer r.tree.mu.Unlock()
	if s.pending == 0 {
		return nil
	}
	note := s.dropNote()
	s.pending = 0
	return note
}

// subscriber is the streaming side of a LogReader. Everything but dropped is
// guarded by LogTree.mu.
type subscriber struct {
	node        *node
	children    bool
	minSeverity Severity
	ch          chan *LogEntry
	closed      bool

	// pending counts entries lost since the reader was last told.
	pending uint64
	// dropped counts all entries lost; read without the lock by Dropped.
	dropped atomic.Uint64
}

// offer delivers e to the reader if it wants it and has room. Before that it
// tries to deliver the news of entries lost earlier. It never blocks.
func (s *subscriber) offer(e *entry) {
	if e.Severity < s.minSeverity {
		return
	}
	if s.pending > 0 {
		// Senders only ever send under the tree's lock, which we hold, so
		// room seen now stays room. Checking first spares building a note
		// for every entry dropped.
		if len(s.ch) == cap(s.ch) {
			s.lose()
			return
		}
		s.ch <- s.dropNote()
		s.pending = 0
	}
	select {
	case s.ch <- &e.LogEntry:
	default:
		s.lose()
	}
}

func (s *subscriber) lose() {
	s.pending++
	s.dropped.Add(1)
}

// dropNote is the entry that tells a reader it lost entries.
func (s *subscriber) dropNote() *LogEntry {
	return &LogEntry{
		Time:     time.Now(),
		DN:       s.node.dn,
		Severity: WARNING,
		Message:  fmt.Sprintf("logtree: reader fell behind, %d entries dropped", s.pending),
	}
}
