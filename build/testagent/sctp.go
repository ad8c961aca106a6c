package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// SCTP has no place in package net, but a one-to-one SCTP socket behaves
// as a stream: made and connected here, it is handed to net as a file,
// which takes it for TCP, and HTTP runs over it unchanged.

// sctpListen listens for SCTP associations on port, on every IPv4
// address.
func sctpListen(port int) (net.Listener, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
	if err != nil {
		return nil, fmt.Errorf("when opening an SCTP socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), "sctp")
	defer f.Close()
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port}); err != nil {
		return nil, fmt.Errorf("when binding SCTP port %d: %w", port, err)
	}
	if err := unix.Listen(fd, 64); err != nil {
		return nil, fmt.Errorf("when listening on SCTP port %d: %w", port, err)
	}
	return net.FileListener(f)
}

// sctpDial connects to addr (IPv4:port) over SCTP, giving up after
// timeout as a context deadline would.
func sctpDial(addr string, timeout time.Duration) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		return nil, fmt.Errorf("SCTP address %q is not IPv4:port", addr)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
	if err != nil {
		return nil, fmt.Errorf("when opening an SCTP socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), "sctp")
	defer f.Close()
	// A blocking connect waits for the association at most this long.
	tv := unix.NsecToTimeval(timeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
		return nil, fmt.Errorf("when setting the SCTP connect timeout: %w", err)
	}
	err = unix.Connect(fd, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()})
	if errors.Is(err, unix.EINPROGRESS) || errors.Is(err, unix.ETIMEDOUT) {
		return nil, fmt.Errorf("when connecting to %s over SCTP: no association after %s: %w", addr, timeout, context.DeadlineExceeded)
	}
	if err != nil {
		return nil, fmt.Errorf("when connecting to %s over SCTP: %w", addr, err)
	}
	return net.FileConn(f)
}
