package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"cairn.dev/cairn/node/identity/identitytest"
	"cairn.dev/cairn/node/rpc"
	"cairn.dev/cairn/proto/api"
)

// rolloutServer is testServer with Management's rollout calls: StartRollout
// answers start, and GetRollout each of polls in turn, the last one from
// then on; a nil one is testOutage of Unavailable.
type rolloutServer struct {
	*testServer

	// Guarded by testServer.mu.
	start     *api.Rollout
	polls     []*api.GetRolloutResponse
	downUntil time.Time
	gets      int
	gotStart  *api.StartRolloutRequest
	gotClear  string
}

// testOutage is how long the curators of a rolloutServer answer
// Unavailable: longer than the --timeout of the command that follows, so
// that a poll fails.
const testOutage = 1500 * time.Millisecond

// rolloutCluster serves a rolloutServer, and returns a configuration
// directory that owns it.
func rolloutCluster(t *testing.T) (string, *rolloutServer) {
	t.Helper()
	dir := t.TempDir()
	key, _, err := ensureOwnerKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{ca: identitytest.NewCA(t, "test cluster CA"), owner: key.Public().(ed25519.PublicKey)}
	ts.ident = ts.ca.Node(t)
	s := &rolloutServer{testServer: ts}
	srv := rpc.NewServer(ts.ident)
	api.RegisterAAAServer(srv, ts)
	api.RegisterManagementServer(srv, s)
	ts.addr = serve(t, srv)
	mustRun(t, dir, "--endpoint", ts.addr, "takeownership")
	return dir, s
}

func (s *rolloutServer) script(start *api.Rollout, polls ...*api.GetRolloutResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.start, s.polls = start, polls
}

func (s *rolloutServer) StartRollout(_ context.Context, req *api.StartRolloutRequest) (*api.Rollout, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gotStart = req
	return s.start, nil
}

func (s *rolloutServer) GetRollout(context.Context, *api.GetRolloutRequest) (*api.GetRolloutResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gets++
	if len(s.polls) > 0 && s.polls[0] == nil {
		// The curators have no leader for a while, as when the leader
		// reboots for its update.
		if s.downUntil.IsZero() {
			s.downUntil = time.Now().Add(testOutage)
		}
		if time.Now().Before(s.downUntil) {
			return nil, status.Error(codes.Unavailable, "no leader")
		}
		s.polls, s.downUntil = s.polls[1:], time.Time{}
	}
	if len(s.polls) == 0 {
		return &api.GetRolloutResponse{}, nil
	}
	res := s.polls[0]
	if len(s.polls) > 1 {
		s.polls = s.polls[1:]
	}
	return res, nil
}

func (s *rolloutServer) AbortRollout(context.Context, *api.AbortRolloutRequest) (*api.Rollout, error) {
	r := testRollout(api.RolloutState_ROLLOUT_STATE_ABORTED)
	r.Reason = "aborted by the owner"
	return r, nil
}

func (s *rolloutServer) ClearBadRelease(_ context.Context, req *api.ClearBadReleaseRequest) (*api.ClearBadReleaseResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gotClear = req.GetDigest()
	return &api.ClearBadReleaseResponse{}, nil
}

// runRollout runs cairnctl against dir with a quick rollout poll, and
// returns what it printed and its error.
func runRollout(ctx context.Context, t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := runApp(ctx, &out, dir, func(a *app) { a.rolloutPoll = time.Millisecond }, args...)
	return out.String(), err
}

