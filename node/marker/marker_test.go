package marker

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFormatParse(t *testing.T) {
	for _, tc := range []struct {
		name Name
		kv   []string
		want string
	}{
		{CuratorLeading, nil, "@cairn-mark curator-leading"},
		{CuratorServing, []string{"addr", "10.42.0.10:7833"}, "@cairn-mark curator-serving addr=10.42.0.10:7833"},
		{Joined, []string{"node", "cairn-0011", "via", "cold-start"}, "@cairn-mark joined node=cairn-0011 via=cold-start"},
		{Refused, []string{"reason", `ticket "x" is wrong`}, `@cairn-mark refused reason="ticket \"x\" is wrong"`},
		{Roles, []string{"roles", ""}, `@cairn-mark roles roles=""`},
		{Roles, []string{"lone"}, `@cairn-mark roles lone=""`},
		{Refused, []string{"reason", "a=b\nc"}, `@cairn-mark refused reason="a=b\nc"`},
	} {
		got := Format(tc.name, tc.kv...)
		if got != tc.want {
			t.Errorf("Format(%q, %q) = %q, want %q", tc.name, tc.kv, got, tc.want)
		}
		// Parsed back from a console line, it gives the same fields.
		line := "I1123 18:55:00.123456 root.enrolment join.go:12] " + got + "\r\n"
		m, ok := Parse(line)
		if !ok {
			t.Fatalf("Parse(%q) found no marker", line)
		}
		want := Marker{Name: tc.name, Fields: map[string]string{}}
		for i := 0; i < len(tc.kv); i += 2 {
			want.Fields[tc.kv[i]] = ""
			if i+1 < len(tc.kv) {
				want.Fields[tc.kv[i]] = tc.kv[i+1]
			}
		}
		if diff := cmp.Diff(want, m); diff != "" {
			t.Errorf("Parse(%q) differs (-want +got):\n%s", line, diff)
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, line := range []string{
		"",
		"I1123 roleserve: curator serving on 10.42.0.10:7833",
		"@cairn-mark ",
		"@cairn-mark roles novalue",
		`@cairn-mark refused reason="unterminated`,
		"@cairn-mark roles =empty-key",
	} {
		if m, ok := Parse(line); ok {
			t.Errorf("Parse(%q) = %+v, want no marker", line, m)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(Format(Joined, "node", "cairn-00", "via", "curator"))
	f.Add(`@cairn-mark refused reason="x y"`)
	f.Fuzz(func(t *testing.T, line string) {
		m, ok := Parse(line)
		if !ok {
			return
		}
		var kv []string
		for k, v := range m.Fields {
			kv = append(kv, k, v)
		}
		again, ok := Parse(Format(m.Name, kv...))
		if !ok || again.Name != m.Name || !cmp.Equal(again.Fields, m.Fields) {
			t.Errorf("Parse(Format(Parse(%q))) = %+v, %v; want %+v", line, again, ok, m)
		}
	})
}

func TestIs(t *testing.T) {
	m, ok := Parse(Format(Joined, "node", "cairn-00", "via", "curator"))
	if !ok {
		t.Fatal("Parse failed")
	}
	for _, tc := range []struct {
		name Name
		kv   []string
		want bool
	}{
		{Joined, nil, true},
		{Joined, []string{"node", "cairn-00"}, true},
		{Joined, []string{"node", "cairn-00", "via", "curator"}, true},
		{Joined, []string{"via", "cold-start"}, false},
		{Joined, []string{"absent", ""}, false},
		{Committed, nil, false},
	} {
		if got := m.Is(tc.name, tc.kv...); got != tc.want {
			t.Errorf("%v.Is(%q, %q) = %v, want %v", m, tc.name, tc.kv, got, tc.want)
		}
	}
}
