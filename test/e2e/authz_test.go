//go:build e2e

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/test/launch/cluster"
)

// outcome is how a call ended, as far as authorization goes.
type outcome string

const (
	// admitted: the call's handler ran: with the matrix's valid request
	// it succeeded, or gave one of the answers that only the handler
	// gives (handlerAnswers).
	admitted outcome = "admitted"
	// failed: an error that is neither an authorization refusal nor a
	// handler's answer to the valid request.
	failed outcome = "failed"
	// unauthenticated: the interceptor wanted a certificate of the
	// cluster CA and saw none.
	unauthenticated outcome = "Unauthenticated"
	// denied: the interceptor saw a certificate of the cluster CA of the
	// wrong kind.
	denied outcome = "PermissionDenied"
	// refused: the TLS handshake refused the client's certificate.
	refused outcome = "handshake refused"
	// revoked: a curator saw the certificate of a node the cluster no
	// longer honours (decommissioned or deleted).
	revoked outcome = "revoked"
)

// matrixCaller is one column of the matrix: a kind of client.
type matrixCaller struct {
	name  string
	creds credentials.TransportCredentials
	// kind is what the interceptor sees; refused callers never get there.
	kind identity.PeerKind
	// foreign callers are refused at the handshake.
	foreign bool
	// revoked callers hold the node certificate of a decommissioned node.
	revoked bool
}

// expected returns what a caller of kind c may expect from a method of
// class a.
func expected(m rpc.Method, c matrixCaller) outcome {
	a := m.Authz
	if c.foreign {
		return refused
	}
	// A curator refuses a revoked node's certificate whatever the
	// method, once the interceptor has let it through.
	curator := !strings.HasPrefix(m.Name, "/cairn.api.NodeManagement/")
	if c.revoked && curator && a != api.Authorization_AUTHORIZATION_OWNER {
		return revoked
	}
	var want identity.PeerKind
	switch a {
	case api.Authorization_AUTHORIZATION_UNAUTHENTICATED_WITH_TICKET,
		api.Authorization_AUTHORIZATION_UNAUTHENTICATED_PROOF:
		return admitted
	case api.Authorization_AUTHORIZATION_OWNER:
		want = identity.PeerOwner
	case api.Authorization_AUTHORIZATION_NODE:
		want = identity.PeerNode
	default:
		return denied
	}
	switch c.kind {
	case want:
		return admitted
	case identity.PeerAnonymous, identity.PeerSelfSigned:
		return unauthenticated
	}
	return denied
}

// handlerAnswers are the refusals that come from a method's handler, not
// from authorization, when a caller that authorization let through sends
// the matrix's valid request: the proof that the handler ran.
var handlerAnswers = map[string][]struct {
	code codes.Code
	text string
}{
	// Callers without a self-signed certificate; the self-signed stranger
	// is not registered yet when CommitNode and JoinNode come up.
	"/cairn.api.Curator/CommitNode":   {{codes.Unauthenticated, "needs a self-signed certificate"}, {codes.NotFound, "no node"}},
	"/cairn.api.Curator/JoinNode":     {{codes.Unauthenticated, "needs a self-signed certificate"}, {codes.NotFound, "no node"}},
	"/cairn.api.Curator/RegisterNode": {{codes.Unauthenticated, "needs a self-signed certificate"}},
	// The node column is a worker, which may not join etcd.
	"/cairn.api.Curator/JoinConsensus": {{codes.FailedPrecondition, "does not hold the ConsensusMember role"}},
	// The suites' nodes have never installed a release: no slot to go
	// back to; booted without firmware, no boot entries to set.
	// The matrix starts no rollout (deferredCells): none runs to abort,
	// and no release is recorded bad.
	"/cairn.api.Management/AbortRollout":    {{codes.FailedPrecondition, "no rollout runs"}},
	"/cairn.api.Management/ClearBadRelease": {{codes.NotFound, "is not recorded bad"}},
	"/cairn.api.NodeManagement/Rollback":    {{codes.FailedPrecondition, "is not a good one"}, {codes.FailedPrecondition, "cannot set the firmware's boot entries"}, {codes.Unimplemented, "cannot switch system slots"}},
	// Nor may it sign service account tokens.
	"/cairn.api.Curator/GetKubernetesServiceAccountKey": {{codes.PermissionDenied, "does not hold the KubernetesController role"}},
	// The matrix's clusters run no Kubernetes: no Node, so no pod range
	// to publish, once the owner's UpdateNodeRoles made the node a
	// worker.
	"/cairn.api.Curator/SetPodNetwork": {{codes.PermissionDenied, "does not hold the KubernetesWorker role"}, {codes.FailedPrecondition, "has no Node object"}},
}

