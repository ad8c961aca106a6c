package mountinfo

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	in := `1 1 0:2 / / rw - rootfs rootfs rw
22 1 0:20 / /proc rw,nosuid,nodev,noexec,relatime shared:5 - proc proc rw
36 35 98:0 /mnt1 /mnt\040two rw,noatime master:1 shared:7 - ext3 /dev/root rw,errors=continue

40 22 0:33 / /proc/sys/fs/binfmt_misc rw - binfmt_misc binfmt_misc
`
	got, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := []Mount{
		{ID: 1, ParentID: 1, Major: 0, Minor: 2, Root: "/", MountPoint: "/", Options: "rw", FSType: "rootfs", Source: "rootfs", SuperOptions: "rw"},
		{ID: 22, ParentID: 1, Major: 0, Minor: 20, Root: "/", MountPoint: "/proc", Options: "rw,nosuid,nodev,noexec,relatime", Optional: []string{"shared:5"}, FSType: "proc", Source: "proc", SuperOptions: "rw"},
		{ID: 36, ParentID: 35, Major: 98, Minor: 0, Root: "/mnt1", MountPoint: "/mnt two", Options: "rw,noatime", Optional: []string{"master:1", "shared:7"}, FSType: "ext3", Source: "/dev/root", SuperOptions: "rw,errors=continue"},
		{ID: 40, ParentID: 22, Major: 0, Minor: 33, Root: "/", MountPoint: "/proc/sys/fs/binfmt_misc", Options: "rw", FSType: "binfmt_misc", Source: "binfmt_misc"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Parse mismatch (-want +got):\n%s", diff)
	}
}

func TestParseRejects(t *testing.T) {
	for _, in := range []string{
		"1 1 0:2 / / rw rootfs rootfs rw",   // no separator
		"x 1 0:2 / / rw - rootfs rootfs rw", // bad ID
		"1 1 02 / / rw - rootfs rootfs rw",  // bad device
		"1 1 0:2 / / rw - rootfs",           // too short after separator
		"1 1 0:99999999999 / / rw - a b rw", // minor out of range
	} {
		if _, err := Parse(strings.NewReader(in)); err == nil {
			t.Errorf("Parse(%q) = nil error, want one", in)
		}
	}
}

func TestUnescape(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`/a\040b`, "/a b"},
		{`\011\012\134`, "\t\n\\"},
		{`no\escape`, `no\escape`},
		{`end\04`, `end\04`},
		{`\`, `\`},
	} {
		if got := Unescape(tc.in); got != tc.want {
			t.Errorf("Unescape(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("22 1 0:20 / /proc rw,nosuid shared:5 - proc proc rw\n")
	f.Add("36 35 98:0 /mnt1 /mnt\\040two rw master:1 - ext3 /dev/root rw\n")
	f.Fuzz(func(t *testing.T, in string) {
		mounts, err := Parse(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, m := range mounts {
			if m.FSType == "" || m.MountPoint == "" {
				t.Errorf("Parse(%q) gave %+v, want a type and a mount point", in, m)
			}
		}
	})
}
