package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cairn.dev/cairn/proto/api"
)

const (
	testDigest = "sha256:abababababababababababababababababababababababababababababababab"
	testRef    = "10.42.0.1:5000/cairn/release@" + testDigest
	node1      = "cairn-0000000000000001"
	node2      = "cairn-0000000000000002"
	node3      = "cairn-0000000000000003"
)

// testRollout is a rollout of three nodes, started five minutes before
// testNow, in state with the steps' phases and messages set by steps.
func testRollout(state api.RolloutState, steps ...*api.RolloutStep) *api.Rollout {
	r := &api.Rollout{
		Id: "r7", Reference: testRef, Digest: testDigest, Version: "v0.5.0",
		MaxUnavailable: 2, TrialDeadlineSeconds: 300,
		State: state, StartedUnixNanos: testNow.Add(-5 * time.Minute).UnixNano(),
	}
	for i, id := range []string{node1, node2, node3} {
		s := &api.RolloutStep{NodeId: id, Phase: api.StepPhase_STEP_PHASE_PENDING}
		if i < len(steps) {
			s = steps[i]
			s.NodeId = id
		}
		r.Steps = append(r.Steps, s)
	}
	return r
}

func step(phase api.StepPhase, message string) *api.RolloutStep {
	return &api.RolloutStep{Phase: phase, Message: message}
}

func TestRolloutChanges(t *testing.T) {
	const (
		running = api.RolloutState_ROLLOUT_STATE_RUNNING
		halted  = api.RolloutState_ROLLOUT_STATE_HALTED
		pending = api.StepPhase_STEP_PHASE_PENDING
		drain   = api.StepPhase_STEP_PHASE_DRAINING
		update  = api.StepPhase_STEP_PHASE_UPDATING
		done    = api.StepPhase_STEP_PHASE_DONE
		failed  = api.StepPhase_STEP_PHASE_FAILED
	)
	halt := testRollout(halted, step(done, ""), step(failed, "trial boot missed its deadline"))
	halt.Reason = "node " + node2 + " failed: trial boot missed its deadline"
	other := testRollout(running)
	other.Id, other.Version = "r8", "v0.5.1"
	for _, tc := range []struct {
		name      string
		prev, cur *api.Rollout
		want      []string
	}{
		{"just started", nil, testRollout(running),
			[]string{"rollout r7 of release v0.5.0 (" + testRef + "): running"}},
		{"followed midway", nil, testRollout(running, step(done, ""), step(drain, "waiting for 2 pods"), step(pending, "")), []string{
			"rollout r7 of release v0.5.0 (" + testRef + "): running",
			node1 + ": done",
			node2 + ": draining: waiting for 2 pods",
		}},
		{"nothing changed", testRollout(running, step(drain, "")), testRollout(running, step(drain, "")), nil},
		{"a phase", testRollout(running, step(drain, "")), testRollout(running, step(update, "")),
			[]string{node1 + ": updating"}},
		{"a message", testRollout(running, step(update, "installing")), testRollout(running, step(update, "trial boot")),
			[]string{node1 + ": updating: trial boot"}},
		{"two steps and the state", testRollout(running, step(update, "trial boot"), step(pending, "")), halt, []string{
			node1 + ": done",
			node2 + ": failed: trial boot missed its deadline",
			"rollout r7: halted: node " + node2 + " failed: trial boot missed its deadline",
		}},
		{"another rollout", testRollout(running, step(done, "")), other,
			[]string{"rollout r8 of release v0.5.1 (" + testRef + "): running"}},
	} {
		if diff := cmp.Diff(tc.want, rolloutChanges(tc.prev, tc.cur)); diff != "" {
			t.Errorf("rolloutChanges(%s) (-want +got):\n%s", tc.name, diff)
		}
	}
}