// classify reads a call's error as an outcome. The interceptor's refusals
// say what the method requires and what the caller presented; a handler's
// answers are listed in handlerAnswers.
func classify(m rpc.Method, err error) outcome {
	if err == nil {
		return admitted
	}
	st := status.Convert(err)
	interceptor := strings.Contains(st.Message(), "the caller presented") ||
		strings.Contains(st.Message(), "declares no authorization") ||
		strings.Contains(st.Message(), "did not come over TLS")
	switch {
	case st.Code() == codes.Unavailable:
		return refused
	case st.Code() == codes.PermissionDenied && strings.Contains(st.Message(), "no longer honoured"):
		return revoked
	case st.Code() == codes.Unauthenticated && interceptor:
		return unauthenticated
	case st.Code() == codes.PermissionDenied && interceptor:
		return denied
	}
	for _, a := range handlerAnswers[m.Name] {
		if st.Code() == a.code && strings.Contains(st.Message(), a.text) {
			return admitted
		}
	}
	return failed
}

// matrixTargets are what the matrix's valid requests name.
type matrixTargets struct {
	// worker is the node column: an UP node without ConsensusMember.
	worker *fakeNode
	// victim is an UP node that the owner's calls decommission and delete.
	victim *fakeNode
	// stranger is the self-signed column's key; its RegisterNode call
	// registers it, and the owner's ApproveNode approves it.
	stranger ed25519.PrivateKey
	// ticket is the cluster's register ticket when the matrix starts.
	ticket []byte
	// owner is the owner's public key, for Escrow's hello.
	owner ed25519.PublicKey
}

// validRequest is a request of method m that its handler accepts from a
// caller that authorization lets through, naming tg's nodes. Methods not
// listed get an empty request: a new method whose empty request is invalid
// shows up as failed until it is listed here.
func validRequest(t *testing.T, m rpc.Method, tg *matrixTargets) proto.Message {
	stranger := identity.NodeID(tg.stranger.Public().(ed25519.PublicKey))
	worker := true
	switch m.Name {
	case "/cairn.api.AAA/Escrow":
		return &api.EscrowFromClient{Step: &api.EscrowFromClient_Hello_{Hello: &api.EscrowFromClient_Hello{OwnerPublicKey: tg.owner}}}
	case "/cairn.api.Curator/Watch":
		return &api.WatchRequest{Kind: &api.WatchRequest_NodeInCluster_{NodeInCluster: &api.WatchRequest_NodeInCluster{NodeId: tg.worker.id}}}
	case "/cairn.api.Curator/UpdateNodeStatus":
		return &api.UpdateNodeStatusRequest{NodeId: tg.worker.id, Status: &api.NodeStatus{ExternalAddress: "10.0.2.99", Version: "matrix", TimestampUnixNanos: time.Now().UnixNano()}}
	case "/cairn.api.NodeManagement/GetProfile":
		return &api.GetProfileRequest{Kind: api.ProfileKind_PROFILE_KIND_HEAP}
	case "/cairn.api.Curator/IssueCertificate":
		return &api.IssueCertificateRequest{Kind: api.CertificateKind_CERTIFICATE_KIND_NODE}
	case "/cairn.api.Curator/JoinConsensus":
		return &api.JoinConsensusRequest{PeerAddress: "10.0.2.99"}
	case "/cairn.api.Curator/SetPodNetwork":
		return &api.SetPodNetworkRequest{PodNetwork: &api.PodNetwork{WireguardPublicKey: make([]byte, 32), PodRange: "10.192.9.0/24"}}
	case "/cairn.api.Curator/RegisterNode":
		return &api.RegisterNodeRequest{RegisterTicket: tg.ticket, JoinKey: tg.stranger.Public().(ed25519.PublicKey)}
	case "/cairn.api.Curator/JoinNode":
		return &api.JoinNodeRequest{NodeId: stranger}
	case "/cairn.api.Management/RotateRegisterTicket":
		return &api.RotateRegisterTicketRequest{PreviousTicket: tg.ticket}
	case "/cairn.api.Management/ApproveNode":
		return &api.ApproveNodeRequest{NodeId: stranger}
	case "/cairn.api.Management/UpdateNodeRoles":
		return &api.UpdateNodeRolesRequest{NodeId: tg.worker.id, KubernetesWorker: &worker}
	case "/cairn.api.Management/DecommissionNode":
		return &api.DecommissionNodeRequest{NodeId: tg.victim.id}
	case "/cairn.api.Management/DeleteNode":
		return &api.DeleteNodeRequest{NodeId: tg.victim.id}
	case "/cairn.api.NodeManagement/Logs":
		return &api.LogsRequest{Backlog: 1}
	case "/cairn.api.Management/IssueKubernetesCredential":
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
		if err != nil {
			t.Fatal(err)
		}
		return &api.IssueKubernetesCredentialRequest{PublicKey: pub}
	case "/cairn.api.Management/IssueMetricsCertificate":
		pub, _, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return &api.IssueMetricsCertificateRequest{PublicKey: pub, Name: "authz-matrix", LifetimeSeconds: 60}
	}
	in, _ := messages(t, m.Name)
	return in
}

