package evdev

import (
	"context"
	"encoding/binary"
	"errors"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// rawEvent lays out a struct input_event with longs of the given size.
func rawEvent(long int, sec, usec int64, typ, code uint16, value int32) []byte {
	b := make([]byte, 2*long+8)
	if long == 8 {
		binary.NativeEndian.PutUint64(b, uint64(sec))
		binary.NativeEndian.PutUint64(b[8:], uint64(usec))
	} else {
		binary.NativeEndian.PutUint32(b, uint32(sec))
		binary.NativeEndian.PutUint32(b[4:], uint32(usec))
	}
	binary.NativeEndian.PutUint16(b[2*long:], typ)
	binary.NativeEndian.PutUint16(b[2*long+2:], code)
	binary.NativeEndian.PutUint32(b[2*long+4:], uint32(value))
	return b
}

func TestParseEvent(t *testing.T) {
	for _, long := range []int{4, 8} {
		b := rawEvent(long, 12, 345678, EvKey, KeyPower, KeyPressed)
		got, err := parseEvent(b, long)
		if err != nil {
			t.Fatalf("parseEvent(%d-byte longs): %v", long, err)
		}
		want := Event{Time: 12*time.Second + 345678*time.Microsecond, Type: EvKey, Code: KeyPower, Value: KeyPressed}
		if got != want {
			t.Errorf("parseEvent(%d-byte longs) = %+v, want %+v", long, got, want)
		}
		if _, err := parseEvent(b[:len(b)-1], long); err == nil {
			t.Errorf("parseEvent(short, %d-byte longs) = nil error, want one", long)
		}
	}
	if EventSize != 2*bits.UintSize/8+8 || (bits.UintSize == 64 && EventSize != 24) {
		t.Errorf("EventSize = %d, want 24 on 64-bit machines", EventSize)
	}
}

func TestFindByName(t *testing.T) {
	dir := t.TempDir()
	for node, name := range map[string]string{
		"event0": "Power Button", "event1": "AT Translated Set 2 keyboard", "event2": "Power Button",
	} {
		if err := os.MkdirAll(filepath.Join(dir, node, "device"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, node, "device", "name"), []byte(name+"\n"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	// input0 is the device itself, not an event node.
	if err := os.MkdirAll(filepath.Join(dir, "input0"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := FindByName(dir, "Power Button")
	if err != nil {
		t.Fatalf("FindByName: %v", err)
	}
	if want := []string{"event0", "event2"}; !slices.Equal(got, want) {
		t.Errorf("FindByName(%q) = %q, want %q", "Power Button", got, want)
	}
	if _, err := FindByName(filepath.Join(dir, "missing"), "x"); err == nil {
		t.Errorf("FindByName(missing dir) = nil error, want one")
	}
}

func TestReadKeyPress(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	long := bits.UintSize / 8
	var events []byte
	for _, ev := range [][]byte{
		rawEvent(long, 1, 0, EvKey, 30, KeyPressed),        // another key
		rawEvent(long, 1, 1, EvKey, KeyPower, KeyReleased), // a release
		rawEvent(long, 1, 2, EvKey, KeyPower, KeyRepeated), // an autorepeat
		rawEvent(long, 1, 3, EvSyn, 0, 0),
		rawEvent(long, 1, 4, EvKey, KeyPower, KeyPressed), // this one
	} {
		events = append(events, ev...)
	}
	if _, err := w.Write(events); err != nil {
		t.Fatal(err)
	}
	d := pipeDevice(t, r)
	if err := d.WaitKeyPress(context.Background(), KeyPower); err != nil {
		t.Errorf("WaitKeyPress = %v, want nil", err)
	}
}

func pipeDevice(t *testing.T, r *os.File) *Device {
	t.Helper()
	d, err := newDevice("pipe", r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestReadKeyPressCancel(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	d := pipeDevice(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := d.WaitKeyPress(ctx, KeyPower); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitKeyPress after the deadline = %v, want %v", err, context.DeadlineExceeded)
	}
	// The device stays usable: a press queued meanwhile is seen next time.
	if _, err := w.Write(rawEvent(bits.UintSize/8, 1, 0, EvKey, KeyPower, KeyPressed)); err != nil {
		t.Fatal(err)
	}
	if err := d.WaitKeyPress(context.Background(), KeyPower); err != nil {
		t.Errorf("WaitKeyPress after a cancelled one = %v, want nil", err)
	}
}

func TestReadKeyPressPartialEvent(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(make([]byte, EventSize-1)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := pipeDevice(t, r).WaitKeyPress(context.Background(), KeyPower); err == nil {
		t.Errorf("WaitKeyPress(partial event) = nil, want an error")
	}
}

func FuzzParseEvent(f *testing.F) {
	f.Add(rawEvent(8, 1, 2, EvKey, KeyPower, KeyPressed))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, long := range []int{4, 8} {
			ev, err := parseEvent(b, long)
			if err != nil {
				continue
			}
			back := rawEvent(long, int64(ev.Time/time.Second), int64(ev.Time%time.Second/time.Microsecond), ev.Type, ev.Code, ev.Value)
			if ev.Type != binary.NativeEndian.Uint16(back[2*long:]) || len(b) < len(back) {
				t.Errorf("parseEvent(%x, %d) = %+v does not round-trip", b, long, ev)
			}
		}
	})
}
