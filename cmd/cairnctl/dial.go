package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/ports"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/proto/api"
)

// owner is what an owner call needs: the credentials from the
// configuration directory and where to dial.
type owner struct {
	dir      string
	settings *settings
	creds    credentials.TransportCredentials
	key      ed25519.PrivateKey
	certDER  []byte
	caDER    []byte
	// timing paces failover between the endpoints.
	timing timing
	// endpoints are the curators to dial, the preferred first.
	endpoints []string
}

// owner loads the owner's credentials and the endpoints to dial. Without
// an owner certificate it says to take ownership first. Commands use
// renewedOwner (owner.go), which renews the certificate first when due.
func (a *app) owner() (*owner, error) {
	o, err := a.loadOwner()
	if err != nil {
		return nil, err
	}
	if err := o.setCertificate(o.certDER); err != nil {
		return nil, err
	}
	return o, nil
}

// loadOwner reads what owner does, without building credentials: the
// certificate may not fit the key (see renewalDue).
func (a *app) loadOwner() (*owner, error) {
	dir, err := a.dir()
	if err != nil {
		return nil, err
	}
	key, err := readOwnerKey(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no owner key in %s: create one with `cairnctl params bootstrap`, then take ownership with `cairnctl --endpoint HOST:PORT takeownership`: %w", dir, err)
	}
	if err != nil {
		return nil, err
	}
	cert, err := readCertificate(dir, ownerCertFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no owner certificate in %s yet: run `cairnctl --endpoint HOST:PORT takeownership` first: %w", dir, err)
	}
	if err != nil {
		return nil, err
	}
	ca, err := readCertificate(dir, caCertFile)
	if err != nil {
		return nil, fmt.Errorf("owner certificate without CA in %s (run takeownership again): %w", dir, err)
	}
	s, err := readSettings(dir)
	if err != nil {
		return nil, err
	}
	o := &owner{dir: dir, settings: s, key: key, certDER: cert, caDER: ca, timing: a.timing(), endpoints: a.endpoints}
	if len(o.endpoints) == 0 {
		o.endpoints = s.Endpoints
	}
	if len(o.endpoints) == 0 {
		return nil, fmt.Errorf("no curator endpoint: give --endpoint HOST:PORT (none is stored in %s)", dir)
	}
	return o, nil
}

// setCertificate makes o dial with the owner certificate der.
func (o *owner) setCertificate(der []byte) error {
	creds, err := rpc.OwnerCredentials(o.key, der, o.caDER)
	if err != nil {
		return fmt.Errorf("with the credentials in %s: %w", o.dir, err)
	}
	o.creds, o.certDER = creds, der
	return nil
}

// curator runs f on a connection to a curator, failing over between the
// endpoints (see failover). what names the operation for errors ("listing
// nodes").
func (o *owner) curator(ctx context.Context, what string, f func(ctx context.Context, conn *grpc.ClientConn) error) error {
	_, err := failover(ctx, o.endpoints, o.creds, o.timing, what, f)
	return err
}

// explain wraps an error of a call to endpoint with what cairnctl was
// doing and what the gRPC status means for the operator.
func explain(what, endpoint string, err error) error {
	var hint string
	switch status.Code(err) {
	case codes.Unavailable:
		hint = "cannot reach " + endpoint
	case codes.DeadlineExceeded:
		hint = endpoint + " did not answer in time (see --timeout)"
	case codes.PermissionDenied:
		hint = endpoint + " refused the call (permission denied)"
	case codes.Unauthenticated:
		hint = endpoint + " did not accept our credentials (unauthenticated)"
	case codes.NotFound:
		hint = endpoint + " found no such object"
	case codes.FailedPrecondition:
		hint = endpoint + " refused in this state"
	case codes.InvalidArgument:
		hint = endpoint + " rejected the request as invalid"
	case codes.Unimplemented:
		hint = endpoint + " does not serve this call"
	default:
		hint = "call to " + endpoint + " failed"
	}
	return fmt.Errorf("when %s: %s: %w", what, hint, err)
}

// nodeEndpoint finds where to dial the management port of node id:
// --node-endpoint, then the stored node endpoints, then the address the
// node reports in its status. It also says what to check should another
// node answer there.
func (a *app) nodeEndpoint(ctx context.Context, o *owner, id string) (ep, check string, err error) {
	flags, err := parseNodeEndpoints(a.nodeEndpoints)
	if err != nil {
		return "", "", err
	}
	if ep, ok := flags[id]; ok {
		return ep, "check --node-endpoint", nil
	}
	if ep, ok := o.settings.NodeEndpoints[id]; ok {
		return ep, fmt.Sprintf("check the node endpoint stored in %s (cairnctl config set-node-endpoint)", o.dir), nil
	}
	n, err := a.getNode(ctx, o, id)
	if err != nil {
		return "", "", err
	}
	addr := n.GetStatus().GetExternalAddress()
	if addr == "" {
		return "", "", fmt.Errorf("node %s reports no address yet: give --node-endpoint %s=HOST:PORT", id, id)
	}
	return ports.Join(addr, ports.NodeManagement), fmt.Sprintf("node %s reports that address, but another node holds it now; give --node-endpoint %s=HOST:PORT", id, id), nil
}

// nodeManagement runs f on a connection to the management port of node
// id, which must answer with the node certificate of id: any other node
// is refused before a request leaves. lookup bounds finding the endpoint
// and connecting to it; f bounds its calls itself. A node that does not
// answer fails the command within the connect timeout. what names the
// operation for errors ("asking node ... to reboot").
func (a *app) nodeManagement(lookup context.Context, o *owner, id, what string, f func(c api.NodeManagementClient) error) error {
	ep, check, err := a.nodeEndpoint(lookup, o, id)
	if err != nil {
		return err
	}
	creds, err := rpc.NodeManagementCredentials(o.key, o.certDER, o.caDER, id)
	if err != nil {
		return fmt.Errorf("with the credentials in %s: %w", o.dir, err)
	}
	conn, err := dialReady(lookup, ep, creds, o.timing.connect)
	var wrong *rpc.WrongNodeError
	switch {
	case errors.As(err, &wrong):
		return fmt.Errorf("when %s: endpoint %s answered as %s, not %s: %s", what, ep, wrong.Got, wrong.Want, check)
	case err != nil:
		return fmt.Errorf("when %s: %w: is node %s down or frozen?", what, err, id)
	}
	defer conn.Close()
	if err := f(api.NewNodeManagementClient(conn)); err != nil {
		return explain(what, ep, err)
	}
	return nil
}