// TestRolloutAgainstServer starts and follows rollouts against a server
// that plays the curator's part: each poll gets the next answer.
func TestRolloutAgainstServer(t *testing.T) {
	const (
		running = api.RolloutState_ROLLOUT_STATE_RUNNING
		drain   = api.StepPhase_STEP_PHASE_DRAINING
		update  = api.StepPhase_STEP_PHASE_UPDATING
		done    = api.StepPhase_STEP_PHASE_DONE
		failed  = api.StepPhase_STEP_PHASE_FAILED
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, s := rolloutCluster(t)
	answer := func(r *api.Rollout) *api.GetRolloutResponse { return &api.GetRolloutResponse{Rollout: r} }
	allDone := testRollout(api.RolloutState_ROLLOUT_STATE_DONE, step(done, ""), step(done, ""), step(done, ""))

	t.Run("start follows to the end", func(t *testing.T) {
		s.script(testRollout(running),
			answer(testRollout(running, step(update, "installing"))),
			answer(testRollout(running, step(update, "installing"))),
			nil,
			answer(testRollout(running, step(done, ""), step(drain, ""))),
			answer(allDone))
		out, err := runRollout(ctx, t, dir, "--timeout", "1s", "cluster", "update", "start", "--image", testRef,
			"--allow-downgrade", "--max-unavailable", "2", "--drain-timeout", "5m", "--trial-deadline", "90s")
		if err != nil {
			t.Fatalf("start: %v\n%s", err, out)
		}
		want := "" +
			"10:00:00 rollout r7 of release v0.5.0 (" + testRef + "): running\n" +
			"10:00:00 " + node1 + ": updating: installing\n" +
			"10:00:00 no curator answers (a consensus member may be rebooting for its update); trying for up to 15m0s: "
		if !strings.HasPrefix(out, want) {
			t.Errorf("start printed\n%s\nwant it to begin with\n%s", out, want)
		}
		wantEnd := "" +
			"10:00:00 the curators answer again\n" +
			"10:00:00 " + node1 + ": done\n" +
			"10:00:00 " + node2 + ": draining\n" +
			"10:00:00 " + node2 + ": done\n" +
			"10:00:00 " + node3 + ": done\n" +
			"10:00:00 rollout r7: done\n"
		if !strings.HasSuffix(out, wantEnd) {
			t.Errorf("start printed\n%s\nwant it to end with\n%s", out, wantEnd)
		}
		wantReq := &api.StartRolloutRequest{Reference: testRef, AllowDowngrade: true, MaxUnavailable: 2, DrainTimeoutSeconds: 300, TrialDeadlineSeconds: 90}
		s.mu.Lock()
		gotReq := s.gotStart
		s.mu.Unlock()
		if diff := cmp.Diff(wantReq, gotReq, protocmp.Transform()); diff != "" {
			t.Errorf("StartRolloutRequest (-want +got):\n%s", diff)
		}
	})

	t.Run("a halt fails with the reason", func(t *testing.T) {
		halt := testRollout(api.RolloutState_ROLLOUT_STATE_HALTED, step(failed, "rolled back: not healthy within 5m0s"))
		halt.Reason = "node " + node1 + " failed"
		s.script(testRollout(running), answer(halt))
		out, err := runRollout(ctx, t, dir, "cluster", "update", "start", "--image", testRef)
		want := "rollout r7 halted: node " + node1 + " failed"
		if err == nil || err.Error() != want {
			t.Errorf("start of a rollout that halts = %v, want %q", err, want)
		}
		if !strings.Contains(out, node1+": failed: rolled back: not healthy within 5m0s\n") {
			t.Errorf("start printed\n%s\nwant the failed step", out)
		}
		// status -w on the halted rollout says the same.
		if _, err := runRollout(ctx, t, dir, "cluster", "update", "status", "-w"); err == nil || err.Error() != want {
			t.Errorf("status -w of a halted rollout = %v, want %q", err, want)
		}
	})

	t.Run("status -w -o json", func(t *testing.T) {
		s.script(nil, answer(testRollout(running)), answer(allDone))
		out, err := runRollout(ctx, t, dir, "-o", "json", "cluster", "update", "status", "-w")
		if err != nil {
			t.Fatalf("status -w: %v", err)
		}
		var v rolloutStatusView
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("status -w -o json printed %q: %v", out, err)
		}
		if diff := cmp.Diff(newRolloutStatusView(answer(allDone)), v); diff != "" {
			t.Errorf("status -w -o json (-want +got):\n%s", diff)
		}
	})

	t.Run("no rollout", func(t *testing.T) {
		s.script(nil)
		for _, args := range [][]string{{"status"}, {"status", "-w"}} {
			out, err := runRollout(ctx, t, dir, append([]string{"cluster", "update"}, args...)...)
			if err != nil || out != "no rollout has been started\n" {
				t.Errorf("cluster update %s without a rollout = %q, %v", strings.Join(args, " "), out, err)
			}
		}
	})

	t.Run("Ctrl-C", func(t *testing.T) {
		s.script(testRollout(running), answer(testRollout(running)))
		s.mu.Lock()
		s.gets = 0
		s.mu.Unlock()
		ictx, interrupt := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := runRollout(ictx, t, dir, "cluster", "update", "start", "--image", testRef)
			done <- err
		}()
		// Interrupted once it follows.
		for {
			s.mu.Lock()
			gets := s.gets
			s.mu.Unlock()
			if gets > 2 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		interrupt()
		if err := <-done; err == nil || !strings.Contains(err.Error(), "stopped following rollout r7, which goes on") {
			t.Errorf("start interrupted = %v, want it to say the rollout goes on", err)
		}
	})

	t.Run("no-wait, abort and clear-bad", func(t *testing.T) {
		s.script(testRollout(running))
		out, err := runRollout(ctx, t, dir, "cluster", "update", "start", "--image", testRef, "--no-wait")
		if want := "Started rollout r7 of release v0.5.0 (" + testRef + ") over 3 nodes"; err != nil || !strings.HasPrefix(out, want) {
			t.Errorf("start --no-wait = %q, %v, want %q", out, err, want)
		}
		out, err = runRollout(ctx, t, dir, "cluster", "update", "abort")
		if want := "Rollout r7 of release v0.5.0 is aborted: aborted by the owner.\n"; err != nil || out != want {
			t.Errorf("abort = %q, %v, want %q", out, err, want)
		}
		if _, err := runRollout(ctx, t, dir, "cluster", "update", "clear-bad", testDigest); err != nil {
			t.Errorf("clear-bad: %v", err)
		}
		s.mu.Lock()
		got := s.gotClear
		s.mu.Unlock()
		if got != testDigest {
			t.Errorf("ClearBadRelease got digest %q, want %q", got, testDigest)
		}
	})
}
