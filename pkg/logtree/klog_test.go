package logtree

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseForeignLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		want LogEntry
	}{
		{"I1124 01:02:03.456789    1234 server.go:42] Serving securely on [::]:6443",
			LogEntry{Severity: INFO, File: "server.go", Line: 42, Message: "Serving securely on [::]:6443"}},
		{"W0101 00:00:00.000001 7 a_b.go:1] careful",
			LogEntry{Severity: WARNING, File: "a_b.go", Line: 1, Message: "careful"}},
		{"E1231 23:59:59.999999 123456789 x.go:9999] \"Failed\" err=\"boom\"",
			LogEntry{Severity: ERROR, File: "x.go", Line: 9999, Message: `"Failed" err="boom"`}},
		{"F1124 01:02:03.456789 1 main.go:3] dying",
			LogEntry{Severity: FATAL, File: "main.go", Line: 3, Message: "dying"}},
		// A header with a missing thread ID is not klog's.
		{"I1124 01:02:03.456789 main.go:3] no thread",
			LogEntry{Severity: INFO, Message: "I1124 01:02:03.456789 main.go:3] no thread", Raw: true}},
		{`time="2026-11-24T01:02:03.000000000Z" level=warning msg="slow \"disk\"" id=42 path="/a b"`,
			LogEntry{Severity: WARNING, Message: `slow "disk" id="42" path="/a b"`}},
		{`time="2026-11-24T01:02:03Z" level=info msg=started`,
			LogEntry{Severity: INFO, Message: "started"}},
		{`time="2026-11-24T01:02:03Z" level=error msg="unterminated`,
			LogEntry{Severity: INFO, Message: `time="2026-11-24T01:02:03Z" level=error msg="unterminated`, Raw: true}},
		{"goroutine 1 [running]:", LogEntry{Severity: INFO, Message: "goroutine 1 [running]:", Raw: true}},
		{`{"level":"warn","ts":"2026-11-24T01:47:10Z","logger":"etcd-client","caller":"v3@v3.7.0/retry_interceptor.go:68","msg":"retrying","attempt":0}`,
			LogEntry{Severity: WARNING, File: "retry_interceptor.go", Line: 68, Message: `retrying attempt=0 logger="etcd-client"`}},
		{`{"level":"warn", broken`, LogEntry{Severity: INFO, Message: `{"level":"warn", broken`, Raw: true}},
	} {
		if got := parseForeignLine(tc.line); got != tc.want {
			t.Errorf("parseForeignLine(%q) = %+v, want %+v", tc.line, got, tc.want)
		}
	}
}

func TestKlogFor(t *testing.T) {
	tree := New()
	w := tree.KlogFor("root.apiserver")
	long := strings.Repeat("x", MaxRawLine+10)
	fmt.Fprintf(w, "E1124 01:02:03.456789 1 a.go:1] broken\npanic: oops\n%s\n", long)
	w.Close()
	r, err := tree.Read("root.apiserver", WithBacklog(BacklogAll))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if len(r.Backlog) != 4 {
		t.Fatalf("got %d entries, want 4 (one leveled, three raw): %v", len(r.Backlog), r.Backlog)
	}
	if e := r.Backlog[0]; e.Severity != ERROR || e.Raw || e.File != "a.go" || e.Message != "broken" {
		t.Errorf("first entry = %+v, want the klog ERROR", e)
	}
	if e := r.Backlog[1]; !e.Raw || e.Message != "panic: oops" {
		t.Errorf("second entry = %+v, want the raw panic line", e)
	}
	if n := len(r.Backlog[2].Message) + len(r.Backlog[3].Message); n != len(long) {
		t.Errorf("the long line came out as %d bytes, want %d", n, len(long))
	}
}
