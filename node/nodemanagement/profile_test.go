package nodemanagement

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/proto/api"
)

// profileStrings unpacks a pprof profile far enough to read its string
// table's words: the sample types ("cpu", "inuse_space") and the function
// names are among them.
func profileStrings(t *testing.T, profile []byte) string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(profile))
	if err != nil {
		t.Fatalf("profile is not gzipped, as pprof's format is: %v", err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("when unpacking the profile: %v", err)
	}
	return string(raw)
}

// spin burns CPU in a function of its own name until ctx ends, for the
// CPU profile to find.
func spin(ctx context.Context) {
	for x := 0; ctx.Err() == nil; x++ {
		_ = x * x
	}
}

// TestGetProfile takes each kind of profile of the test's own process: a
// CPU profile that samples a busy function, and the snapshots, each in
// pprof's format with its sample types.
func TestGetProfile(t *testing.T) {
	s := New(Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go spin(ctx)

	res, err := s.GetProfile(context.Background(), &api.GetProfileRequest{Kind: api.ProfileKind_PROFILE_KIND_CPU, DurationSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Pid != int32(os.Getpid()) || res.Process == "" {
		t.Errorf("profiled pid %d (%q): want %d and its name", res.Pid, res.Process, os.Getpid())
	}
	words := profileStrings(t, res.Profile)
	for _, w := range []string{"cpu", "nanoseconds", "nodemanagement.spin"} {
		if !bytes.Contains([]byte(words), []byte(w)) {
			t.Errorf("CPU profile does not name %q", w)
		}
	}

	for kind, want := range map[api.ProfileKind]string{
		api.ProfileKind_PROFILE_KIND_HEAP:      "inuse_space",
		api.ProfileKind_PROFILE_KIND_ALLOCS:    "alloc_space",
		api.ProfileKind_PROFILE_KIND_GOROUTINE: "goroutine",
	} {
		res, err := s.GetProfile(context.Background(), &api.GetProfileRequest{Kind: kind})
		if err != nil {
			t.Errorf("%v: %v", kind, err)
			continue
		}
		if words := profileStrings(t, res.Profile); !bytes.Contains([]byte(words), []byte(want)) {
			t.Errorf("%v profile does not name %q", kind, want)
		}
	}
}

// TestGetProfileRefuses checks the requests GetProfile turns down: no
// kind, too long a CPU profile, a second CPU profile beside a running one,
// and a CPU profile whose caller gives up.
func TestGetProfileRefuses(t *testing.T) {
	s := New(Config{})
	for _, req := range []*api.GetProfileRequest{
		{},
		{Kind: api.ProfileKind(99)},
		{Kind: api.ProfileKind_PROFILE_KIND_CPU, DurationSeconds: 121},
	} {
		if _, err := s.GetProfile(context.Background(), req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("GetProfile(%v) = %v: want InvalidArgument", req, err)
		}
	}

	first := make(chan error, 1)
	go func() {
		_, err := s.GetProfile(context.Background(), &api.GetProfileRequest{Kind: api.ProfileKind_PROFILE_KIND_CPU, DurationSeconds: 2})
		first <- err
	}()
	time.Sleep(500 * time.Millisecond)
	if _, err := s.GetProfile(context.Background(), &api.GetProfileRequest{Kind: api.ProfileKind_PROFILE_KIND_CPU, DurationSeconds: 1}); status.Code(err) != codes.Aborted {
		t.Errorf("a second CPU profile beside the first = %v: want Aborted", err)
	}
	if err := <-first; err != nil {
		t.Errorf("the first CPU profile: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := s.GetProfile(ctx, &api.GetProfileRequest{Kind: api.ProfileKind_PROFILE_KIND_CPU, DurationSeconds: 10}); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a CPU profile whose caller gave up = %v: want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the cut-short CPU profile returned after %s: want at once", d)
	}
	// The runtime's profiler is free again.
	if _, err := s.GetProfile(context.Background(), &api.GetProfileRequest{Kind: api.ProfileKind_PROFILE_KIND_CPU, DurationSeconds: 1}); err != nil {
		t.Errorf("a CPU profile after one was cut short: %v", err)
	}
}
