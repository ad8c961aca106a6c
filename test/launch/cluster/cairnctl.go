package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"time"
)

// Cairnctl runs cairnctl as the owner against the cluster, through the
// curator of the first running node (then the others), and returns its standard output. The
// error carries its standard error.
func (c *Cluster) Cairnctl(ctx context.Context, args ...string) ([]byte, error) {
	via := 0
	for _, n := range c.Nodes() {
		if n.Running() {
			via = n.index
			break
		}
	}
	return c.CairnctlVia(ctx, via, args...)
}

// CairnctlVia is Cairnctl through the curator of node i first.
func (c *Cluster) CairnctlVia(ctx context.Context, i int, args ...string) ([]byte, error) {
	return c.run(ctx, append(c.globalFlags(i), args...))
}

// globalFlags are the flags that point cairnctl at the cluster: every
// node's curator forward as an endpoint, node i's first (cairnctl tries
// them in turn), and every known node's management forward.
func (c *Cluster) globalFlags(i int) []string {
	flags := []string{"--config", c.configDir, "--endpoint", c.nodes[i].curatorAddr}
	for _, n := range c.Nodes() {
		if n.index != i {
			flags = append(flags, "--endpoint", n.curatorAddr)
		}
	}
	for _, n := range c.nodes {
		if id := n.ID(); id != "" {
			flags = append(flags, "--node-endpoint", id+"="+n.managementAddr)
		}
	}
	return flags
}

