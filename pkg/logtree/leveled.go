package logtree

import (
	"fmt"
	"path"
	"runtime"
	"strings"
	"sync"
)

// LeveledLogger logs messages with a severity to one node of a LogTree. Each
// entry records the source file and line of the call that logged it.
//
// The methods without f format their arguments like fmt.Sprint, the ones
// with f like fmt.Sprintf. Trailing newlines are dropped from messages.
// A LeveledLogger is safe for concurrent use.
type LeveledLogger interface {
	Info(args ...any)
	Infof(format string, args ...any)
	Warning(args ...any)
	Warningf(format string, args ...any)
	Error(args ...any)
	Errorf(format string, args ...any)

	// WithAddedStackDepth returns a logger that attributes entries to a
	// caller depth frames further up (for helpers that log on behalf of
	// others).
	WithAddedStackDepth(depth int) LeveledLogger
}

// LeveledFor returns a leveled logger writing to the node dn. Empty parts of
// dn are dropped ("a..b" logs to "a.b"), since logging has no way to fail.
//
// Callers may ask for the logger of a DN on every log call, as the
// supervisor's Logger(ctx) does, so loggers are kept per DN and handed out
// again without allocating.
func (t *LogTree) LeveledFor(dn DN) LeveledLogger {
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.leveled[dn]
	if !ok {
		l = &leveledLogger{tree: t, node: t.nodeForLocked(dn.normalized())}
		t.leveled[dn] = l
	}
	return l
}

// leveledLogger is the LeveledLogger of a LogTree. It is immutable.
type leveledLogger struct {
	tree  *LogTree
	node  *node
	depth int
}

func (l *leveledLogger) Info(args ...any) { l.log(INFO, fmt.Sprint(args...)) }
func (l *leveledLogger) Infof(format string, args ...any) {
	l.log(INFO, fmt.Sprintf(format, args...))
}
func (l *leveledLogger) Warning(args ...any) { l.log(WARNING, fmt.Sprint(args...)) }
func (l *leveledLogger) Warningf(format string, args ...any) {
	l.log(WARNING, fmt.Sprintf(format, args...))
}
func (l *leveledLogger) Error(args ...any) { l.log(ERROR, fmt.Sprint(args...)) }
func (l *leveledLogger) Errorf(format string, args ...any) {
	l.log(ERROR, fmt.Sprintf(format, args...))
}

func (l *leveledLogger) WithAddedStackDepth(depth int) LeveledLogger {
	return &leveledLogger{tree: l.tree, node: l.node, depth: max(l.depth+depth, 0)}
}

// log stores one entry. It must be called directly by the exported methods:
// the caller it records is two frames up from here, plus l.depth. The
// message is formatted before, outside the tree's lock, so that a String
// method which itself logs cannot deadlock.
func (l *leveledLogger) log(s Severity, msg string) {
	var pc [1]uintptr
	// Frames: 0 runtime.Callers, 1 log, 2 Info & co., 3 their caller.
	var loc location
	if runtime.Callers(3+l.depth, pc[:]) == 1 {
		loc = locate(pc[0])
	} else {
		loc = location{file: "???"}
	}
	l.tree.append(l.node, &entry{LogEntry: LogEntry{
		Severity: s,
		File:     loc.file,
		Line:     loc.line,
		Message:  strings.TrimRight(msg, "\n"),
	}})
}

// location is a resolved source position.
type location struct {
	file string
	line int
}

// locations caches locate's answers by program counter. Turning a program
// counter into file and line means decoding the binary's line tables, which
// costs several times more than the rest of logging an entry. The cache is
// bounded by the number of logging call sites in the binary, and shared by
// all trees as the facts it holds are those of the binary. (A sync.Map would
// box every key into an interface, one allocation per entry logged.)
var locations struct {
	sync.RWMutex
	m map[uintptr]location
}

// locate returns the source position of the call whose return address is pc,
// as found by runtime.Callers.
func locate(pc uintptr) location {
	locations.RLock()
	loc, ok := locations.m[pc]
	locations.RUnlock()
	if ok {
		return loc
	}
	frame, _ := runtime.CallersFrames([]uintptr{pc}).Next()
	loc = location{file: path.Base(frame.File), line: frame.Line}
	if frame.File == "" {
		loc.file = "???"
	}
	locations.Lock()
	if locations.m == nil {
		locations.m = make(map[uintptr]location)
	}
	locations.m[pc] = loc
	locations.Unlock()
	return loc
}