// testRolloutStatus is a rollout midway, and a release recorded bad by
// an earlier one.
func testRolloutStatus() *api.GetRolloutResponse {
	drained := step(api.StepPhase_STEP_PHASE_DRAINING, "waiting for PodDisruptionBudget default/web")
	drained.StartedUnixNanos = testNow.Add(-90 * time.Second).UnixNano()
	drained.EvictedPods = 3
	first := step(api.StepPhase_STEP_PHASE_DONE, "")
	first.StartedUnixNanos = testNow.Add(-5 * time.Minute).UnixNano()
	first.FinishedUnixNanos = testNow.Add(-90 * time.Second).UnixNano()
	return &api.GetRolloutResponse{
		Rollout: testRollout(api.RolloutState_ROLLOUT_STATE_RUNNING, first, drained),
		BadReleases: []*api.BadRelease{{
			Digest: "sha256:cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd", Version: "v0.4.9",
			NodeId: node3, Reason: "not healthy within 10m0s", RecordedUnixNanos: testNow.Add(-24 * time.Hour).UnixNano(),
		}},
	}
}

func TestWriteRolloutStatus(t *testing.T) {
	started := testNow.Add(-5 * time.Minute).Format(time.RFC3339)
	for _, tc := range []struct {
		name string
		res  *api.GetRolloutResponse
		want string
	}{
		{"running", testRolloutStatus(), "" +
			"Rollout:    r7\n" +
			"Release:    v0.5.0\n" +
			"Digest:     " + testDigest + "\n" +
			"Reference:  " + testRef + "\n" +
			"State:      running\n" +
			"Reason:     -\n" +
			"Started:    " + started + " (5m0s ago)\n" +
			"Ended:      -\n" +
			"Elapsed:    5m0s\n" +
			"\n" +
			"NODE                    PHASE     EVICTED  ELAPSED  MESSAGE\n" +
			node1 + "  done      0        3m30s    -\n" +
			node2 + "  draining  3        1m30s    waiting for PodDisruptionBudget default/web\n" +
			node3 + "  pending   0        -        -\n" +
			"\n" +
			"Bad releases:\n" +
			"DIGEST                                                                   VERSION  NODE                    REASON\n" +
			"sha256:cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd  v0.4.9   " + node3 + "  not healthy within 10m0s\n"},
		{"none", &api.GetRolloutResponse{}, "no rollout has been started\n"},
	} {
		var out bytes.Buffer
		if err := writeRolloutStatus(&out, testNow, newRolloutStatusView(tc.res)); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, out.String()); diff != "" {
			t.Errorf("writeRolloutStatus(%s) (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestRolloutStatusJSON(t *testing.T) {
	var out bytes.Buffer
	if err := writeJSON(&out, newRolloutStatusView(testRolloutStatus())); err != nil {
		t.Fatal(err)
	}
	// Read back as a script would, into plain maps: the field names and
	// their types are the contract.
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	at := func(d time.Duration) string { return testNow.Add(d).Format(time.RFC3339) }
	want := map[string]any{
		"rollout": map[string]any{
			"id": "r7", "reference": testRef, "digest": testDigest, "version": "v0.5.0",
			"allow_downgrade": false, "max_unavailable": 2.0, "drain_timeout_seconds": 0.0, "trial_deadline_seconds": 300.0,
			"state": "running", "reason": "", "started": at(-5 * time.Minute), "ended": nil,
			"steps": []any{
				map[string]any{"node_id": node1, "phase": "done", "message": "", "started": at(-5 * time.Minute), "finished": at(-90 * time.Second), "evicted_pods": 0.0},
				map[string]any{"node_id": node2, "phase": "draining", "message": "waiting for PodDisruptionBudget default/web", "started": at(-90 * time.Second), "finished": nil, "evicted_pods": 3.0},
				map[string]any{"node_id": node3, "phase": "pending", "message": "", "started": nil, "finished": nil, "evicted_pods": 0.0},
			},
		},
		"bad_releases": []any{map[string]any{
			"digest": "sha256:cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd", "version": "v0.4.9",
			"node_id": node3, "reason": "not healthy within 10m0s", "recorded": at(-24 * time.Hour),
		}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status -o json (-want +got):\n%s", diff)
	}

	out.Reset()
	if err := writeJSON(&out, newRolloutStatusView(&api.GetRolloutResponse{})); err != nil {
		t.Fatal(err)
	}
	if want := "{\n  \"rollout\": null,\n  \"bad_releases\": []\n}\n"; out.String() != want {
		t.Errorf("status -o json without a rollout = %q, want %q", out.String(), want)
	}
}
