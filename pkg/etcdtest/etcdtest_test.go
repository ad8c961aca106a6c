package etcdtest

import (
	"testing"

	"go.uber.org/goleak"

	"cairn.dev/cairn/pkg/fixture"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, LeakOptions()...)
}

// TestServerKeepsDataAcrossRestart writes through StartEtcd's kind of
// client, restarts the server under it and reads the value back.
func TestServerKeepsDataAcrossRestart(t *testing.T) {
	ctx := fixture.Context(t)
	s := NewServer(t)
	s.Start(t)
	cl := NewClient(t, s.Endpoint())
	if _, err := cl.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("Put: %v", err)
	}
	s.Stop()
	s.Start(t)
	resp, err := cl.Get(ctx, "k")
	if err != nil {
		t.Fatalf("Get after restart: %v", err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Errorf("Get(k) after restart = %v, want v", resp.Kvs)
	}
}

func TestStartEtcd(t *testing.T) {
	ctx := fixture.Context(t)
	cl := StartEtcd(t)
	if _, err := cl.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("Put: %v", err)
	}
	resp, err := cl.Get(ctx, "k")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Errorf("Get(k) = %v, want v", resp.Kvs)
	}
}
