package nodemanagement

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/logstore"
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
	if req.GetBoot() != 0 {
		return s.pastLogs(req, stream)
	}
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
		if err := b.add(api.LogEntryOf(e)); err != nil {
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
// A send that fails because the caller has gone is the end of the stream,
// not an error.
func follow(stream grpc.ServerStreamingServer[api.LogsResponse], ch <-chan *logtree.LogEntry, b *batcher) error {
	ctx := stream.Context()
	if err := followUntilError(ctx, ch, b); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

func followUntilError(ctx context.Context, ch <-chan *logtree.LogEntry, b *batcher) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-ch:
			if !ok {
				return nil
			}
			if err := b.add(api.LogEntryOf(e)); err != nil {
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
				if err := b.add(api.LogEntryOf(e)); err != nil {
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

// pastLogs answers Logs for a past boot from the store of kept logs,
// with the request's logger, severity and backlog applied as the log tree
// applies them to the running boot.
func (s *Service) pastLogs(req *api.LogsRequest, stream grpc.ServerStreamingServer[api.LogsResponse]) error {
	switch {
	case req.GetBoot() > 0:
		return status.Errorf(codes.InvalidArgument, "boot %d: want 0 (this boot) or a past one (-1, -2, ...)", req.GetBoot())
	case req.GetFollow():
		return status.Error(codes.InvalidArgument, "a past boot cannot be followed")
	case s.cfg.LogStore == nil:
		return status.Error(codes.Unavailable, "this node keeps no logs of past boots")
	}
	if _, err := readOptions(req); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	dn := logtree.DN(req.GetDn())
	if err := dn.Validate(); err != nil {
		return status.Errorf(codes.InvalidArgument, "reading logs of %q: %v", dn, err)
	}
	entries, err := s.cfg.LogStore.Read(int(req.GetBoot()))
	if errors.Is(err, logstore.ErrNoSuchBoot) {
		return status.Error(codes.NotFound, err.Error())
	}
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	var picked []*api.LogEntry
	for _, e := range entries {
		if e.GetSeverity() >= req.GetMinimumSeverity() && inSubtree(logtree.DN(e.GetDn()), dn, req.GetWithChildren()) {
			picked = append(picked, e)
		}
	}
	if n := int(req.GetBacklog()); n >= 0 && n < len(picked) {
		picked = picked[len(picked)-n:]
	}
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return fmt.Errorf("sending headers: %w", err)
	}
	b := batcher{stream: stream}
	for _, e := range picked {
		if err := b.add(e); err != nil {
			return err
		}
	}
	return b.flush()
}

// inSubtree reports whether an entry of logger dn is one a request for
// root (and, with children, the loggers below it) reads.
func inSubtree(dn, root logtree.DN, children bool) bool {
	switch {
	case dn == root:
		return true
	case !children:
		return false
	case root == "":
		return true
	}
	return strings.HasPrefix(string(dn), string(root)+".")
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

// add appends pe to the batch, sending the batch first if pe would not
// fit.
func (b *batcher) add(pe *api.LogEntry) error {
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
