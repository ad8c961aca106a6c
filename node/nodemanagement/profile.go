package nodemanagement

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/proto/api"
)

// A CPU profile samples for defaultProfileDuration unless the request
// says otherwise, and for at most maxProfileDuration.
const (
	defaultProfileDuration = 30 * time.Second
	maxProfileDuration     = 120 * time.Second
)

// snapshotProfiles are the runtime/pprof profiles of the kinds that are a
// snapshot rather than sampled over time.
var snapshotProfiles = map[api.ProfileKind]string{
	api.ProfileKind_PROFILE_KIND_HEAP:      "heap",
	api.ProfileKind_PROFILE_KIND_ALLOCS:    "allocs",
	api.ProfileKind_PROFILE_KIND_GOROUTINE: "goroutine",
}

// GetProfile implements NodeManagement.GetProfile: this process's profile,
// in pprof's format.
func (s *Service) GetProfile(ctx context.Context, req *api.GetProfileRequest) (*api.GetProfileResponse, error) {
	var buf bytes.Buffer
	kind := req.GetKind()
	if kind == api.ProfileKind_PROFILE_KIND_CPU {
		d := defaultProfileDuration
		if n := req.GetDurationSeconds(); n != 0 {
			d = time.Duration(n) * time.Second
		}
		if d > maxProfileDuration {
			return nil, status.Errorf(codes.InvalidArgument, "a CPU profile of %s: at most %s", d, maxProfileDuration)
		}
		if err := profileCPU(ctx, &buf, d); err != nil {
			return nil, err
		}
	} else {
		name, ok := snapshotProfiles[kind]
		if !ok {
			return nil, status.Errorf(codes.InvalidArgument, "profile kind %v: want CPU, HEAP, ALLOCS or GOROUTINE", kind)
		}
		if err := pprof.Lookup(name).WriteTo(&buf, 0); err != nil {
			return nil, status.Errorf(codes.Internal, "when writing the %s profile: %v", name, err)
		}
	}
	s.logger().Infof("Sent the owner a %s profile of this process (%d bytes)", strings.ToLower(strings.TrimPrefix(kind.String(), "PROFILE_KIND_")), buf.Len())
	return &api.GetProfileResponse{Profile: buf.Bytes(), Pid: int32(os.Getpid()), Process: processName()}, nil
}

// profileCPU samples this process's CPU use into w for d, or until ctx
// ends. The runtime takes one CPU profile at a time.
func profileCPU(ctx context.Context, w *bytes.Buffer, d time.Duration) error {
	if err := pprof.StartCPUProfile(w); err != nil {
		return status.Errorf(codes.Aborted, "cannot start a CPU profile, most likely because another is being taken: %v", err)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		pprof.StopCPUProfile()
		return nil
	case <-ctx.Done():
		pprof.StopCPUProfile()
		return status.FromContextError(fmt.Errorf("the CPU profile was cut short: %w", ctx.Err())).Err()
	}
}

// processName is this process's name, as the kernel keeps it.
func processName() string {
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(comm))
}
