package netns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"
)

// forwardDialTimeout bounds each connection into the namespace: a node
// that is not up yet refuses at once, one that does not exist times out.
const forwardDialTimeout = 5 * time.Second

// Forward listens on a free port of the host's 127.0.0.1 and forwards every
// connection to port on nodeIP inside the namespace. It returns the host
// address to dial ("127.0.0.1:port"). The forward runs until Close.
func (n *Network) Forward(nodeIP netip.Addr, port int) (string, error) {
	return n.ForwardFrom("127.0.0.1:0", nodeIP, port)
}

// ForwardFrom is Forward from a host address of the caller's choice, such as
// a fixed port on 127.0.0.1 for people. It refuses addresses that are not
// loopback: traffic into the network never comes from outside the host.
func (n *Network) ForwardFrom(hostAddr string, nodeIP netip.Addr, port int) (string, error) {
	if !Prefix.Contains(nodeIP) {
		return "", fmt.Errorf("forward to %s: not in %s", nodeIP, Prefix)
	}
	if port <= 0 || port > 65535 {
		return "", fmt.Errorf("forward to %s: bad port %d", nodeIP, port)
	}
	host, _, err := net.SplitHostPort(hostAddr)
	if err != nil {
		return "", fmt.Errorf("forward from %q: %w", hostAddr, err)
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
		return "", fmt.Errorf("forward from %q: not a loopback address", hostAddr)
	}
	target := netip.AddrPortFrom(nodeIP, uint16(port)).String()

	n.fwdMu.Lock()
	defer n.fwdMu.Unlock()
	if n.isClosing() {
		return "", fmt.Errorf("forward to %s: network closed", target)
	}
	// The listener is made here, in the host's namespace; only the dialing
	// side enters the network's.
	ln, err := net.Listen("tcp", hostAddr)
	if err != nil {
		return "", fmt.Errorf("when listening for forward to %s: %w", target, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &forwarder{
		net: n, ln: ln, target: target,
		ctx: ctx, cancel: cancel,
		conns: map[net.Conn]struct{}{},
	}
	n.forwarders = append(n.forwarders, f)
	f.wg.Go(f.accept)
	return ln.Addr().String(), nil
}

// isClosing reports whether Close has begun.
func (n *Network) isClosing() bool {
	n.logMu.RLock()
	defer n.logMu.RUnlock()
	return n.closing
}

// forwarder is one listening port on the host. Its goroutines, all in wg:
// accept, until the listener is closed; for each connection, one that
// dials and copies one way, and one that copies the other way, until both
// sides are done or close closes them.
type forwarder struct {
	net    *Network
	ln     net.Listener
	target string
	wg     sync.WaitGroup
	// ctx ends dials that are under way when close is called.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

func (f *forwarder) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				f.net.log("forward to %s: accept: %v", f.target, err)
			}
			return
		}
		if !f.track(c) {
			c.Close()
			return
		}
		f.wg.Go(func() { f.serve(c) })
	}
}

// track remembers c so that close can close it; it returns false once
// close has begun.
func (f *forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *forwarder) untrack(c net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.conns, c)
}

// serve dials the target from inside the namespace and copies both ways.
// Each direction passes its end of stream on as a half-close, so that
// request-then-response protocols finish cleanly.
func (f *forwarder) serve(client net.Conn) {
	defer f.untrack(client)
	defer client.Close()
	node, err := f.dial()
	if err != nil {
		f.net.log("forward from %s: %v", client.RemoteAddr(), err)
		return
	}
	if !f.track(node) {
		node.Close()
		return
	}
	defer f.untrack(node)
	defer node.Close()

	done := make(chan struct{})
	f.wg.Go(func() {
		defer close(done)
		pipe(node, client)
	})
	pipe(client, node)
	<-done
}

// dial connects to the target from a thread inside the namespace; the
// socket stays there for its whole life.
func (f *forwarder) dial() (net.Conn, error) {
	var c net.Conn
	err := f.net.Do(func() error {
		ctx, cancel := context.WithTimeout(f.ctx, forwardDialTimeout)
		defer cancel()
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, "tcp", f.target)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("when dialing %s in the network: %w", f.target, err)
	}
	return c, nil
}

// pipe copies src to dst, then half-closes dst for writing (or closes it
// where that is not possible).
func pipe(dst, src net.Conn) {
	io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		dst.Close()
	}
}

// close stops accepting, closes every connection and waits for all of the
// forwarder's goroutines.
func (f *forwarder) close() {
	f.cancel()
	f.ln.Close()
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
