package network

import (
	"fmt"
	"os"
	"strconv"
)

// tcpRetries2 is how many times the kernel retransmits unacknowledged data
// before it gives a TCP connection up: 5 tries take about 12.6 s (the
// pause starts at 200 ms and doubles), against about 15 minutes for the
// kernel's default of 15.
//
// Why it matters: a connection whose peer was cut off keeps its data queued
// and retransmits after ever longer pauses, so once the network is back
// nothing flows on it until the next retransmission, up to half a minute
// after a partition of as long. etcd's peer streams sit on such connections
// with no deadline of their own: a member cut off for 30 s learned its
// leader again only 11 s after the network healed. With 5, a connection
// silent for about 12.6 s fails, the program dials anew, and the new
// connection works as soon as the network does. The setting belongs to the
// node's network namespace: pods keep the kernel's default.
const tcpRetries2 = 5

// tcpRetries2Path is tcpRetries2's sysctl, relative to /proc/sys. It reads
// and writes the value of the network namespace of the thread that opens it.
const tcpRetries2Path = "net/ipv4/tcp_retries2"

// setSysctls sets the node's TCP settings in the configured namespace.
func (s *Service) setSysctls() error {
	return s.inNamespace(func() error {
		return writeSysctl(tcpRetries2Path, strconv.Itoa(tcpRetries2))
	})
}

// writeSysctl writes value to the sysctl name (a path under /proc/sys).
func writeSysctl(name, value string) error {
	if err := os.WriteFile("/proc/sys/"+name, []byte(value+"\n"), 0); err != nil {
		return fmt.Errorf("when setting %s to %s: %w", name, value, err)
	}
	return nil
}
