package l2switch

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseProfile(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Profile
		str  string
	}{
		{
			in: "delay=50ms,jitter=20ms,loss=2%,dup=0.5%,reorder=0.5%,seed=42",
			want: Profile{Impairment: Impairment{
				Delay: 50 * time.Millisecond, Jitter: 20 * time.Millisecond,
				Loss: 0.02, Duplicate: 0.005, Reorder: 0.005,
			}, Seed: 42},
			str: "delay=50ms,jitter=20ms,loss=2%,dup=0.5%,reorder=0.5%,seed=42",
		},
		{in: "delay=0", want: Profile{}, str: "delay=0"},
		{in: " loss=0.1 , seed=7", want: Profile{Impairment: Impairment{Loss: 0.1}, Seed: 7}, str: "loss=10%,seed=7"},
		{in: "reorder=100%", want: Profile{Impairment: Impairment{Reorder: 1}}, str: "reorder=100%"},
		{in: "jitter=1.5ms", want: Profile{Impairment: Impairment{Jitter: 1500 * time.Microsecond}}, str: "jitter=1.5ms"},
	} {
		got, err := ParseProfile(tc.in)
		if err != nil {
			t.Errorf("ParseProfile(%q): %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParseProfile(%q) (-want +got):\n%s", tc.in, diff)
		}
		if s := got.String(); s != tc.str {
			t.Errorf("ParseProfile(%q).String() = %q, want %q", tc.in, s, tc.str)
		}
	}
}

func TestParseProfileErrors(t *testing.T) {
	for _, in := range []string{
		"",
		"  ",
		"delay",
		"delay=50",
		"delay=-5ms",
		"loss=2",
		"loss=101%",
		"loss=-1%",
		"loss=NaN",
		"dup=x",
		"seed=-1",
		"delay=1ms,delay=2ms",
		"bandwidth=1mbit",
		"delay=1ms,",
	} {
		if p, err := ParseProfile(in); err == nil {
			t.Errorf("ParseProfile(%q) = %v, want an error", in, p)
		}
	}
}

// FuzzParseProfile checks that whatever ParseProfile accepts is valid and
// that String writes it so that it reads back the same.
func FuzzParseProfile(f *testing.F) {
	for _, s := range []string{
		"delay=50ms,jitter=20ms,loss=2%,dup=0.5%,reorder=0.5%,seed=42",
		"delay=0",
		"loss=0.333333",
		"jitter=1h,seed=18446744073709551615",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseProfile(s)
		if err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("ParseProfile(%q) = %+v, which is not valid: %v", s, p, err)
		}
		again, err := ParseProfile(p.String())
		if err != nil {
			t.Fatalf("ParseProfile(%q) = %+v, whose String %q does not parse: %v", s, p, p.String(), err)
		}
		if again.String() != p.String() {
			t.Errorf("ParseProfile(%q).String() = %q, read back as %q", s, p.String(), again.String())
		}
	})
}
