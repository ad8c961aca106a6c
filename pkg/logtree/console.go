package logtree

import (
	"io"
	"slices"
	"sync"
)

// consoleStreamBuffer is how many entries a console may fall behind before
// it drops some. Consoles are often slow serial lines, and boot is bursty.
const consoleStreamBuffer = 4096

// ConsoleOption configures Console.
type ConsoleOption func(*consoleConfig)

type consoleConfig struct {
	dn          DN
	minSeverity Severity
	// quiet are subtrees whose entries need a severity of their own.
	quiet []quietSubtree
}

// quietSubtree is a ConsoleQuiet option.
type quietSubtree struct {
	parts []string
	min   Severity
}

// ConsoleQuiet leaves out the entries of the node dn and the nodes below it
// that are less severe than s: for chatty programs, like Kubernetes'
// components, whose routine output would flood a slow serial console. Raw
// entries count as INFO.
func ConsoleQuiet(dn DN, s Severity) ConsoleOption {
	return func(c *consoleConfig) { c.quiet = append(c.quiet, quietSubtree{parts: dn.normalized(), min: s}) }
}

// quieted reports whether e falls under a quiet subtree whose severity it
// lacks.
func (c *consoleConfig) quieted(e *LogEntry) bool {
	if len(c.quiet) == 0 {
		return false
	}
	parts := e.DN.normalized()
	for _, q := range c.quiet {
		if e.Severity < q.min && len(parts) >= len(q.parts) && slices.Equal(parts[:len(q.parts)], q.parts) {
			return true
		}
	}
	return false
}

// ConsoleMinimumSeverity leaves out entries less severe than s. Raw entries
// count as INFO.
func ConsoleMinimumSeverity(s Severity) ConsoleOption {
	return func(c *consoleConfig) { c.minSeverity = s }
}

// ConsoleDN limits the console to the node dn and the nodes below it. The
// default is the whole tree. Empty parts of dn are dropped, as for
// LeveledFor.
func ConsoleDN(dn DN) ConsoleOption {
	return func(c *consoleConfig) { c.dn = dn }
}

// Console copies entries matching the options to w, one String() line each,
// until stop is called. It prints entries logged from now on, not the
// backlog.
//
// The writing is done by a goroutine of the console's own, fed by a
// streaming reader, so a slow w makes the console drop entries (and print a
// note saying how many) instead of making loggers wait. Errors from w are
// ignored, as there is nowhere left to report them.
//
// The goroutine runs until stop, which closes the reader, lets the goroutine
// print what the reader had buffered and a last note of entries lost, and
// waits for it to return. stop may be called more than once; if w blocks
// forever, so does stop.
func (t *LogTree) Console(w io.Writer, opts ...ConsoleOption) (stop func()) {
	var c consoleConfig
	for _, o := range opts {
		o(&c)
	}
	r := t.read(c.dn.normalized(), readConfig{
		children:     true,
		stream:       true,
		streamBuffer: consoleStreamBuffer,
		minSeverity:  c.minSeverity,
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var line []byte
		write := func(e *LogEntry) {
			line = append(e.appendText(line[:0]), '\n')
			_, _ = w.Write(line)
		}
		for e := range r.Stream {
			if !c.quieted(e) {
				write(e)
			}
		}
		if note := r.finalNote(); note != nil {
			write(note)
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.Close()
			<-done
		})
	}
}
