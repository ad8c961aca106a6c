// Package rpctest holds what the tests of gRPC services share: a client
// connection that ends with the test.
//
// It imports nothing of node/rpc, so that node/rpc's own tests can use it
// too. Only tests import it.
package rpctest

import (
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Dial returns a client connection to addr (host:port, handed to the
// dialer as it is) with creds, closed when t ends. Connecting is lazy:
// errors show on the first call.
func Dial(t testing.TB, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatalf("grpc.NewClient(%q): %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
