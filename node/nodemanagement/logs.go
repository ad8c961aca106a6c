package nodemanagement

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/proto/api"
)

// Batches of a Logs stream end at whichever limit comes first. gRPC clients
// refuse messages over 4 MiB by default; the byte bound keeps well below.
const (
	maxBatchEntries = 256
	maxBatchBytes   = 256 << 10
)

// Logs streams the entries a LogsRequest selects: the backlog, oldest first,
// then with follow every new entry until the caller cancels. Response
// headers are sent as soon as the reader is in place, so a caller that waits
// for them knows that everything logged afterwards will reach it.
func (s *Service) Logs(req *api.LogsRequest, stream grpc.ServerStreamingServer[api.LogsResponse]) error {
	if s.cfg.LogTree == nil {
		return status.Error(codes.Unavailable, "this node keeps no logs")
	}
	opts, err := readOptions(req)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	reader, err := s.cfg.LogTree.Read(logtree.DN(req.GetDn()), opts...)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "reading logs of %q: %v", req.GetDn(), err)
	}
	defer reader.Close()
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return fmt.Errorf("sending headers: %w", err)
	}

	b := batcher{stream: stream}
	for _, e := range reader.Backlog {
		if err := b.add(e); err != nil {
			return err
		}
	}
	if err := b.flush(); err != nil {
		return err
	}
	if !req.GetFollow() {
		return nil
	}
	return follow(stream, reader.Stream, &b)
}

// follow sends entries from ch as they come until the caller goes away.
// After each entry it takes whatever else is already waiting, up to a
// batch, so that bursts travel in few messages and single entries at once.
func follow(stream grpc.ServerStreamingServer[api.LogsResponse], ch <-chan *logtree.LogEntry, b *batcher) error {
	ctx := stream.Context()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-ch:
			if !ok {
				return nil
			}
			if err := b.add(e); err != nil {
				return err
			}
		}
	drain:
		for len(b.entries) > 0 {
			select {
			case e, ok := <-ch:
				if !ok {
					break drain
				}
				if err := b.add(e); err != nil {
					return err
				}
			default:
				break drain
			}
		}
		if err := b.flush(); err != nil {
			return err
		}
	}
}

// readOptions turns a request into logtree read options, or says what is
// wrong with it. The DN is checked by logtree.Read.
func readOptions(req *api.LogsRequest) ([]logtree.ReadOption, error) {
	if req.GetBacklog() < logtree.BacklogAll {
		return nil, fmt.Errorf("backlog %d: want -1 (all), 0 (none) or a count", req.GetBacklog())
	}
	sev, err := api.LogtreeSeverity(req.GetMinimumSeverity())
	if err != nil {
		return nil, fmt.Errorf("minimum severity: %w", err)
	}
	// A zero backlog is still asked for, so that Read accepts a request
	// that neither wants a backlog nor follows; it then sends nothing.
	opts := []logtree.ReadOption{
		logtree.WithBacklog(int(req.GetBacklog())),
		logtree.WithMinimumSeverity(sev),
	}
	if req.GetWithChildren() {
		opts = append(opts, logtree.WithChildren())
	}
	if req.GetFollow() {
		opts = append(opts, logtree.WithStream())
	}
	return opts, nil
}

// batcher collects entries into LogsResponse messages and sends one when
// it is full or flushed.
type batcher struct {
	stream  grpc.ServerStreamingServer[api.LogsResponse]
	entries []*api.LogEntry
	bytes   int
}

// add appends e to the batch, sending the batch first if e would not fit.
func (b *batcher) add(e *logtree.LogEntry) error {
	pe := entryToAPI(e)
	size := proto.Size(pe)
	if len(b.entries) > 0 && (len(b.entries) >= maxBatchEntries || b.bytes+size > maxBatchBytes) {
		if err := b.flush(); err != nil {
			return err
		}
	}
	b.entries = append(b.entries, pe)
	b.bytes += size
	return nil
}

// flush sends the batch, if it holds anything.
func (b *batcher) flush() error {
	if len(b.entries) == 0 {
		return nil
	}
	err := b.stream.Send(&api.LogsResponse{Entries: b.entries})
	b.entries, b.bytes = nil, 0
	if err != nil {
		return fmt.Errorf("sending log entries: %w", err)
	}
	return nil
}

// entryToAPI converts a log tree entry to its protobuf form.
func entryToAPI(e *logtree.LogEntry) *api.LogEntry {
	return &api.LogEntry{
		TimeUnixNanos: e.Time.UnixNano(),
		Dn:            string(e.DN),
		Severity:      api.LogSeverityOf(e.Severity),
		File:          e.File,
		Line:          int32(e.Line),
		Message:       e.Message,
		Raw:           e.Raw,
	}
}
