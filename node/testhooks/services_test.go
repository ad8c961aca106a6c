//go:build cairntest

package testhooks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"cairn.dev/cairn/pkg/supervisor"
)

// TestHoldRunnable checks that the held port keeps a listener on one of the
// node's addresses out, as the curator's, and that a client is turned away
// at once rather than left waiting.
func TestHoldRunnable(t *testing.T) {
	free, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	port := free.Addr().(*net.TCPAddr).Port
	free.Close()

	held := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	supervisor.New(ctx, holdRunnable(port, func(f string, a ...any) { held <- fmt.Sprintf(f, a...) }), supervisor.WithPropagatePanic())
	select {
	case line := <-held:
		t.Logf("printed: %s", line)
	case <-time.After(10 * time.Second):
		t.Fatal("holdRunnable never said it holds the port")
	}

	if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
		ln.Close()
		t.Fatalf("a listener on 127.0.0.1:%d got the held port", port)
	}
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
	if err != nil {
		t.Fatalf("dialling the held port: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil || (err != io.EOF && !errors.Is(err, syscall.ECONNRESET)) {
		t.Errorf("reading from the held port = %d, %v; want the connection closed at once", n, err)
	}
}
