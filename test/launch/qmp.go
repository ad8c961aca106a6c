package launch

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

// qmpExecute runs one QMP command, without arguments, on the monitor at
// socket (see qmpRun).
func qmpExecute(ctx context.Context, socket, cmd string, eofIsSuccess bool) error {
	return qmpRun(ctx, socket, eofIsSuccess, qmpCommand{Execute: cmd})
}

// qmpCommand is a QMP command with its arguments, if any.
type qmpCommand struct {
	Execute   string `json:"execute"`
	Arguments any    `json:"arguments,omitempty"`
}

// qmpRun runs QMP commands in turn on the monitor at socket: it connects,
// leaves capabilities negotiation mode and executes each, stopping at the
// first that fails. qemu serves one QMP client at a time per socket, so
// holding no connection between calls leaves the socket free for other
// tools.
//
// When qemu closes the connection right after the last command (as after
// "quit"), the command counts as done if closing was the point: pass
// eofIsSuccess.
func qmpRun(ctx context.Context, socket string, eofIsSuccess bool, cmds ...qmpCommand) error {
	conn, err := dialQMP(ctx, socket)
	if err != nil {
		return fmt.Errorf("when connecting to QMP: %w", err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	} else {
		conn.SetDeadline(time.Now().Add(time.Minute))
	}
	// Unblock reads and writes when ctx ends early.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	q := &qmpConn{r: bufio.NewReader(conn), w: conn}
	if _, err := q.read(); err != nil {
		return fmt.Errorf("when reading QMP greeting: %w", err)
	}
	if err := q.execute(qmpCommand{Execute: "qmp_capabilities"}); err != nil {
		return fmt.Errorf("when negotiating QMP capabilities: %w", err)
	}
	for i, cmd := range cmds {
		err = q.execute(cmd)
		if eofIsSuccess && i == len(cmds)-1 && errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("when executing QMP %s: %w", cmd.Execute, err)
		}
	}
	return nil
}

// qmpMessage is any message from qemu: a greeting, a reply or an event.
type qmpMessage struct {
	QMP    json.RawMessage `json:"QMP"`
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	Event string `json:"event"`
}

type qmpConn struct {
	r *bufio.Reader
	w io.Writer
}

// read returns the next message. qemu sends one JSON object per line.
func (q *qmpConn) read() (*qmpMessage, error) {
	line, err := q.r.ReadBytes('\n')
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, err
	}
	var m qmpMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return nil, fmt.Errorf("bad QMP message %q: %w", line, err)
	}
	return &m, nil
}

// execute sends a command and waits for its reply, skipping the events
// that qemu may send in between.
func (q *qmpConn) execute(cmd qmpCommand) error {
	req, err := json.Marshal(cmd)
	if err != nil {
		return err
	}
	if _, err := q.w.Write(append(req, '\n')); err != nil {
		return err
	}
	for {
		m, err := q.read()
		if err != nil {
			return err
		}
		switch {
		case m.Error != nil:
			return fmt.Errorf("qemu refused: %s: %s", m.Error.Class, m.Error.Desc)
		case m.Return != nil:
			return nil
		}
	}
}

// qmpRefusedFor is how long dialQMP tries again while the socket refuses:
// qemu creates the socket file when it binds and accepts only once it
// listens, so a dial in between is refused although qemu is fine.
const qmpRefusedFor = 2 * time.Second

// dialQMP connects to the QMP socket, trying again for qmpRefusedFor
// while it refuses.
func dialQMP(ctx context.Context, socket string) (net.Conn, error) {
	var d net.Dialer
	deadline := time.Now().Add(qmpRefusedFor)
	for {
		conn, err := d.DialContext(ctx, "unix", socket)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(deadline) {
			return conn, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(20 * time.Millisecond):
		}
	}
}
