// Package etcdprefix serves etcd's Watch API confined to a key prefix, by
// relaying every client stream to etcd on a stream of its own: requests
// get the prefix added to their keys and ranges, responses get it removed.
// Unlike etcd's own watch proxy, which merges watchers, it relays
// everything a stream carries, progress requests included, on which the
// Kubernetes apiserver's watch cache depends.
//
//	client stream ──create/cancel/progress, keys+prefix──▶ etcd stream
//	client stream ◀──events, keys−prefix (others dropped)── etcd stream
package etcdprefix

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// NewWatchServer returns a Watch service that relays to etcd through up,
// confined to prefix, which must not be empty.
func NewWatchServer(up pb.WatchClient, prefix string) (pb.WatchServer, error) {
	if prefix == "" {
		return nil, errors.New("an empty prefix confines nothing")
	}
	return &watchServer{up: up, prefix: []byte(prefix)}, nil
}

type watchServer struct {
	pb.UnimplementedWatchServer
	up     pb.WatchClient
	prefix []byte
}

// Watch relays one client stream until either side ends it.
func (s *watchServer) Watch(down pb.Watch_WatchServer) error {
	ctx, cancel := context.WithCancel(down.Context())
	defer cancel()
	up, err := s.up.Watch(ctx)
	if err != nil {
		return fmt.Errorf("when opening a watch stream to etcd: %w", err)
	}
	errc := make(chan error, 2)
	// Each direction blocks in its Recv; both end once this handler
	// returns, as both streams' contexts end with it.
	go func() { errc <- s.requests(down, up) }()
	go func() { errc <- s.responses(up, down) }()
	err = <-errc
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// requests relays the client's requests to etcd with keys under the
// prefix.
func (s *watchServer) requests(down pb.Watch_WatchServer, up pb.Watch_WatchClient) error {
	for {
		req, err := down.Recv()
		if err != nil {
			return err
		}
		if c := req.GetCreateRequest(); c != nil {
			c.Key, c.RangeEnd = s.interval(c.Key, c.RangeEnd)
		}
		if err := up.Send(req); err != nil {
			return fmt.Errorf("when relaying a watch request: %w", err)
		}
	}
}

// responses relays etcd's responses to the client with the prefix
// removed from every key.
func (s *watchServer) responses(up pb.Watch_WatchClient, down pb.Watch_WatchServer) error {
	for {
		res, err := up.Recv()
		if err != nil {
			return err
		}
		events := res.Events[:0]
		for _, ev := range res.Events {
			if !s.strip(ev.Kv) || !s.strip(ev.PrevKv) {
				// Not under the prefix: never for a watch made here.
				continue
			}
			events = append(events, ev)
		}
		res.Events = events
		if err := down.Send(res); err != nil {
			return err
		}
	}
}

// strip removes the prefix from kv's key; false when the key lacks it. A
// nil kv (no previous value) is fine.
func (s *watchServer) strip(kv *mvccpb.KeyValue) bool {
	if kv == nil {
		return true
	}
	if !bytes.HasPrefix(kv.Key, s.prefix) {
		return false
	}
	kv.Key = kv.Key[len(s.prefix):]
	return true
}

// interval maps the client's [key, end) into the prefix, with etcd's
// meanings of end: empty for the key alone, "\x00" for every key from key
// on, which inside the prefix ends where the prefix does.
func (s *watchServer) interval(key, end []byte) ([]byte, []byte) {
	k := append(bytes.Clone(s.prefix), key...)
	switch {
	case len(end) == 0:
		return k, nil
	case len(end) == 1 && end[0] == 0:
		return k, PrefixEnd(s.prefix)
	}
	return k, append(bytes.Clone(s.prefix), end...)
}

// PrefixEnd is the end of the range of every key that starts with p: p
// with its last byte below 0xff increased, and what follows cut.
func PrefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	// Every byte is 0xff: no key is greater, so "every key from here on".
	return []byte{0}
}
