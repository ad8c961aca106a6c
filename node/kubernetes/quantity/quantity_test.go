package quantity

import "testing"

// TestParseBytes reads the quantities a claim's request may hold, and
// refuses what is not one.
func TestParseBytes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
	}{
		{"0", 0},
		{"1024", 1024},
		{"64Mi", 64 << 20},
		{"16Mi", 16 << 20},
		{"1Ti", 1 << 40},
		{"1.5Gi", 3 << 29},
		{"1G", 1e9},
		{"500M", 500e6},
		{"129e6", 129e6},
		{"1.5", 2},
		{".5k", 500},
		{"1e-3", 1},
		{"3Ei", 3 << 60},
	} {
		got, err := ParseBytes(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "Mi", "-1", "1 Mi", "1mi", "1Yi", "1e99", "8Ei", "0x10", "1..2"} {
		if got, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) = %d, want an error", in, got)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[uint64]string{
		0:             "0",
		1:             "1",
		1000:          "1000",
		1024:          "1Ki",
		1536:          "1536",
		64 << 20:      "64Mi",
		3 << 30:       "3Gi",
		1<<30 + 1<<20: "1025Mi",
		(1 << 62) - 1: "4611686018427387903",
		1 << 62:       "4Ei",
	} {
		got := FormatBytes(n)
		if got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
		if back, err := ParseBytes(got); err != nil || back != n {
			t.Errorf("ParseBytes(%q) = %d, %v, want %d", got, back, err, n)
		}
	}
}
