package watchdog

import (
	"os"
	"path/filepath"
	"testing"
)

func TestKeptThroughReboot(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		value string // "" for no such file: the core is not loaded
		want  bool
	}{
		{"0\n", true},
		{"-1\n", false}, // each driver's own choice: i6300esb's is to stop
		{"1\n", false},
		{"", false},
	} {
		param := filepath.Join(dir, "missing")
		if tc.value != "" {
			param = filepath.Join(dir, "stop_on_reboot")
			if err := os.WriteFile(param, []byte(tc.value), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if got := keptThroughReboot(param); got != tc.want {
			t.Errorf("keptThroughReboot(stop_on_reboot %q) = %v, want %v", tc.value, got, tc.want)
		}
	}
}
