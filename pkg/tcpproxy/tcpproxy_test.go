package tcpproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// echoServer answers each connection with name and then echoes what it
// reads.
func echoServer(t *testing.T, name string) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = c.Write([]byte(name))
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return lis
}

// deadAddr returns an address where nothing listens.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// through dials the proxy at addr, and returns the backend's name and the
// echo of msg.
func through(t *testing.T, addr, msg string) (string, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	name := make([]byte, 1)
	if _, err := io.ReadFull(c, name); err != nil {
		t.Fatalf("reading the backend's name: %v", err)
	}
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	echo := make([]byte, len(msg))
	if _, err := io.ReadFull(c, echo); err != nil {
		t.Fatalf("reading the echo: %v", err)
	}
	return string(name), string(echo)
}

func TestServeFailsOverAndStops(t *testing.T) {
	a, b := echoServer(t, "a"), echoServer(t, "b")
	dead := deadAddr(t)
	var be Backends
	if !be.Set([]string{dead, a.Addr().String(), b.Addr().String()}) {
		t.Fatal("Set of new backends reported no change")
	}
	if be.Set([]string{dead, a.Addr().String(), b.Addr().String()}) {
		t.Fatal("Set of the same backends reported a change")
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, lis, &be) }()

	// The dead backend is skipped; a takes the connection.
	if name, echo := through(t, lis.Addr().String(), "hello"); name != "a" || echo != "hello" {
		t.Fatalf("got backend %q echo %q, want a and hello", name, echo)
	}
	// a goes away: b takes the next connection.
	a.Close()
	if name, _ := through(t, lis.Addr().String(), "x"); name != "b" {
		t.Fatalf("after a closed, got backend %q, want b", name)
	}
	// b answered last, so it is tried first.
	if got := be.order()[0]; got != b.Addr().String() {
		t.Fatalf("first backend to try = %s, want b at %s", got, b.Addr())
	}

	// An open forwarded connection ends with Serve.
	c, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-served; !errors.Is(err, context.Canceled) {
		t.Fatalf("Serve returned %v, want context.Canceled", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a forwarded connection still reads after Serve returned")
	}
}

func TestDialWithoutBackends(t *testing.T) {
	var be Backends
	if _, err := be.Dial(context.Background()); err == nil {
		t.Fatal("Dial with no backends succeeded")
	}
}
