// Package marker defines the facts a node states on its console for
// machines to read: tests, the cluster harness and boot benchmarks wait on
// markers, never on the wording of log lines, which people may change.
//
// A marker is one INFO log entry whose message is
//
//	@cairn-mark <name> key=value key="value with spaces" ...
//
// so it reaches the console, the log tree's backlog and `cairnctl logs`
// like any other entry, under the DN of whoever stated it. Every name is
// declared here, with the keys it carries; Log and Parse are the only
// writer and reader of the format.
package marker

import (
	"strconv"
	"strings"

	"cairn.dev/cairn/pkg/logtree"
)

// Name says which fact a marker states.
type Name string

// The markers a node states. Keys are named after each.
const (
	// Bootstrapping: enrolment starts a new cluster.
	Bootstrapping Name = "bootstrapping"
	// Bootstrapped: the new cluster's state is written; node=ID.
	Bootstrapped Name = "bootstrapped"
	// Registering: enrolment registers with a ticket; node=ID.
	Registering Name = "registering"
	// WaitingForApproval: registered, waiting in NEW; node=ID.
	WaitingForApproval Name = "waiting-for-approval"
	// Committed: approved and committed; node=ID.
	Committed Name = "committed"
	// Joined: a sealed configuration brought the node back; node=ID,
	// via=curator|cold-start.
	Joined Name = "joined"
	// Refused: the cluster refused the node; reason=text.
	Refused Name = "refused"
	// Decommissioned: the cluster decommissioned the node, before it
	// committed or while it ran, and the node stops asking (and gives up
	// its roles); node=ID.
	Decommissioned Name = "decommissioned"
	// ParametersInvalid: the node parameters do not parse or validate;
	// reason=text.
	ParametersInvalid Name = "parameters-invalid"
	// WaitingForParameters: the node found no parameters at boot and
	// belongs to no cluster; it looks for a parameters disk.
	WaitingForParameters Name = "waiting-for-parameters"
	// ParametersFound: node parameters were found on a disk;
	// source=device.
	ParametersFound Name = "parameters-found"
	// ConfigurationSealed: the sealed configuration is on the ESP;
	// tpm=true|false.
	ConfigurationSealed Name = "configuration-sealed"
	// EtcdStarting: the node's etcd starts a new cluster from an empty
	// data directory (the first node's bootstrap).
	EtcdStarting Name = "etcd-starting"
	// EtcdRestoring: the node's etcd restores a backup handed to it
	// (NodeManagement.Recover) as a new cluster of this one member.
	EtcdRestoring Name = "etcd-restoring"
	// EtcdRunning: the node's etcd member serves; learner=true|false.
	EtcdRunning Name = "etcd-running"
	// ConsensusRunning: the node's etcd member runs; voting=true|false.
	ConsensusRunning Name = "consensus-running"
	// ConsensusStopped: the node's etcd member was removed and the role
	// is gone.
	ConsensusStopped Name = "consensus-stopped"
	// CuratorServing: the node's curator serves; addr=IP:port.
	CuratorServing Name = "curator-serving"
	// CuratorLeading: the node's curator leads the cluster.
	CuratorLeading Name = "curator-leading"
	// Roles: the roles the node runs now; roles=comma-separated names.
	Roles Name = "roles"
	// TestPointReached: a test image stopped at the step its kernel
	// command line named (node/testpoint), and stays there until the
	// test kills the machine; name=step. Never stated by a production
	// build.
	TestPointReached Name = "test-point-reached"
)

// lead starts every marker message.
const lead = "@cairn-mark "

// Marker is one parsed marker.
type Marker struct {
	Name Name
	// Fields are the marker's key=value pairs.
	Fields map[string]string
}

// Get returns the value of key, or "".
func (m Marker) Get(key string) string { return m.Fields[key] }

// Is reports whether m is a marker of name whose fields hold kv, taken as
// key, value pairs: each key present with exactly that value. Fields kv
// leaves out may hold anything.
func (m Marker) Is(name Name, kv ...string) bool {
	if m.Name != name {
		return false
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if v, ok := m.Fields[kv[i]]; !ok || v != kv[i+1] {
			return false
		}
	}
	return true
}

// Format returns the log message of a marker: name, then kv taken as
// key, value pairs (a lone last key gets an empty value).
func Format(name Name, kv ...string) string {
	var b strings.Builder
	b.WriteString(lead)
	b.WriteString(string(name))
	for i := 0; i < len(kv); i += 2 {
		v := ""
		if i+1 < len(kv) {
			v = kv[i+1]
		}
		b.WriteByte(' ')
		b.WriteString(kv[i])
		b.WriteByte('=')
		if v == "" || strings.ContainsAny(v, " \t\"=\\\n") || !strconv.CanBackquote(v) {
			v = strconv.Quote(v)
		}
		b.WriteString(v)
	}
	return b.String()
}

// Log states a marker through l, at INFO.
func Log(l logtree.LeveledLogger, name Name, kv ...string) {
	l.Info(Format(name, kv...))
}

// Parse finds a marker in a line: a console line, a log entry's text or
// its bare message. It reports false for a line that holds none, or one
// whose fields do not parse.
func Parse(line string) (Marker, bool) {
	i := strings.Index(line, lead)
	if i < 0 {
		return Marker{}, false
	}
	rest := strings.TrimRight(line[i+len(lead):], "\r\n")
	name, rest, _ := strings.Cut(rest, " ")
	if !isToken(name) {
		return Marker{}, false
	}
	m := Marker{Name: Name(name), Fields: map[string]string{}}
	for rest = strings.TrimLeft(rest, " "); rest != ""; rest = strings.TrimLeft(rest, " ") {
		key, after, ok := strings.Cut(rest, "=")
		if !ok || !isToken(key) {
			return Marker{}, false
		}
		var value string
		if strings.HasPrefix(after, `"`) {
			q, err := strconv.QuotedPrefix(after)
			if err != nil {
				return Marker{}, false
			}
			if value, err = strconv.Unquote(q); err != nil {
				return Marker{}, false
			}
			rest = after[len(q):]
		} else {
			value, rest, _ = strings.Cut(after, " ")
		}
		m.Fields[key] = value
	}
	return m, true
}

// isToken reports whether s may be a marker's name or key: lowercase
// letters, digits and dashes.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}
