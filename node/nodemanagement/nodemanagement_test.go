package nodemanagement

import (
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/proto/api"
)

// recordingActions counts calls of Reboot and Poweroff functions and signals
// each call.
type recordingActions struct {
	reboots, poweroffs atomic.Int32
	called             chan string
}

func newRecordingActions() *recordingActions {
	return &recordingActions{called: make(chan string, 10)}
}

func (a *recordingActions) config(lt *logtree.LogTree) Config {
	return Config{
		LogTree:        lt,
		Reboot:         func() { a.reboots.Add(1); a.called <- "reboot" },
		RebootFirmware: func() { a.reboots.Add(1); a.called <- "reboot through the firmware" },
		Poweroff:       func() { a.poweroffs.Add(1); a.called <- "poweroff" },
	}
}

// wait returns the next action called, failing the test after a minute.
func (a *recordingActions) wait(t *testing.T) string {
	t.Helper()
	select {
	case what := <-a.called:
		return what
	case <-time.After(time.Minute):
		t.Fatalf("no action called within a minute")
		return ""
	}
}

// TestRebootOverGRPC reboots through a real server as the owner: the reply
// comes, then the function is called once; later requests are refused.
func TestRebootOverGRPC(t *testing.T) {
	actions := newRecordingActions()
	lt := logtree.New()
	svc := New(actions.config(lt))
	svc.delay = 50 * time.Millisecond
	client := serve(t, svc).owner(t)

	if _, err := client.Reboot(t.Context(), &api.RebootRequest{}); err != nil {
		t.Fatalf("Reboot: %v", err)
	}
	if what := actions.wait(t); what != "reboot" {
		t.Errorf("Reboot called %q", what)
	}
	if _, err := client.Reboot(t.Context(), &api.RebootRequest{}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("second Reboot = %v, want FailedPrecondition", err)
	}
	if _, err := client.Poweroff(t.Context(), &api.PoweroffRequest{}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("Poweroff after Reboot = %v, want FailedPrecondition", err)
	}
	if r, p := actions.reboots.Load(), actions.poweroffs.Load(); r != 1 || p != 0 {
		t.Errorf("called Reboot %d and Poweroff %d times, want 1 and 0", r, p)
	}

	r, err := lt.Read("root.nodemanagement", logtree.WithBacklog(logtree.BacklogAll))
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	r.Close()
	if len(r.Backlog) != 1 {
		t.Errorf("logged %d entries about the reboot, want 1", len(r.Backlog))
	} else {
		t.Logf("logged: %s", r.Backlog[0])
	}
}

// TestRebootActsOnceAnswered reboots through a real server with the
// fallback delay out of reach: the end of the call, its reply sent, is
// what makes the node act, a grace later.
func TestRebootActsOnceAnswered(t *testing.T) {
	actions := newRecordingActions()
	svc := New(actions.config(nil))
	svc.grace, svc.delay = 100*time.Millisecond, time.Hour
	client := serve(t, svc).owner(t)
	if _, err := client.Reboot(t.Context(), &api.RebootRequest{}); err != nil {
		t.Fatalf("Reboot: %v", err)
	}
	answered := time.Now()
	if what := actions.wait(t); what != "reboot" {
		t.Errorf("Reboot called %q", what)
	}
	t.Logf("acted %v after the reply came", time.Since(answered).Round(time.Millisecond))
}

// TestPoweroffAnswersFirst calls the handler directly: it returns before
// the function is called, which then happens once.
func TestPoweroffAnswersFirst(t *testing.T) {
	actions := newRecordingActions()
	svc := New(actions.config(nil))
	svc.delay = 200 * time.Millisecond
	if _, err := svc.Poweroff(t.Context(), &api.PoweroffRequest{}); err != nil {
		t.Fatalf("Poweroff: %v", err)
	}
	if p := actions.poweroffs.Load(); p != 0 {
		t.Fatalf("Poweroff called the function before answering")
	}
	if what := actions.wait(t); what != "poweroff" {
		t.Errorf("Poweroff called %q", what)
	}
	if _, err := svc.Poweroff(t.Context(), &api.PoweroffRequest{}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("second Poweroff = %v, want FailedPrecondition", err)
	}
}

// TestRebootThroughTheFirmware checks that a Reboot asking for the
// firmware calls RebootFirmware, and that a node without it refuses.
func TestRebootThroughTheFirmware(t *testing.T) {
	actions := newRecordingActions()
	svc := New(actions.config(logtree.New()))
	svc.delay = time.Millisecond
	client := serve(t, svc).owner(t)
	if _, err := client.Reboot(t.Context(), &api.RebootRequest{Firmware: true}); err != nil {
		t.Fatalf("Reboot(firmware): %v", err)
	}
	if what := actions.wait(t); what != "reboot through the firmware" {
		t.Errorf("Reboot(firmware) called %q", what)
	}
	without := New(Config{Reboot: func() {}})
	if _, err := without.Reboot(t.Context(), &api.RebootRequest{Firmware: true}); status.Code(err) != codes.Unimplemented {
		t.Errorf("Reboot(firmware) without RebootFirmware = %v, want Unimplemented", err)
	}
}

func TestActionsWithoutFunctions(t *testing.T) {
	svc := New(Config{})
	if _, err := svc.Reboot(t.Context(), &api.RebootRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("Reboot without a function = %v, want Unimplemented", err)
	}
	if _, err := svc.Poweroff(t.Context(), &api.PoweroffRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("Poweroff without a function = %v, want Unimplemented", err)
	}
}

// TestNodeIsRefused checks over gRPC that a node certificate, not the
// owner's, gets nothing: the methods are declared OWNER.
func TestNodeIsRefused(t *testing.T) {
	actions := newRecordingActions()
	srv := serve(t, New(actions.config(logtree.New())))
	client := srv.client(t, rpc.NodeCredentials(srv.ca.Node(t)))

	if _, err := client.Reboot(t.Context(), &api.RebootRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Reboot as a node = %v, want PermissionDenied", err)
	}
	stream, err := client.Logs(t.Context(), &api.LogsRequest{Backlog: -1})
	if err == nil {
		_, _, err = recvAll(t, stream)
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("Logs as a node = %v, want PermissionDenied", err)
	}
	if _, err := sendBackup(t.Context(), client, headerOf([]byte("x")), []byte("x")); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Recover as a node = %v, want PermissionDenied", err)
	}
	if r := actions.reboots.Load(); r != 0 {
		t.Errorf("a node's Reboot called the function %d times", r)
	}
}
