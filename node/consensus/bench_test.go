package consensus

import (
	"context"
	"strconv"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkConsensusPut compares a Put through a namespaced Client with one
// through a plain etcd client, on the same single-member embedded etcd and
// the same unix socket.
func BenchmarkConsensusPut(b *testing.B) {
	n := newTestNode(b)
	n.start(b)
	st := n.waitRunning(b)
	ctx := context.Background()

	ns, err := st.Client().Sub("bench")
	if err != nil {
		b.Fatal(err)
	}
	defer ns.Close()
	raw, err := clientv3.New(clientv3.Config{Endpoints: []string{sock(n.cfg.SocketPath)}})
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()

	for _, bc := range []struct {
		name string
		kv   clientv3.KV
	}{
		{"raw", raw},
		{"namespaced", ns},
	} {
		b.Run(bc.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				if _, err := bc.kv.Put(ctx, "key/"+strconv.Itoa(i%1000), "value"); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
