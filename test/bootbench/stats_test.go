package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cairn.dev/cairn/test/launch"
)

func phases(total, init time.Duration) []launch.Phase {
	return []launch.Phase{{Name: "total", Duration: total}, {Name: "init", Duration: init}}
}

func TestSummarize(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name  string
		boots [][]launch.Phase
		want  []stat
	}{
		{"none", nil, nil},
		{
			"odd count",
			[][]launch.Phase{phases(3*s, 0), phases(1*s, 2*s), phases(2*s, 1*s)},
			[]stat{{"total", 1 * s, 2 * s, 3 * s}, {"init", 0, 1 * s, 2 * s}},
		},
		{
			"even count takes the middle two",
			[][]launch.Phase{phases(4*s, s), phases(1*s, s), phases(2*s, s), phases(3*s, s)},
			[]stat{{"total", 1 * s, 2500 * time.Millisecond, 4 * s}, {"init", s, s, s}},
		},
	} {
		got := summarize(tc.boots)
		if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(stat{})); diff != "" {
			t.Errorf("summarize(%s) (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestCostTable(t *testing.T) {
	s := time.Second
	cairn := []stat{{"total", 0, 12 * s, 0}, {"init", 0, 2 * s, 0}, {"only cairn", 0, s, 0}}
	null := []stat{{"total", 0, 8 * s, 0}, {"init", 0, 0, 0}}
	got := costTable("Cairn against null", "cairn", "null", cairn, null)
	for _, want := range []string{"Cairn against null", "cairn s", "null s", "1.50x", "+4.000", "+2.000"} {
		if !strings.Contains(got, want) {
			t.Errorf("costTable lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "only cairn") {
		t.Errorf("costTable shows a phase the null image lacks:\n%s", got)
	}
	if !strings.Contains(strings.Split(got, "\n")[3], "-") {
		t.Errorf("costTable gives a ratio over a zero floor:\n%s", got)
	}
}
