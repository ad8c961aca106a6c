package logtree

import (
	"encoding/json"
	"io"
	"maps"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// KlogFor returns a writer like RawFor's, for the output of a program that
// logs with klog (Kubernetes' components), logrus (containerd) or zap's
// JSON (etcd's client inside the apiserver): each line
// in one of their formats becomes a leveled entry with the line's own
// severity, message and source location; any other line (a Go panic's
// stack, plain text) stays a raw entry, in order.
//
//	I1124 01:02:03.456789   1234 server.go:42] Serving securely    (klog)
//	time="2026-11-24T01:02:03Z" level=warning msg="slow" x=1      (logrus)
func (t *LogTree) KlogFor(dn DN) io.WriteCloser {
	n := t.nodeFor(dn.normalized())
	w := &rawWriter{}
	w.lines = lineSplitter{
		limit: MaxRawLine,
		emit: func(line []byte) {
			e := parseForeignLine(string(line))
			t.append(n, &entry{LogEntry: e})
		},
	}
	return w
}

// klogLine is klog's header: severity letter, month and day, time, thread
// ID, file:line, then "] " and the message.
var klogLine = regexp.MustCompile(`^([IWEF])\d{4} \d{2}:\d{2}:\d{2}\.\d{6}\s+\d+ ([^ :\]]+):(\d+)\] ?(.*)$`)

// parseForeignLine reads one line of a component's output.
func parseForeignLine(line string) LogEntry {
	if m := klogLine.FindStringSubmatch(line); m != nil {
		n, _ := strconv.Atoi(m[3])
		return LogEntry{Severity: klogSeverity(m[1][0]), File: m[2], Line: n, Message: m[4]}
	}
	if e, ok := parseLogfmt(line); ok {
		return e
	}
	if e, ok := parseZapJSON(line); ok {
		return e
	}
	return LogEntry{Severity: INFO, Message: line, Raw: true}
}

// parseZapJSON reads a line of zap's JSON encoder, as etcd's client logs
// inside Kubernetes' components: level, msg and caller (file:line) become
// the entry's, the other fields but ts follow the message.
func parseZapJSON(line string) (LogEntry, bool) {
	if !strings.HasPrefix(line, `{"level":"`) {
		return LogEntry{}, false
	}
	var fields map[string]any
	if err := json.Unmarshal([]byte(line), &fields); err != nil {
		return LogEntry{}, false
	}
	level, _ := fields["level"].(string)
	msg, _ := fields["msg"].(string)
	e := LogEntry{Severity: levelSeverity(level), Message: msg}
	if caller, ok := fields["caller"].(string); ok {
		file, ln, _ := strings.Cut(caller, ":")
		if n, err := strconv.Atoi(ln); err == nil {
			e.File, e.Line = path.Base(file), n
		}
	}
	var rest []string
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		switch k {
		case "level", "msg", "caller", "ts":
			continue
		}
		v, err := json.Marshal(fields[k])
		if err != nil {
			continue
		}
		rest = append(rest, k+"="+string(v))
	}
	if len(rest) > 0 {
		e.Message += " " + strings.Join(rest, " ")
	}
	return e, true
}

// levelSeverity maps logrus' and zap's level names.
func levelSeverity(level string) Severity {
	switch level {
	case "warning", "warn":
		return WARNING
	case "error":
		return ERROR
	case "fatal", "panic", "dpanic":
		return FATAL
	}
	return INFO
}

func klogSeverity(c byte) Severity {
	switch c {
	case 'W':
		return WARNING
	case 'E':
		return ERROR
	case 'F':
		return FATAL
	}
	return INFO
}

// parseLogfmt reads a logrus text line: key=value pairs, values quoted in
// Go syntax when they hold spaces, with at least level and msg. The other
// pairs but time are appended to the message.
func parseLogfmt(line string) (LogEntry, bool) {
	if !strings.HasPrefix(line, "time=") {
		return LogEntry{}, false
	}
	var level, msg string
	var rest []string
	s := line
	for s != "" {
		s = strings.TrimLeft(s, " ")
		key, after, ok := strings.Cut(s, "=")
		if !ok || key == "" || strings.ContainsAny(key, " \"") {
			return LogEntry{}, false
		}
		var val string
		if strings.HasPrefix(after, `"`) {
			q, err := strconv.QuotedPrefix(after)
			if err != nil {
				return LogEntry{}, false
			}
			val, _ = strconv.Unquote(q)
			s = after[len(q):]
		} else {
			end := strings.IndexByte(after, ' ')
			if end < 0 {
				end = len(after)
			}
			val, s = after[:end], after[end:]
		}
		switch key {
		case "time":
		case "level":
			level = val
		case "msg":
			msg = val
		default:
			rest = append(rest, key+"="+strconv.Quote(val))
		}
	}
	if level == "" {
		return LogEntry{}, false
	}
	sev := levelSeverity(level)
	if len(rest) > 0 {
		msg += " " + strings.Join(rest, " ")
	}
	return LogEntry{Severity: sev, File: "", Message: msg}, true
}