// deferredCells are the calls the matrix does not make, because with the
// right certificate they stop the node the suite runs on, or change what
// the suite relies on: the suite makes them itself at its end of life,
// where it checks their effect, or another test makes them.
var deferredCells = map[string]string{
	"/cairn.api.NodeManagement/Reboot|owner":             "made by cairnctl node reboot in the reboot subtest",
	"/cairn.api.NodeManagement/Poweroff|owner":           "made with the owner certificate at the end of the suite",
	"/cairn.api.NodeManagement/Recover|owner":            "not made: it rebuilds the cluster from a backup; node/curator's TestRecovery and node/nodemanagement's TestRecover cover it",
	"/cairn.api.NodeManagement/Update|owner":             "not made: a valid request installs a release into the node's other system slot; TestUpdateStaged makes it as the owner through cairnctl, node/nodemanagement's TestUpdate through the API",
	"/cairn.api.Management/StartRollout|owner":           "not made: a valid request updates the cluster's nodes to a release; node/curator's TestRollout makes it against a real curator, TestUpdateRollout through cairnctl",
	"/cairn.api.Management/RotateOwnerKey|owner":         "not made: a valid request replaces the owner key the suite holds; node/curator's TestOwnerKeyRotation and cmd/cairnctl's tests make it against real curators",
	"/cairn.api.Management/RevokeOwnerCertificate|owner": "not made: the suite's owner holds one certificate, and revoking it would lock the suite out; node/curator's TestOwnerCertificateRevocation makes it",
}

// runAuthzMatrix calls every RPC of rpc.ListMethods on the node n with
// every kind of client and checks each outcome against the method's
// declared class. Requests are valid (validRequest), so that a call
// counts as admitted only when its handler ran: the owner's calls
// decommission and delete a victim node made for the purpose, and approve
// the self-signed caller's registration, which is removed at the end.
// worker is the node column, an UP node; extra callers add columns.
func runAuthzMatrix(ctx context.Context, t *testing.T, n *cluster.Node, o *owner, worker *fakeNode, extra ...matrixCaller) {
	mgmt := api.NewManagementClient(dial(t, n.CuratorAddr(), o.creds(t)))
	victim := newFakeNode(t)
	enrolFakeNodes(ctx, t, n.CuratorAddr(), o, victim)
	ticket, err := mgmt.GetRegisterTicket(ctx, &api.GetRegisterTicketRequest{})
	if err != nil {
		t.Fatalf("GetRegisterTicket: %v", err)
	}
	_, stranger, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tg := &matrixTargets{worker: worker, victim: victim, stranger: stranger, ticket: ticket.GetTicket(), owner: o.key.Public().(ed25519.PublicKey)}
	callers := append(matrixCallers(t, o, worker.node, stranger), extra...)
	defer func() {
		// The stranger registered and was approved: it leaves.
		id := identity.NodeID(stranger.Public().(ed25519.PublicKey))
		if _, err := mgmt.DecommissionNode(ctx, &api.DecommissionNodeRequest{NodeId: id}); err != nil {
			t.Logf("DecommissionNode(%s) after the matrix: %v", id, err)
		}
		if _, err := mgmt.DeleteNode(ctx, &api.DeleteNodeRequest{NodeId: id}); err != nil {
			t.Logf("DeleteNode(%s) after the matrix: %v", id, err)
		}
	}()
	methods := rpc.ListMethods()
	if len(methods) == 0 {
		t.Fatal("rpc.ListMethods lists no RPC")
	}
	var table strings.Builder
	w := tabwriter.NewWriter(&table, 0, 0, 1, ' ', 0)
	fmt.Fprintf(w, "method\tclass")
	for _, c := range callers {
		fmt.Fprintf(w, "\t%s", c.name)
	}
	fmt.Fprintln(w)
	for _, m := range methods {
		addr := n.CuratorAddr()
		if strings.HasPrefix(m.Name, "/cairn.api.NodeManagement/") {
			addr = n.ManagementAddr()
		}
		class := strings.TrimPrefix(m.Authz.String(), "AUTHORIZATION_")
		fmt.Fprintf(w, "%s\t%s", m.Name, class)
		for _, c := range callers {
			if why, ok := deferredCells[m.Name+"|"+c.name]; ok {
				fmt.Fprintf(w, "\t(later)")
				t.Logf("%s as %s: %s", m.Name, c.name, why)
				continue
			}
			want := expected(m, c)
			err := call(ctx, t, addr, c.creds, m, validRequest(t, m, tg))
			got := classify(m, err)
			mark := "ok"
			if got != want {
				mark = "WRONG"
				t.Errorf("%s (%s) as %s: %s (%v), want %s", m.Name, class, c.name, got, err, want)
			}
			fmt.Fprintf(w, "\t%s %s", got, mark)
		}
		fmt.Fprintln(w)
	}
	w.Flush()
	t.Logf("authorization matrix against %s:\n%s", n.Name(), table.String())
}

