package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"cairn.dev/cairn/pkg/logtree"
	"cairn.dev/cairn/proto/api"
)

// logsFlags are the options of `cairnctl logs`.
type logsFlags struct {
	follow      bool
	dn          string
	backlog     int
	minSeverity string
	boot        int
}

func newLogsCommand(a *app) *cobra.Command {
	var f logsFlags
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print a node's logs; -f keeps following them",
		Long: "logs prints the log entries of node ID (from its management port, 7835),\n" +
			"one line each as the node's console shows them. --dn selects a subtree of\n" +
			"the log tree (default: everything). With -f it keeps printing new entries\n" +
			"until interrupted; --timeout then bounds only the connection. --boot -1\n" +
			"prints the boot before the running one, -2 the one before that, and so on:\n" +
			"nodes keep the logs of their last 5 boots on their data partition.",
		Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkNodeID(args[0]); err != nil {
				return err
			}
			req, err := f.request()
			if err != nil {
				return err
			}
			return a.logs(cmd.Context(), args[0], req)
		},
	}
	cmd.Flags().BoolVarP(&f.follow, "follow", "f", false, "keep printing new entries")
	cmd.Flags().StringVar(&f.dn, "dn", "", "dotted name of the logger subtree to read, like root.cluster (default: all)")
	cmd.Flags().IntVar(&f.backlog, "backlog", -1, "how many past entries to print first; -1 for all")
	cmd.Flags().StringVar(&f.minSeverity, "min-severity", "info", "leave out entries below this severity: info, warning, error or fatal")
	cmd.Flags().IntVar(&f.boot, "boot", 0, "which boot to read: 0 the running one, -1 the one before, and so on")
	return cmd
}

// request builds the LogsRequest the flags ask for.
func (f *logsFlags) request() (*api.LogsRequest, error) {
	if f.backlog < -1 {
		return nil, fmt.Errorf("--backlog %d: want -1 (all) or more", f.backlog)
	}
	if f.boot > 0 || f.boot < -1<<20 {
		return nil, fmt.Errorf("--boot %d: want 0 (the running boot) or a past one (-1, -2, ...)", f.boot)
	}
	if f.boot < 0 && f.follow {
		return nil, fmt.Errorf("--boot %d with -f: a past boot cannot be followed", f.boot)
	}
	sev, err := logtree.ParseSeverity(f.minSeverity)
	if err != nil {
		return nil, fmt.Errorf("--min-severity: %w", err)
	}
	return &api.LogsRequest{
		Dn:              f.dn,
		WithChildren:    true,
		Backlog:         int32(min(f.backlog, 1<<30)),
		Follow:          f.follow,
		MinimumSeverity: api.LogSeverityOf(sev),
		Boot:            int32(f.boot),
	}, nil
}

func (a *app) logs(ctx context.Context, id string, req *api.LogsRequest) error {
	o, err := a.renewedOwner(ctx)
	if err != nil {
		return err
	}
	if !req.Follow {
		var cancel context.CancelFunc
		ctx, cancel = a.withTimeout(ctx)
		defer cancel()
	}
	lookup, cancel := a.withTimeout(ctx)
	defer cancel()
	return explainOwnerRefusal(o, a.nodeManagement(lookup, o, id, "reading the logs of node "+id, func(c api.NodeManagementClient) error {
		err := a.printLogs(ctx, c, req)
		if req.Follow && status.Code(err) == codes.Canceled && ctx.Err() != nil {
			// Interrupted while following: the normal way to stop.
			return nil
		}
		return err
	}))
}

// printLogs prints the entries of a Logs stream as they come.
func (a *app) printLogs(ctx context.Context, c api.NodeManagementClient, req *api.LogsRequest) error {
	stream, err := c.Logs(ctx, req)
	if err != nil {
		return err
	}
	for {
		res, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, e := range res.GetEntries() {
			a.printf("%s\n", logEntry(e).String())
		}
	}
}

// logEntry turns an entry of the API back into pkg/logtree's, whose
// String is the console's form.
func logEntry(e *api.LogEntry) *logtree.LogEntry {
	return &logtree.LogEntry{
		Time:     time.Unix(0, e.GetTimeUnixNanos()),
		DN:       logtree.DN(e.GetDn()),
		Severity: entrySeverity(e.GetSeverity()),
		File:     e.GetFile(),
		Line:     int(e.GetLine()),
		Message:  e.GetMessage(),
		Raw:      e.GetRaw(),
	}
}

// entrySeverity is the severity of a received entry; one the node sent but
// this cairnctl does not know is shown as INFO rather than dropped.
func entrySeverity(s api.LogSeverity) logtree.Severity {
	sev, err := api.LogtreeSeverity(s)
	if err != nil {
		return logtree.INFO
	}
	return sev
}
