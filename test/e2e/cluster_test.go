//go:build e2e

package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/node/rpc/rpctest"
	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/test/launch"
	"cairn.dev/cairn/test/launch/cluster"
)

// newCluster makes a cluster of nodes (and spare network slots) for the
// suite, booting nothing yet; opts are added to every node's launch (a
// CPU model). Its consoles go to
// out/e2e/<test>_node<i>.boot<k>.console.log, its progress to the test
// log; it is closed when the suite ends, with the tail of every console
// logged if the suite failed.
func (s *suite) newCluster(nodes, spare int, opts ...launch.Option) *cluster.Cluster {
	s.t.Helper()
	return s.startCluster(s.clusterConfig(nodes, spare, opts...))
}

// clusterConfig is the configuration of newCluster's clusters.
func (s *suite) clusterConfig(nodes, spare int, opts ...launch.Option) cluster.Config {
	s.t.Helper()
	logDir := filepath.Join(repoRoot(s.t), "out", "e2e")
	return cluster.Config{
		Nodes:         nodes,
		Spare:         spare,
		Image:         artifact(s.t, "cairn.img"),
		Cairnctl:      cairnctlPath(s.t),
		Dir:           s.t.TempDir(),
		ConsoleDir:    logDir,
		ConsolePrefix: strings.ReplaceAll(s.t.Name(), "/", "_") + "_",
		MemoryMiB:     *memoryFlag,
		TPM:           true,
		Logf:          s.t.Logf,
		LaunchOptions: opts,
	}
}

// startCluster makes the cluster of cfg, closed when the test ends.
func (s *suite) startCluster(cfg cluster.Config) *cluster.Cluster {
	s.t.Helper()
	nodes := cfg.Nodes + cfg.Spare
	c, err := cluster.New(cfg)
	if err != nil {
		s.t.Fatalf("making the cluster: %v", err)
	}
	s.t.Cleanup(func() {
		if s.t.Failed() {
			for i := 0; i < nodes; i++ {
				if vm := c.Node(i).VM(); vm != nil {
					s.consoleOnFailure(c.Node(i).Name(), vm)
				}
			}
		}
		if err := c.Close(); err != nil {
			s.t.Errorf("closing the cluster: %v", err)
		}
	})
	return c
}

// cairnctl runs cairnctl against the cluster, failing the test on error.
func (s *suite) cairnctl(t *testing.T, c *cluster.Cluster, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Minute)
	defer cancel()
	out, err := c.Cairnctl(ctx, args...)
	if err != nil {
		s.fatalf(t, "%v", err)
	}
	return string(out)
}

// waitNode waits for a line of n's current boot from index from, failing
// t at the suite's deadline or when qemu exits first.
func (s *suite) waitNode(t *testing.T, n *cluster.Node, from int, m launch.Matcher) launch.Line {
	t.Helper()
	return s.waitNodeCtx(s.ctx, t, n, from, m)
}

// waitNodeCtx is waitNode until ctx ends, quoting the node's last console
// line when it fails.
func (s *suite) waitNodeCtx(ctx context.Context, t *testing.T, n *cluster.Node, from int, m launch.Matcher) launch.Line {
	t.Helper()
	l, err := n.WaitFor(ctx, from, m)
	if err != nil {
		last := "none"
		if vm := n.VM(); vm != nil {
			if lines := vm.Console().Lines(); len(lines) > 0 {
				last = clip(lines[len(lines)-1].Text, 200)
			}
		}
		s.fatalf(t, "%v (its last console line: %s)", err, last)
	}
	return l
}

// waitErrorEntry waits briefly for the ERROR entry that goes with the
// marker on line l (refused, parameters-invalid): a marker is an INFO
// entry, and a node that states a failure also logs it at ERROR, for
// people, with the marker's reason in the message.
func (s *suite) waitErrorEntry(t *testing.T, n *cluster.Node, l launch.Line) {
	t.Helper()
	m, _ := l.Marker()
	// A console line holds one line of a message.
	reason, _, _ := strings.Cut(m.Get("reason"), "\n")
	entry := regexp.MustCompile(`^\s*E\d{4} .*` + regexp.QuoteMeta(reason))
	if _, err := n.WaitFor(s.ctxWithin(30*time.Second), max(l.Index-10, 0), entry); err != nil {
		t.Errorf("no ERROR entry says %q, the reason of %q: %v", reason, cluster.Message(l.Text), err)
	}
}

// owner is the cluster owner as a Go client: the key cairnctl made and
// the certificate takeownership stored, read from cairnctl's config
// directory.
type owner struct {
	key     ed25519.PrivateKey
	certDER []byte
	caDER   []byte
}

