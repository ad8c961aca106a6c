package launch

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// consoleAt builds console lines, each received at start plus its offset.
func consoleAt(start time.Time, lines ...struct {
	at   time.Duration
	text string
}) []Line {
	var out []Line
	for i, l := range lines {
		out = append(out, Line{Index: i, Time: start.Add(l.at), Text: l.text})
	}
	return out
}

type at = struct {
	at   time.Duration
	text string
}

func TestBootTimings(t *testing.T) {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	for _, tc := range []struct {
		name  string
		lines []Line
		from  int
		marks BootMarks
		want  Timings
	}{
		{
			// The kernel started at 9.0 s; its console came up at
			// 0.4 s of uptime and printed its backlog then.
			name: "cairn through OVMF",
			lines: consoleAt(start,
				at{3000 * ms, "BdsDxe: starting Boot0001"},
				at{9450 * ms, "[    0.000000] Linux version 6.1.0-28-amd64"},
				at{9450 * ms, "[    0.400000] printk: console [ttyS0] enabled"},
				at{11000 * ms, "[    1.900000] Run /init as init process"},
				at{11150 * ms, "[  2.100000] cairn: init started (kernel 6.1.0-28-amd64)"},
				at{11700 * ms, "[  2.600000] cairn: supervisor started"},
			),
			marks: CairnBoot,
			want: Timings{
				ToKernel:     9050 * ms,
				KernelToInit: 2100 * ms,
				InitToReady:  500 * ms,
				Total:        11700 * ms,
			},
		},
		{
			name: "null init without an uptime",
			lines: consoleAt(start,
				at{2500 * ms, "[    0.000000] Linux version 6.1.0-28-amd64"},
				at{3200 * ms, "[    1.000000] Run /init as init process"},
				at{3300 * ms, "null init: powering off"},
			),
			marks: NullBoot,
			want: Timings{
				ToKernel:     2200 * ms,
				KernelToInit: 1100 * ms,
				InitToReady:  0,
				Total:        3300 * ms,
			},
		},
		{
			name: "second boot after a reboot",
			lines: consoleAt(start,
				at{1000 * ms, "[    0.000000] Linux version 1"},
				at{1500 * ms, "[    0.500000] cairn: init started"},
				at{1600 * ms, "[    0.600000] cairn: supervisor started"},
				at{9000 * ms, "[    0.000000] Linux version 2"},
				at{9700 * ms, "[    0.700000] cairn: init started"},
				at{9900 * ms, "[    0.900000] cairn: supervisor started"},
			),
			from:  3,
			marks: CairnBoot,
			want: Timings{
				ToKernel:     9000 * ms,
				KernelToInit: 700 * ms,
				InitToReady:  200 * ms,
				Total:        9900 * ms,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := BootTimings(start, tc.lines, tc.from, tc.marks)
			if err != nil {
				t.Fatalf("BootTimings: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("BootTimings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBootTimingsMissingLines(t *testing.T) {
	start := time.Now()
	for _, tc := range []struct {
		name  string
		lines []Line
		want  string
	}{
		{"no kernel", consoleAt(start, at{0, "BdsDxe"}), "no kernel line"},
		{"no init", consoleAt(start, at{0, "Linux version"}), "no init line"},
		{"no ready", consoleAt(start, at{0, "Linux version"}, at{1, "cairn: init started"}), "no ready line"},
		{"ready before init", consoleAt(start, at{0, "Linux version"}, at{1, "cairn: supervisor started"}, at{2, "cairn: init started"}), "no ready line"},
	} {
		_, err := BootTimings(start, tc.lines, 0, CairnBoot)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("BootTimings(%s) = %v, want error containing %q", tc.name, err, tc.want)
		}
	}
}

func TestPhases(t *testing.T) {
	p := Timings{ToKernel: 1, KernelToInit: 2, InitToReady: 3, Total: 6}.Phases()
	if len(p) != len(PhaseNames) {
		t.Fatalf("Phases() has %d entries, want %d", len(p), len(PhaseNames))
	}
	for i, want := range []time.Duration{1, 2, 3, 6} {
		if p[i].Duration != want || p[i].Name != PhaseNames[i] {
			t.Errorf("Phases()[%d] = %v, want %s %v", i, p[i], PhaseNames[i], want)
		}
	}
}
