package curator

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/identity"
	"cairn.dev/cairn/pkg/fixture"
	"cairn.dev/cairn/proto/api"
	"cairn.dev/cairn/proto/private"
)

func TestHeartbeatsEncoding(t *testing.T) {
	const a, b = "cairn-0123456789abcdef", "cairn-fedcba9876543210"
	seen := map[string]time.Time{a: time.UnixMilli(1795000000123), b: time.UnixMilli(1795000000456)}
	data, err := encodeHeartbeats(seen)
	if err != nil {
		t.Fatal(err)
	}
	stored := func(millis map[string]int64) []byte {
		data, err := proto.Marshal(&private.Heartbeats{LastSeenUnixMillis: millis})
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	for _, tc := range []struct {
		name       string
		data       []byte
		want       map[string]time.Time
		wantLegacy bool
		wantErr    bool
	}{
		{name: "encoded", data: data, want: seen},
		{name: "empty", data: nil, want: map[string]time.Time{}},
		{name: "legacy JSON", data: []byte(`{"cairn-0123456789abcdef": 1795000000123, "cairn-fedcba9876543210": 1795000000456}`), want: seen, wantLegacy: true},
		{name: "legacy JSON with spaces", data: []byte(" \n{}"), want: map[string]time.Time{}, wantLegacy: true},
		// Entries that are not node IDs or times are dropped, in both
		// forms.
		{name: "bad entries", data: stored(map[string]int64{a: 5, "x": 7, b: -1}), want: map[string]time.Time{a: time.UnixMilli(5)}},
		{name: "bad legacy entries", data: []byte(`{"cairn-0123456789abcdef": 5, "x": 7, "cairn-fedcba9876543210": -1}`), want: map[string]time.Time{a: time.UnixMilli(5)}, wantLegacy: true},
		{name: "garbage", data: []byte("not json"), wantErr: true},
		{name: "broken JSON", data: []byte(`{"cairn-0123456789abcdef": `), wantErr: true},
	} {
		got, legacy, err := decodeHeartbeats(tc.data)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: decodeHeartbeats(%q) error = %v, want error %v", tc.name, tc.data, err, tc.wantErr)
			continue
		}
		if legacy != tc.wantLegacy {
			t.Errorf("%s: decodeHeartbeats(%q) legacy = %v, want %v", tc.name, tc.data, legacy, tc.wantLegacy)
		}
		if !maps.EqualFunc(got, tc.want, time.Time.Equal) {
			t.Errorf("%s: decodeHeartbeats(%q) = %v, want %v", tc.name, tc.data, got, tc.want)
		}
	}
}

// FuzzDecodeHeartbeats feeds decodeHeartbeats what etcd may hold under
// heartbeatsKey: it keeps only node IDs with times after the epoch, and
// what it keeps is encoded and read back unchanged.
func FuzzDecodeHeartbeats(f *testing.F) {
	data, err := encodeHeartbeats(map[string]time.Time{"cairn-0123456789abcdef": time.UnixMilli(1795000000123)})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte(`{"cairn-0123456789abcdef": 1795000000123}`))
	f.Add([]byte(`{"x": -1}`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		seen, _, err := decodeHeartbeats(data)
		if err != nil {
			return
		}
		for id, at := range seen {
			if !identity.ValidNodeID(id) || at.UnixMilli() <= 0 {
				t.Fatalf("decodeHeartbeats(%q) kept %q at %v", data, id, at)
			}
		}
		again, err := encodeHeartbeats(seen)
		if err != nil {
			t.Fatalf("encodeHeartbeats(%v): %v", seen, err)
		}
		got, legacy, err := decodeHeartbeats(again)
		if err != nil || legacy || !maps.EqualFunc(got, seen, time.Time.Equal) {
			t.Fatalf("decodeHeartbeats(encodeHeartbeats(%v)) = %v, legacy %v, %v; want the same times", seen, got, legacy, err)
		}
	})
}

// TestHeartbeatsMigration starts a curator on a cluster whose heartbeat
// times are stored as JSON, as builds before stored them: it reads them,
// and replaces them with a private.Heartbeats at its first write, even
// with no node beating.
func TestHeartbeatsMigration(t *testing.T) {
	const interval = 200 * time.Millisecond
	c := newTestCluster(t, WithHeartbeatInterval(interval))
	n0 := c.nodes[0]
	addr := n0.addr.String()
	waitLeader(t, n0, addr, "")
	n0.stopCurator()

	etcd, err := curatorClient(n0.member.WaitVoter(t).Client())
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	ctx := fixture.Context(t)
	last := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	legacy, err := json.Marshal(map[string]int64{n0.id(): last.UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.Put(ctx, heartbeatsKey, string(legacy)); err != nil {
		t.Fatalf("storing JSON heartbeat times: %v", err)
	}

	n0.startCurator(t, WithHeartbeatInterval(interval))
	waitLeader(t, n0, addr, "")
	m := c.mgmt(t, addr)
	fixture.Eventually(t, 30*time.Second, "the JSON time read and stored again as a proto", func() error {
		resp, err := etcd.Get(context.Background(), heartbeatsKey)
		if err != nil {
			return err
		}
		hb := &private.Heartbeats{}
		if err := proto.Unmarshal(resp.Kvs[0].Value, hb); err != nil {
			return fmt.Errorf("stored %q: %w", resp.Kvs[0].Value, err)
		}
		if got := hb.LastSeenUnixMillis[n0.id()]; got != last.UnixMilli() {
			return fmt.Errorf("stored %v for %s, want %d", hb.LastSeenUnixMillis, n0.id(), last.UnixMilli())
		}
		return nil
	})
	got, at := health(t, m, n0.id())
	if !at.Equal(last) {
		t.Errorf("last heartbeat of %s after the migration = %v, want %v", n0.id(), at, last)
	}
	if got == api.NodeHealth_NODE_HEALTH_HEALTHY {
		t.Errorf("%s, last heard a minute ago, is %v", n0.id(), got)
	}
}
