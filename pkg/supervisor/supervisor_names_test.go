package supervisor

import (
	"context"
	"errors"
	"testing"
)

// TestNames checks the rules for runnable names, including uniqueness
// among siblings.
func TestNames(t *testing.T) {
	for _, tc := range []struct {
		name    string
		wantErr bool
	}{
		{"dhcp", false},
		{"etcd-0", false},
		{"csi_provisioner", false},
		{"eth0:v4", false},
		{"", true},
		{"a.b", true},
		{".", true},
		{"with space", true},
		{"tab\there", true},
		{"new\nline", true},
		{"taken", true}, // the root starts "taken" before trying
	} {
		t.Run(tc.name, func(t *testing.T) {
			result := make(chan error, 1)
			root := func(ctx context.Context) error {
				if err := Run(ctx, "taken", idle); err != nil {
					return err
				}
				result <- Run(ctx, tc.name, idle)
				Signal(ctx, SignalHealthy)
				<-ctx.Done()
				return ctx.Err()
			}
			startTree(t, root)
			if err := <-result; (err != nil) != tc.wantErr {
				t.Errorf("Run(%q) = %v, want error: %v", tc.name, err, tc.wantErr)
			}
		})
	}
}

// TestNamesPerParent checks that names need only be unique among siblings,
// and that a group is refused as a whole.
func TestNamesPerParent(t *testing.T) {
	nested := make(chan error, 1)
	group := make(chan error, 1)
	after := make(chan error, 1)
	root := func(ctx context.Context) error {
		err := Run(ctx, "a", func(ctx context.Context) error {
			nested <- Run(ctx, "a", idle)
			return idle(ctx)
		})
		if err != nil {
			return err
		}
		group <- RunGroup(ctx, map[string]Runnable{"b": idle, "a": idle})
		after <- Run(ctx, "b", idle) // free: the refused group took nothing
		return idle(ctx)
	}
	startTree(t, root)
	if err := <-nested; err != nil {
		t.Errorf("Run(\"a\") under root.a = %v, want nil", err)
	}
	if err := <-group; err == nil {
		t.Error("RunGroup(a, b) under root with a taken succeeded")
	}
	if err := <-after; err != nil {
		t.Errorf("Run(\"b\") after the refused group = %v, want nil", err)
	}
}

// TestNotRunnableContext checks what the API does with a context that is
// not a runnable's.
func TestNotRunnableContext(t *testing.T) {
	ctx := context.Background()
	if err := Run(ctx, "x", idle); !errors.Is(err, errNotRunnable) {
		t.Errorf("Run = %v, want %v", err, errNotRunnable)
	}
	if err := RunGroup(ctx, map[string]Runnable{"x": idle}); !errors.Is(err, errNotRunnable) {
		t.Errorf("RunGroup = %v, want %v", err, errNotRunnable)
	}
	for name, f := range map[string]func(){
		"Signal":    func() { Signal(ctx, SignalHealthy) },
		"Logger":    func() { Logger(ctx) },
		"RawLogger": func() { RawLogger(ctx) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		}()
	}
}

// TestNilRunnable checks that a nil runnable is refused.
func TestNilRunnable(t *testing.T) {
	result := make(chan error, 1)
	startTree(t, func(ctx context.Context) error {
		result <- Run(ctx, "nil", nil)
		return idle(ctx)
	})
	if err := <-result; err == nil {
		t.Error("Run with a nil runnable succeeded")
	}
}

// idle signals Healthy and waits for its context to end.
func idle(ctx context.Context) error {
	Signal(ctx, SignalHealthy)
	<-ctx.Done()
	return ctx.Err()
}
