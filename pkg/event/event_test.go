package event_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"cairn.dev/cairn/pkg/event"
	"cairn.dev/cairn/pkg/event/memory"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// receive waits for the next value on c, failing the test after a generous
// time so that a lost update shows up as a failure rather than a hang.
func receive[T any](t *testing.T, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no value received from the pipe")
		panic("unreachable")
	}
}

func TestNewGetOptions(t *testing.T) {
	even := func(v int) bool { return v%2 == 0 }
	small := func(v int) bool { return v < 10 }
	for _, tc := range []struct {
		name        string
		opts        []event.GetOption[int]
		accepts     map[int]bool
		backlogOnly bool
	}{
		{name: "none", accepts: map[int]bool{1: true, 2: true}},
		{name: "filter", opts: []event.GetOption[int]{event.Filter(even)}, accepts: map[int]bool{1: false, 2: true}},
		{
			name:    "two filters",
			opts:    []event.GetOption[int]{event.Filter(even), event.Filter(small)},
			accepts: map[int]bool{1: false, 2: true, 12: false},
		},
		{name: "backlog only", opts: []event.GetOption[int]{event.BacklogOnly[int]()}, accepts: map[int]bool{1: true}, backlogOnly: true},
		{name: "nil option and predicate", opts: []event.GetOption[int]{nil, event.Filter[int](nil)}, accepts: map[int]bool{1: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := event.NewGetOptions(tc.opts...)
			if o.BacklogOnly != tc.backlogOnly {
				t.Errorf("BacklogOnly = %v, want %v", o.BacklogOnly, tc.backlogOnly)
			}
			for v, want := range tc.accepts {
				if got := o.Accepts(v); got != want {
					t.Errorf("Accepts(%d) = %v, want %v", v, got, want)
				}
			}
		})
	}
}

// countedValue counts the Watchers of its Value that are open.
type countedValue struct {
	memory.Value[int]
	open atomic.Int32
}

func (v *countedValue) Watch() event.Watcher[int] {
	v.open.Add(1)
	return countedWatcher{v.Value.Watch(), v}
}

type countedWatcher struct {
	event.Watcher[int]
	v *countedValue
}

func (w countedWatcher) Close() error {
	w.v.open.Add(-1)
	return w.Watcher.Close()
}

// TestGet checks that Get returns the current value when its options
// accept it, waits for one they accept otherwise, returns the context's
// error when it ends first, and closes its Watcher in each case.
func TestGet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var v countedValue
	v.Set(1)
	if got, err := event.Get(ctx, &v); got != 1 || err != nil {
		t.Errorf("Get = %d, %v, want the current value 1", got, err)
	}

	even := event.Filter(func(i int) bool { return i%2 == 0 })
	go func() {
		time.Sleep(10 * time.Millisecond)
		v.Set(3)
		v.Set(4)
	}()
	if got, err := event.Get(ctx, &v, even); got != 4 || err != nil {
		t.Errorf("Get with a filter = %d, %v, want 4", got, err)
	}

	short, stop := context.WithTimeout(ctx, 10*time.Millisecond)
	defer stop()
	if _, err := event.Get(short, &v, event.Filter(func(i int) bool { return i > 10 })); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get past its deadline = %v, want context.DeadlineExceeded", err)
	}
	if n := v.open.Load(); n != 0 {
		t.Errorf("%d Watchers left open", n)
	}
}

func TestPipeDelivers(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var v memory.Value[int]
	c := make(chan int)
	v.Set(1)
	event.Pipe(ctx, &v, c)
	if got := receive(t, c); got != 1 {
		t.Fatalf("first piped value = %d, want the current value 1", got)
	}
	v.Set(2)
	if got := receive(t, c); got != 2 {
		t.Fatalf("piped value = %d, want 2", got)
	}
	// A lagging reader misses intermediate values but gets the newest one.
	for i := 3; i <= 1000; i++ {
		v.Set(i)
	}
	last := 2
	for last != 1000 {
		got := receive(t, c)
		if got <= last {
			t.Fatalf("piped value = %d after %d, want an increasing sequence", got, last)
		}
		last = got
	}
	cancel()
}

func TestPipeFilter(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var v memory.Value[string]
	c := make(chan string)
	event.Pipe(ctx, &v, c, event.Filter(func(s string) bool { return s != "" }))
	v.Set("")
	v.Set("up")
	if got := receive(t, c); got != "up" {
		t.Fatalf("piped value = %q, want %q", got, "up")
	}
	cancel()
}

// TestPipeSelect feeds two Values into one select, the way a runnable waits
// on several inputs at once.
func TestPipeSelect(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var address memory.Value[string]
	var roles memory.Value[[]string]
	addressC := make(chan string)
	rolesC := make(chan []string)
	event.Pipe(ctx, &address, addressC)
	event.Pipe(ctx, &roles, rolesC)

	address.Set("10.0.0.5")
	roles.Set([]string{"KubernetesWorker"})
	var gotAddress string
	var gotRoles []string
	for gotAddress == "" || gotRoles == nil {
		select {
		case gotAddress = <-addressC:
		case gotRoles = <-rolesC:
		case <-time.After(10 * time.Second):
			t.Fatalf("got address %q, roles %q; still waiting", gotAddress, gotRoles)
		}
	}
	if gotAddress != "10.0.0.5" || len(gotRoles) != 1 || gotRoles[0] != "KubernetesWorker" {
		t.Fatalf("got address %q, roles %q, want %q, %q", gotAddress, gotRoles, "10.0.0.5", []string{"KubernetesWorker"})
	}
	cancel()
}

