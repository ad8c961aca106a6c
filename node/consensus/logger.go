package consensus

import (
	"bytes"
	"fmt"
	"path"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"cairn.dev/cairn/pkg/logtree"
)

// logCore is a zapcore.Core that writes etcd's structured logs into a
// logtree leveled logger, one line per entry:
//
//	[server.go:123] raft.node: became leader at term 2 id=8e9e05c52164694d
//
// Debug entries are dropped, and so are the traces of requests that took
// less than slowRequest: etcd traces every request past 100 ms, which under
// emulation is most of them. The file and line in brackets are etcd's; the
// logtree entry itself is attributed to this adapter.
type logCore struct {
	lg     logtree.LeveledLogger
	trap   *fatalTrap
	fields []zapcore.Field
}

func (c *logCore) Enabled(l zapcore.Level) bool { return l >= zapcore.InfoLevel }

func (c *logCore) With(fields []zapcore.Field) zapcore.Core {
	return &logCore{lg: c.lg, trap: c.trap, fields: append(c.fields[:len(c.fields):len(c.fields)], fields...)}
}

func (c *logCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *logCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	if e.Level == zapcore.InfoLevel && path.Base(e.Caller.File) == "trace.go" && quickTrace(fields) {
		return nil
	}
	if c.trap != nil && e.Level >= zapcore.WarnLevel {
		c.trap.spotRemoval(fields)
	}
	msg := formatEntry(e, c.fields, fields)
	switch {
	case e.Level >= zapcore.ErrorLevel:
		if e.Level > zapcore.ErrorLevel {
			msg = e.Level.CapitalString() + ": " + msg
		}
		c.lg.Error(msg)
	case e.Level == zapcore.WarnLevel:
		c.lg.Warning(msg)
	default:
		c.lg.Info(msg)
	}
	return nil
}

func (c *logCore) Sync() error { return nil }

// quickTrace tells whether the fields of one of etcd's request traces give
// a duration shorter than slowRequest.
func quickTrace(fields []zapcore.Field) bool {
	for _, f := range fields {
		if f.Key == "duration" && f.Type == zapcore.DurationType {
			return time.Duration(f.Integer) < slowRequest
		}
	}
	return false
}

func formatEntry(e zapcore.Entry, sets ...[]zapcore.Field) string {
	var b bytes.Buffer
	if e.Caller.Defined {
		fmt.Fprintf(&b, "[%s:%d] ", path.Base(e.Caller.File), e.Caller.Line)
	}
	if e.LoggerName != "" {
		b.WriteString(e.LoggerName)
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	enc := zapcore.NewMapObjectEncoder()
	for _, fields := range sets {
		for _, f := range fields {
			f.AddTo(enc)
		}
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%v", k, enc.Fields[k])
	}
	return b.String()
}

// fatalTrap turns etcd's Fatal and Panic log calls, which would otherwise
// exit the whole node (zap's Fatal calls os.Exit) or panic in a goroutine
// nobody can recover, into an error for the consensus runnable:
//
//   - the first such message is kept and trapped() is closed, so the
//     runnable returns an error to its supervisor and is restarted;
//   - on the goroutine that is starting etcd (ours), the call panics with
//     a trappedFatal that catch recovers into an error;
//   - on any other goroutine (etcd's own) the goroutine is ended with
//     runtime.Goexit, which runs its deferred calls but, unlike a panic,
//     does not take the process down.
//
// This guards log-driven exits only. A real runtime panic (a nil
// dereference, say) in a goroutine etcd started cannot be recovered from
// outside that goroutine in Go and still ends the process.
//
// It also spots the one way etcd tells that a peer refused this member
// because it was removed from the cluster: a logged error saying so, after
// which etcd's server stops. etcd has no API for it.
type fatalTrap struct {
	mu       sync.Mutex
	msg      string
	ch       chan struct{}
	starting int64 // goroutine id running start, or 0
	removed  bool
}

// removedMessage is what etcd's error says when a peer refuses this member
// because it was removed.
const removedMessage = "permanently removed from the cluster"

func (t *fatalTrap) spotRemoval(fields []zapcore.Field) {
	for _, f := range fields {
		err, ok := f.Interface.(error)
		if f.Type == zapcore.ErrorType && ok && strings.Contains(err.Error(), removedMessage) {
			t.mu.Lock()
			t.removed = true
			t.mu.Unlock()
		}
	}
}

// wasRemoved tells whether etcd said this member was removed.
func (t *fatalTrap) wasRemoved() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.removed
}

func newFatalTrap() *fatalTrap { return &fatalTrap{ch: make(chan struct{})} }

type trappedFatal struct{ msg string }

// OnWrite implements zapcore.CheckWriteHook.
func (t *fatalTrap) OnWrite(ce *zapcore.CheckedEntry, fields []zapcore.Field) {
	msg := formatEntry(ce.Entry, fields)
	t.mu.Lock()
	first := t.msg == ""
	if first {
		t.msg = msg
		close(t.ch)
	}
	starting := t.starting
	t.mu.Unlock()
	if starting != 0 && starting == goroutineID() {
		panic(trappedFatal{msg: msg})
	}
	runtime.Goexit()
}

// trapped is closed once etcd logged a Fatal or Panic.
func (t *fatalTrap) trapped() <-chan struct{} { return t.ch }

func (t *fatalTrap) message() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.msg
}

// catch turns a Fatal that etcd logged on the goroutine that armed t with
// setStarting into *err, saying what etcd was doing:
//
//	trap.setStarting(true)
//	defer trap.setStarting(false)
//	defer trap.catch(&err, "starting")
//
// It must be deferred directly, for it recovers the panic. Any other panic
// goes on.
func (t *fatalTrap) catch(err *error, doing string) {
	if r := recover(); r != nil {
		tf, ok := r.(trappedFatal)
		if !ok {
			panic(r)
		}
		*err = fmt.Errorf("etcd failed fatally while %s: %s", doing, tf.msg)
	}
}

func (t *fatalTrap) setStarting(on bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.starting = 0
	if on {
		t.starting = goroutineID()
	}
}

// goroutineID returns the current goroutine's number, read from the first
// line of its stack trace ("goroutine 42 [running]:"). Go offers no other
// way; it is only used to tell our own goroutine from etcd's.
func goroutineID() int64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, _ := strconv.ParseInt(string(b), 10, 64)
	return id
}

// newZapLogger returns the logger etcd runs with: entries go to lg, and
// Fatal and Panic go through trap.
func newZapLogger(lg logtree.LeveledLogger, trap *fatalTrap) *zap.Logger {
	return zap.New(&logCore{lg: lg, trap: trap},
		zap.AddCaller(),
		zap.WithFatalHook(trap),
		zap.WithPanicHook(trap),
	)
}
