package nodemanagement

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/node/metrics"
	"cairn.dev/cairn/proto/api"
)

// GetMetrics implements NodeManagement.GetMetrics: what the metrics port
// serves, to the owner.
func (s *Service) GetMetrics(context.Context, *api.GetMetricsRequest) (*api.GetMetricsResponse, error) {
	if s.cfg.Metrics == nil {
		return nil, status.Error(codes.Unavailable, "this node gathers no metrics")
	}
	text, err := metrics.Text(s.cfg.Metrics)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &api.GetMetricsResponse{Text: text}, nil
}
