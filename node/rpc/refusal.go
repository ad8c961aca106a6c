package rpc

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errorDomain is the domain of the reasons Cairn's refusals carry in a
// google.rpc.ErrorInfo detail.
const errorDomain = "cairn.dev"

// ReasonDecommissioned marks the refusal of a node that was decommissioned:
// it can never enrol or join this cluster again, so asking again is
// pointless. The status code stays what the call answered before
// (FailedPrecondition); the reason tells it apart from the answers with
// that code which pass, such as "not approved yet".
const ReasonDecommissioned = "NODE_DECOMMISSIONED"

// Decommissioned is the status error with code c and the message of format
// and args with which a curator refuses a decommissioned node, carrying
// ReasonDecommissioned.
func Decommissioned(c codes.Code, format string, args ...any) error {
	st := status.Newf(c, format, args...)
	if withDetail, err := st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonDecommissioned, Domain: errorDomain}); err == nil {
		st = withDetail
	}
	return st.Err()
}

// IsDecommissioned says whether err, a call's error, is a curator's refusal
// of a decommissioned node (Decommissioned).
func IsDecommissioned(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == errorDomain && info.GetReason() == ReasonDecommissioned {
			return true
		}
	}
	return false
}