// matrixCallers are the columns: no certificate, certificates of a
// foreign CA, a node certificate and the owner certificate of the
// cluster.
func matrixCallers(t *testing.T, o *owner, node *identity.Node, stranger ed25519.PrivateKey) []matrixCaller {
	t.Helper()
	none, err := rpc.EphemeralCredentials(o.caDER, nil)
	if err != nil {
		t.Fatal(err)
	}
	selfSigned, err := rpc.EphemeralCredentials(o.caDER, stranger)
	if err != nil {
		t.Fatal(err)
	}
	fca := newForeignCA(t)
	return []matrixCaller{
		{name: "none", creds: none, kind: identity.PeerAnonymous},
		{name: "self-signed", creds: selfSigned, kind: identity.PeerSelfSigned},
		{name: "foreign-node", creds: fca.creds(t, o.caDER, identity.NodeCertificateTemplate), foreign: true},
		{name: "foreign-owner", creds: fca.creds(t, o.caDER, func(ed25519.PublicKey) x509.Certificate {
			return identity.OwnerCertificateTemplate()
		}), foreign: true},
		{name: "node", creds: rpc.NodeCredentials(node), kind: identity.PeerNode},
		{name: "owner", creds: o.creds(t), kind: identity.PeerOwner},
	}
}

// call makes one call of m at addr with the request in. Streams count as
// admitted once the first message arrives or the server ends the stream
// cleanly; errors show on the first receive.
func call(ctx context.Context, t *testing.T, addr string, creds credentials.TransportCredentials, m rpc.Method, in proto.Message) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, out := messages(t, m.Name)
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if !m.ClientStream && !m.ServerStream {
		return cc.Invoke(ctx, m.Name, in, out)
	}
	desc := &grpc.StreamDesc{ClientStreams: m.ClientStream, ServerStreams: m.ServerStream}
	st, err := cc.NewStream(ctx, desc, m.Name)
	if err != nil {
		return err
	}
	// A failed send means the stream ended; RecvMsg returns why.
	_ = st.SendMsg(in)
	if !m.ClientStream {
		_ = st.CloseSend()
	}
	err = st.RecvMsg(out)
	if errors.Is(err, io.EOF) {
		// The handler ended the stream with status OK.
		return nil
	}
	return err
}

// messages returns empty request and response messages of method name,
// found in the protobuf registry.
func messages(t *testing.T, name string) (proto.Message, proto.Message) {
	t.Helper()
	full := protoreflect.FullName(strings.ReplaceAll(strings.TrimPrefix(name, "/"), "/", "."))
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(full)
	if err != nil {
		t.Fatalf("method %s: %v", name, err)
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		t.Fatalf("%s is not a method", full)
	}
	newMsg := func(d protoreflect.MessageDescriptor) proto.Message {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(d.FullName())
		if err != nil {
			t.Fatalf("message %s: %v", d.FullName(), err)
		}
		return mt.New().Interface()
	}
	return newMsg(md.Input()), newMsg(md.Output())
}

// foreignCA is a CA that has nothing to do with the cluster.
type foreignCA struct {
	key  ed25519.PrivateKey
	cert *x509.Certificate
}

func newForeignCA(t *testing.T) *foreignCA {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "foreign CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &foreignCA{key: key, cert: cert}
}

// creds returns client credentials that trust the cluster CA of
// clusterCA (so that the client itself accepts the node) but present a
// certificate of the foreign CA made from template.
func (f *foreignCA) creds(t *testing.T, clusterCA []byte, template func(ed25519.PublicKey) x509.Certificate) credentials.TransportCredentials {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := template(pub)
	tmpl.SerialNumber = big.NewInt(2)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, f.cert, pub, f.key)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := identity.EphemeralClientTLSConfig(clusterCA, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Certificates = []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}
	return credentials.NewTLS(cfg)
}
