// Package mountinfo parses /proc/self/mountinfo, the kernel's list of the
// mounts a process sees, in the order they were mounted. PID 1 reads it at
// shutdown to unmount everything, newest first.
//
// Each line is
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//	(1)(2)(3)   (4)   (5)      (6)      (7)   (8)(9)   (10)         (11)
//
// mount ID, parent ID, major:minor, root, mount point, mount options, zero
// or more optional fields ended by "-", filesystem type, source and
// superblock options. Paths escape space, tab, newline and backslash as
// octal ("\040").
package mountinfo

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// A Mount is one line of mountinfo.
type Mount struct {
	ID       int
	ParentID int
	// Major and Minor are the st_dev of files on the filesystem.
	Major, Minor uint32
	// Root is the directory of the filesystem mounted here ("/" unless a
	// bind mount of a subdirectory).
	Root       string
	MountPoint string
	// Options are the per-mount options ("rw,nosuid").
	Options string
	// Optional are the optional fields ("shared:1", "master:2").
	Optional     []string
	FSType       string
	Source       string
	SuperOptions string
}

// Read parses the mountinfo of the calling process.
func Read() ([]Mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("when reading mount table: %w", err)
	}
	defer f.Close()
	return Parse(f)
}

// Parse reads mountinfo lines from r.
func Parse(r io.Reader) ([]Mount, error) {
	var mounts []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		m, err := parseLine(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("mountinfo line %d: %w", n, err)
		}
		mounts = append(mounts, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("when reading mountinfo: %w", err)
	}
	return mounts, nil
}

func parseLine(line string) (Mount, error) {
	var m Mount
	f := strings.Fields(line)
	sep := -1
	for i := 6; i < len(f); i++ {
		if f[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 || len(f) < sep+3 {
		return m, fmt.Errorf("want at least 6 fields, \"-\" and 2 more, got %q", line)
	}
	var err error
	if m.ID, err = strconv.Atoi(f[0]); err != nil {
		return m, fmt.Errorf("mount ID: %w", err)
	}
	if m.ParentID, err = strconv.Atoi(f[1]); err != nil {
		return m, fmt.Errorf("parent ID: %w", err)
	}
	major, minor, ok := strings.Cut(f[2], ":")
	if !ok {
		return m, fmt.Errorf("want major:minor, got %q", f[2])
	}
	if m.Major, err = parseUint32(major); err != nil {
		return m, fmt.Errorf("major: %w", err)
	}
	if m.Minor, err = parseUint32(minor); err != nil {
		return m, fmt.Errorf("minor: %w", err)
	}
	m.Root = Unescape(f[3])
	m.MountPoint = Unescape(f[4])
	m.Options = f[5]
	m.Optional = append([]string(nil), f[6:sep]...)
	m.FSType = f[sep+1]
	m.Source = Unescape(f[sep+2])
	if len(f) > sep+3 {
		m.SuperOptions = f[sep+3]
	}
	return m, nil
}

func parseUint32(s string) (uint32, error) {
	v, err := strconv.ParseUint(s, 10, 32)
	return uint32(v), err
}

// Unescape undoes the kernel's octal escapes of mountinfo paths ("\040" is
// a space). A backslash not followed by three octal digits stays as it is.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			v := (s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0')
			b.WriteByte(v)
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return '0' <= c && c <= '7' }
