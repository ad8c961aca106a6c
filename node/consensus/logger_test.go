package consensus

import (
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/pkg/v3/traceutil"

	"cairn.dev/cairn/pkg/logtree"
)

// TestQuickTracesDropped runs etcd's own request traces through the
// logger: one past etcd's 100 ms threshold but under slowRequest is
// dropped, one past slowRequest is kept, and so is any other entry.
func TestQuickTracesDropped(t *testing.T) {
	lt := logtree.New()
	lg := newZapLogger(lt.LeveledFor("etcd"), nil)

	quick := traceutil.New("quick range", lg)
	time.Sleep(150 * time.Millisecond)
	quick.LogIfLong(100 * time.Millisecond)
	slow := traceutil.New("slow range", lg)
	time.Sleep(slowRequest + 50*time.Millisecond)
	slow.LogIfLong(100 * time.Millisecond)
	lg.Info("became leader")

	r, err := lt.Read("etcd", logtree.WithBacklog(logtree.BacklogAll))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []string
	for _, e := range r.Backlog {
		got = append(got, e.String())
	}
	all := strings.Join(got, "\n")
	if len(got) != 2 || !strings.Contains(all, "slow range") || !strings.Contains(all, "became leader") || strings.Contains(all, "quick range") {
		t.Errorf("logged:\n%s\nwant the slow trace and the other entry, not the quick trace", all)
	}
}
