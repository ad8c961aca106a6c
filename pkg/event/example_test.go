package event_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/event/memory"
)

// A reader that was busy while the writer Set twice gets only the newest
// value, and then waits for the next Set.
func Example() {
	ctx := context.Background()
	var address memory.Value[netip.Addr]

	w := address.Watch()
	defer w.Close()

	address.Set(netip.MustParseAddr("10.0.0.5"))
	address.Set(netip.MustParseAddr("10.0.0.9"))
	addr, err := w.Get(ctx)
	fmt.Println(addr, err)

	_, err = w.Get(ctx, event.BacklogOnly[netip.Addr]())
	fmt.Println(err)
	// Output:
	// 10.0.0.9 <nil>
	// no more backlogged values
}

// Filter waits for a value that matters to the caller.
func ExampleFilter() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var roles memory.Value[[]string]
	roles.Set(nil)

	w := roles.Watch()
	defer w.Close()
	go roles.Set([]string{"ConsensusMember"})

	got, err := w.Get(ctx, event.Filter(func(r []string) bool { return len(r) > 0 }))
	fmt.Println(got, err)
	// Output: [ConsensusMember] <nil>
}

// Pipe turns Values into channels, so that one loop can wait on several of
// them and on a timer.
func ExamplePipe() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var address memory.Value[string]
	var roles memory.Value[[]string]
	addressC := make(chan string)
	rolesC := make(chan []string)
	event.Pipe(ctx, &address, addressC)
	event.Pipe(ctx, &roles, rolesC)

	address.Set("10.0.0.5")
	fmt.Println("address:", <-addressC)
	roles.Set([]string{"KubernetesWorker"})

	select {
	case a := <-addressC:
		fmt.Println("address changed:", a)
	case r := <-rolesC:
		fmt.Println("roles:", r)
	case <-time.After(time.Minute):
		fmt.Println("no news")
	}
	// Output:
	// address: 10.0.0.5
	// roles: [KubernetesWorker]
}

// NotNil waits for a Value that stays nil until its writer knows something.
func ExampleNotNil() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type credentials struct{ nodeID string }
	var creds memory.Value[*credentials]

	w := creds.Watch()
	defer w.Close()
	go creds.Set(&credentials{nodeID: "cairn-6f0c"})

	c, err := w.Get(ctx, event.NotNil[*credentials]())
	fmt.Println(c.nodeID, err)
	// Output: cairn-6f0c <nil>
}