// run runs cairnctl with args.
func (c *Cluster) run(ctx context.Context, args []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.cfg.Cairnctl, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("cairnctl %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

// CommandLine returns the shell command line that runs cairnctl with args
// against the cluster, for people to copy. It relies on the endpoints
// that takeownership and StoreNodeEndpoints keep in the config directory.
func (c *Cluster) CommandLine(args ...string) string {
	return shellLine(append([]string{c.cfg.Cairnctl, "--config", c.configDir}, args...))
}

// FullCommandLine is CommandLine with every endpoint flag spelt out, for
// when the config directory does not hold the node endpoints.
func (c *Cluster) FullCommandLine(args ...string) string {
	return shellLine(append(append([]string{c.cfg.Cairnctl}, c.globalFlags(0)...), args...))
}

// StoreNodeEndpoints stores every node's curator forward as cairnctl's
// endpoints (cairnctl config set-endpoints) and the management forward of
// every node whose ID is known (cairnctl config set-node-endpoint), so
// that command lines without endpoint flags reach the nodes.
func (c *Cluster) StoreNodeEndpoints(ctx context.Context) error {
	config := []string{"--config", c.configDir, "config"}
	endpoints := append(config, "set-endpoints")
	nodeEndpoints := append(append([]string(nil), config...), "set-node-endpoint")
	for _, n := range c.Nodes() {
		endpoints = append(endpoints, n.curatorAddr)
	}
	for _, n := range c.nodes {
		if id := n.ID(); id != "" {
			nodeEndpoints = append(nodeEndpoints, id+"="+n.managementAddr)
		}
	}
	if _, err := c.run(ctx, endpoints); err != nil {
		return err
	}
	if len(nodeEndpoints) == len(config)+1 {
		// No node named itself yet.
		return nil
	}
	_, err := c.run(ctx, nodeEndpoints)
	return err
}

// CairnctlStored runs cairnctl against the cluster with nothing but the
// cluster's configuration directory: through the endpoints that
// takeownership and StoreNodeEndpoints keep there, as an operator's plain
// command line does.
func (c *Cluster) CairnctlStored(ctx context.Context, args ...string) ([]byte, error) {
	return c.run(ctx, append([]string{"--config", c.configDir}, args...))
}

// StoreContext adds the context Config.Context to the user's own cairnctl
// configuration directory, a copy of the cluster's (owner key and
// certificate, CA, endpoints and node endpoints: call StoreNodeEndpoints
// first), replacing a context of that name, and selects it. It refuses
// when Config.Context is empty.
func (c *Cluster) StoreContext(ctx context.Context) error {
	if c.cfg.Context == "" {
		return errors.New("the cluster has no context name (Config.Context): it leaves the user's cairnctl configuration alone")
	}
	_, err := c.run(ctx, []string{"config", "add-context", c.cfg.Context, "--from", c.configDir, "--use"})
	return err
}

// ContextCommandLine returns the shell command line that runs cairnctl
// with args through the context StoreContext selected: no flags at all.
func (c *Cluster) ContextCommandLine(args ...string) string {
	return shellLine(append([]string{c.cfg.Cairnctl}, args...))
}

// ShellLine quotes every word of a command line for a POSIX shell and
// joins them, for people to copy.
func ShellLine(words ...string) string { return shellLine(words) }

// shellLine quotes every word of a command line for a POSIX shell and
// joins them.
func shellLine(words []string) string {
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = shellQuote(w)
	}
	return strings.Join(quoted, " ")
}

// shellQuote quotes s for a POSIX shell where it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,@+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Retry calls f until it succeeds, ctx ends or timeout passes, waiting
// between attempts, and returns the number of attempts with the last
// error.
func Retry(ctx context.Context, timeout time.Duration, f func(ctx context.Context) error) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	wait := 500 * time.Millisecond
	for attempt := 1; ; attempt++ {
		// Each attempt gets a bounded share, so a hung call cannot
		// take the whole timeout.
		actx, acancel := context.WithTimeout(ctx, time.Minute)
		err := f(actx)
		acancel()
		if err == nil {
			return attempt, nil
		}
		select {
		case <-ctx.Done():
			return attempt, fmt.Errorf("after %d attempts: %w", attempt, err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// NodeInfo is one node as `cairnctl node list -o json` shows it.
type NodeInfo struct {
	// ID is the node's ID.
	ID string
	// State is the node's state without its enum prefix: NEW, STANDBY,
	// UP or DECOMMISSIONED.
	State string
	// Roles are the roles the node holds, as cairnctl names them:
	// ConsensusMember, KubernetesController, KubernetesWorker.
	Roles []string
	// Health is the leader's judgement of an UP node without its enum
	// prefix: HEALTHY, HEARTBEAT_TIMEOUT or UNKNOWN; "" when not judged.
	Health string
	// Raw is the node's JSON object as cairnctl printed it.
	Raw map[string]any
}

// HasRole reports whether the node holds role.
func (n NodeInfo) HasRole(role string) bool {
	for _, r := range n.Roles {
		if r == role {
			return true
		}
	}
	return false
}

// ListNodes runs `cairnctl node list -o json` and returns the nodes.
func (c *Cluster) ListNodes(ctx context.Context) ([]NodeInfo, error) {
	out, err := c.Cairnctl(ctx, "node", "list", "-o", "json")
	if err != nil {
		return nil, err
	}
	return ParseNodeList(out)
}

// ParseNodeList reads the JSON of `cairnctl node list -o json`: every
// object in it with an "id" that is a node ID is a node, whatever it is
// nested in, with its "state" and "roles". Roles are read from an object
// with one key per held role or from a list of role names.
func ParseNodeList(out []byte) ([]NodeInfo, error) {
	var doc any
	if err := json.Unmarshal(out, &doc); err != nil {
		return nil, fmt.Errorf("node list is not JSON: %w: %q", err, out)
	}
	var nodes []NodeInfo
	walkJSON(doc, func(obj map[string]any) bool {
		id, _ := obj["id"].(string)
		if !strings.HasPrefix(id, "cairn-") {
			return false
		}
		state, _ := obj["state"].(string)
		state = strings.TrimPrefix(strings.ToUpper(state), "NODE_STATE_")
		health, _ := obj["health"].(string)
		health = strings.TrimPrefix(strings.ToUpper(health), "NODE_HEALTH_")
		nodes = append(nodes, NodeInfo{ID: id, State: state, Roles: parseRoles(obj["roles"]), Health: health, Raw: obj})
		return true
	})
	if nodes == nil && !bytes.Contains(out, []byte("[]")) {
		return nil, fmt.Errorf("no nodes in node list: %q", out)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].ID < nodes[j].ID })
	return nodes, nil
}

// walkJSON calls f on every object in v, not descending into objects f
// accepts.
func walkJSON(v any, f func(map[string]any) bool) {
	switch v := v.(type) {
	case map[string]any:
		if f(v) {
			return
		}
		for _, e := range v {
			walkJSON(e, f)
		}
	case []any:
		for _, e := range v {
			walkJSON(e, f)
		}
	}
}

// roleNames maps the spellings of roles in JSON to cairnctl's names.
var roleNames = map[string]string{
	"consensusmember":      "ConsensusMember",
	"kubernetescontroller": "KubernetesController",
	"kubernetesworker":     "KubernetesWorker",
}

func parseRoles(v any) []string {
	var names []string
	add := func(s string) {
		key := strings.ToLower(strings.NewReplacer("_", "", "-", "", " ", "").Replace(s))
		if name, ok := roleNames[key]; ok {
			names = append(names, name)
		}
	}
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if e != nil && e != false {
				add(k)
			}
		}
	case []any:
		for _, e := range v {
			if s, ok := e.(string); ok {
				add(s)
			}
		}
	case string:
		for _, s := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }) {
			add(s)
		}
	}
	sort.Strings(names)
	return names
}

// errNotYet is what a wait's condition returns while it does not hold.
var errNotYet = errors.New("not yet")