// readOwner reads the owner's key and certificates from cairnctl's config
// directory (the files its documentation names).
func readOwner(t *testing.T, dir string) *owner {
	t.Helper()
	o := &owner{}
	keyDER := readPEM(t, filepath.Join(dir, "owner-key.pem"), "PRIVATE KEY")
	k, err := x509.ParsePKCS8PrivateKey(keyDER)
	if err != nil {
		t.Fatalf("owner key: %v", err)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		t.Fatalf("owner key is a %T, want ed25519", k)
	}
	o.key = key
	o.certDER = readPEM(t, filepath.Join(dir, "owner-certificate.pem"), "CERTIFICATE")
	o.caDER = readPEM(t, filepath.Join(dir, "ca-certificate.pem"), "CERTIFICATE")
	return o
}

// readPEM returns the first PEM block of the file, which must be of type
// typ.
func readPEM(t *testing.T, path, typ string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading cairnctl's config: %v", err)
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != typ {
		t.Fatalf("%s holds no PEM %s block", path, typ)
	}
	return b.Bytes
}

// creds returns the owner's TLS credentials.
func (o *owner) creds(t *testing.T) credentials.TransportCredentials {
	t.Helper()
	c, err := rpc.OwnerCredentials(o.key, o.certDER, o.caDER)
	if err != nil {
		t.Fatalf("OwnerCredentials: %v", err)
	}
	return c
}

// dial connects to addr with creds until the test ends.
var dial = rpctest.Dial

// fakeNode is a node that only the test plays: it registers with the
// ticket, is approved by the owner and commits like a real node, which
// gives the test a real node certificate of the cluster for a key it
// holds.
type fakeNode struct {
	key     ed25519.PrivateKey
	joinKey ed25519.PrivateKey
	id      string
	node    *identity.Node // after commit
}

func newFakeNode(t *testing.T) *fakeNode {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, join, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeNode{key: key, joinKey: join, id: identity.NodeID(key.Public().(ed25519.PublicKey))}
}

// register calls RegisterNode at addr with ticket, proving the node key
// through a self-signed certificate.
func (f *fakeNode) register(ctx context.Context, t *testing.T, addr string, caDER, ticket []byte) error {
	creds, err := rpc.EphemeralCredentials(caDER, f.key)
	if err != nil {
		t.Fatalf("EphemeralCredentials: %v", err)
	}
	cc := dial(t, addr, creds)
	_, err = api.NewCuratorClient(cc).RegisterNode(ctx, &api.RegisterNodeRequest{
		RegisterTicket: ticket,
		JoinKey:        f.joinKey.Public().(ed25519.PublicKey),
	})
	return err
}

// commit calls CommitNode at addr and keeps the node certificate it
// receives.
func (f *fakeNode) commit(ctx context.Context, t *testing.T, addr string, caDER []byte) error {
	creds, err := rpc.EphemeralCredentials(caDER, f.key)
	if err != nil {
		t.Fatalf("EphemeralCredentials: %v", err)
	}
	res, err := api.NewCuratorClient(dial(t, addr, creds)).CommitNode(ctx, &api.CommitNodeRequest{})
	if err != nil {
		return err
	}
	n, err := identity.NewNode(f.key, res.GetNodeCertificate(), res.GetCaCertificate())
	if err != nil {
		return fmt.Errorf("the committed node certificate: %w", err)
	}
	f.node = n
	return nil
}

// enrolFakeNodes registers the fake nodes at the same moment through the
// curator at addr, approves them as the owner and commits them, so that
// each holds a node certificate. It returns how long the concurrent
// registrations took.
func enrolFakeNodes(ctx context.Context, t *testing.T, addr string, o *owner, fakes ...*fakeNode) time.Duration {
	t.Helper()
	mgmt := api.NewManagementClient(dial(t, addr, o.creds(t)))
	ticket, err := mgmt.GetRegisterTicket(ctx, &api.GetRegisterTicketRequest{})
	if err != nil {
		t.Fatalf("GetRegisterTicket: %v", err)
	}
	var wg sync.WaitGroup
	gate := make(chan struct{})
	errs := make([]error, len(fakes))
	for i, f := range fakes {
		wg.Go(func() {
			<-gate
			errs[i] = f.register(ctx, t, addr, o.caDER, ticket.GetTicket())
		})
	}
	start := time.Now()
	close(gate)
	wg.Wait()
	took := time.Since(start)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("RegisterNode of fake node %d (%s), registering at the same moment as %d others: %v", i, fakes[i].id, len(fakes)-1, err)
		}
	}
	for _, f := range fakes {
		if err := f.approveAndCommit(ctx, t, mgmt, addr, o.caDER); err != nil {
			t.Fatal(err)
		}
	}
	return took
}

// approveAndCommit has the owner approve the registered f through m, then
// commits f at addr.
func (f *fakeNode) approveAndCommit(ctx context.Context, t *testing.T, m api.ManagementClient, addr string, caDER []byte) error {
	if _, err := m.ApproveNode(ctx, &api.ApproveNodeRequest{NodeId: f.id}); err != nil {
		return fmt.Errorf("ApproveNode(%s): %w", f.id, err)
	}
	if err := f.commit(ctx, t, addr, caDER); err != nil {
		return fmt.Errorf("CommitNode of %s: %w", f.id, err)
	}
	return nil
}