// TestPipeStops checks that the pipe's goroutine ends with ctx in every
// state it can be in; goleak fails the test if one lingers.
func TestPipeStops(t *testing.T) {
	for _, tc := range []struct {
		name string
		// run sets up a pipe into c and leaves it in the state under test.
		run func(ctx context.Context, v *memory.Value[int], c chan int)
	}{
		{
			name: "waiting for a first value",
			run: func(ctx context.Context, v *memory.Value[int], c chan int) {
				event.Pipe(ctx, v, c)
			},
		},
		{
			name: "waiting for a newer value",
			run: func(ctx context.Context, v *memory.Value[int], c chan int) {
				v.Set(1)
				event.Pipe(ctx, v, c)
				<-c
			},
		},
		{
			name: "blocked sending to a reader that left",
			run: func(ctx context.Context, v *memory.Value[int], c chan int) {
				v.Set(1)
				event.Pipe(ctx, v, c)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t)
			ctx, cancel := context.WithCancel(context.Background())
			var v memory.Value[int]
			tc.run(ctx, &v, make(chan int))
			cancel()
		})
	}
}

// TestPipeBacklogOnly checks that a pipe under BacklogOnly delivers the
// current value and then ends by itself, before ctx is done.
func TestPipeBacklogOnly(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var v memory.Value[int]
	v.Set(1)
	c := make(chan int)
	event.Pipe(ctx, &v, c, event.BacklogOnly[int]())
	if got := receive(t, c); got != 1 {
		t.Fatalf("piped value = %d, want 1", got)
	}
	if err := goleak.Find(); err != nil {
		t.Fatalf("pipe goroutine still running after its backlog: %v", err)
	}
}

// TestPipeAlreadyDone checks that a pipe started with a done ctx sends
// nothing and exits.
func TestPipeAlreadyDone(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var v memory.Value[int]
	v.Set(1)
	c := make(chan int, 1)
	event.Pipe(ctx, &v, c)
	// goleak waits for the goroutine to exit; after that c must be empty.
	if err := goleak.Find(); err != nil {
		t.Fatalf("pipe goroutine still running: %v", err)
	}
	select {
	case got := <-c:
		t.Fatalf("pipe with a done ctx sent %d", got)
	default:
	}
}

// acceptsNotNil checks that NotNil[T] rejects T's nil and accepts set.
func acceptsNotNil[T any](t *testing.T, set T) {
	t.Helper()
	o := event.NewGetOptions(event.NotNil[T]())
	var nilT T
	if o.Accepts(nilT) {
		t.Errorf("NotNil[%T] accepts nil, want it rejected", set)
	}
	if !o.Accepts(set) {
		t.Errorf("NotNil[%T] rejects %v, want it accepted", set, set)
	}
}

func TestNotNil(t *testing.T) {
	type node struct{ name string }
	acceptsNotNil(t, &node{})
	// An empty slice or map is a value, unlike nil.
	acceptsNotNil(t, []string{})
	acceptsNotNil(t, map[string]int{})
	acceptsNotNil(t, make(chan int))
	acceptsNotNil(t, func() {})
	acceptsNotNil[error](t, event.ErrBacklogDone)

	// A Filter after NotNil is not asked about nil.
	o := event.NewGetOptions(event.NotNil[*node](), event.Filter(func(n *node) bool { return n.name != "" }))
	for _, tc := range []struct {
		v    *node
		want bool
	}{{nil, false}, {&node{}, false}, {&node{name: "a"}, true}} {
		if got := o.Accepts(tc.v); got != tc.want {
			t.Errorf("NotNil then Filter: Accepts(%v) = %v, want %v", tc.v, got, tc.want)
		}
	}
}

func TestNotNilNeverNil(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Errorf("NotNil[int] did not panic, want a panic: an int is never nil")
		}
	}()
	event.NotNil[int]()
}

// TestNotNilGet waits, as the users of NotNil do, for a Value that starts
// out nil to be set.
func TestNotNilGet(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var v memory.Value[*string]
	v.Set(nil)
	w := v.Watch()
	defer w.Close()
	up := "up"
	go func() {
		v.Set(nil)
		v.Set(&up)
	}()
	got, err := w.Get(ctx, event.NotNil[*string]())
	if err != nil || got != &up {
		t.Fatalf("Get(NotNil) = %v, %v, want %v, nil", got, err, &up)
	}

	var nodes memory.Value[[]string]
	c := make(chan []string)
	event.Pipe(ctx, &nodes, c, event.NotNil[[]string]())
	nodes.Set(nil)
	nodes.Set([]string{})
	if got := receive(t, c); got == nil || len(got) != 0 {
		t.Fatalf("piped value = %#v, want the empty, non-nil []string{}", got)
	}
	cancel()
}
