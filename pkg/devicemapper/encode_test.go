package devicemapper

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The expected layouts below are written out from linux/dm-ioctl.h field by
// field, with literal offsets, rather than from this package's constants:
//
//	struct dm_ioctl {                 offset size
//	    __u32 version[3];                  0   12
//	    __u32 data_size;                  12    4
//	    __u32 data_start;                 16    4
//	    __u32 target_count;               20    4
//	    __s32 open_count;                 24    4
//	    __u32 flags;                      28    4
//	    __u32 event_nr;                   32    4
//	    __u32 padding;                    36    4
//	    __u64 dev;                        40    8
//	    char  name[128];                  48  128
//	    char  uuid[129];                 176  129
//	    char  data[7];                   305    7
//	};                                        312
//
//	struct dm_target_spec {
//	    __u64 sector_start;                0    8
//	    __u64 length;                      8    8
//	    __s32 status;                     16    4
//	    __u32 next;                       20    4
//	    char  target_type[16];            24   16
//	};                                         40

func TestHeaderLayout(t *testing.T) {
	h := header{
		Version:     [3]uint32{4, 48, 1},
		DataSize:    16384,
		DataStart:   312,
		TargetCount: 2,
		OpenCount:   -3,
		Flags:       flagSecureData | flagSuspend,
		EventNr:     7,
		Dev:         0xfd00_0002,
		Name:        "data",
		UUID:        "CAIRN-data",
	}
	got := make([]byte, 312)
	if err := h.marshal(got); err != nil {
		t.Fatalf("marshal: %v", err)
	}
	want := make([]byte, 312)
	le := binary.LittleEndian
	le.PutUint32(want[0:], 4)
	le.PutUint32(want[4:], 48)
	le.PutUint32(want[8:], 1)
	le.PutUint32(want[12:], 16384)
	le.PutUint32(want[16:], 312)
	le.PutUint32(want[20:], 2)
	copy(want[24:], []byte{0xfd, 0xff, 0xff, 0xff}) // -3
	le.PutUint32(want[28:], 1<<15|1<<1)
	le.PutUint32(want[32:], 7)
	le.PutUint64(want[40:], 0xfd00_0002)
	copy(want[48:], "data")
	copy(want[176:], "CAIRN-data")
	if !bytes.Equal(got, want) {
		t.Errorf("marshal(%+v) =\n%s\nwant\n%s", h, hex.Dump(got), hex.Dump(want))
	}
	back, err := unmarshalHeader(got)
	if err != nil {
		t.Fatalf("unmarshalHeader: %v", err)
	}
	if diff := cmp.Diff(h, back); diff != "" {
		t.Errorf("unmarshalHeader(marshal(h)) differs (-want +got):\n%s", diff)
	}
}

func TestHeaderLimits(t *testing.T) {
	buf := make([]byte, 312)
	for _, h := range []header{
		{Name: strings.Repeat("n", 128)},
		{UUID: strings.Repeat("u", 129)},
		{Name: "a\x00b"},
	} {
		if err := h.marshal(buf); err == nil {
			t.Errorf("marshal(name %d bytes, uuid %d bytes) succeeded, want an error", len(h.Name), len(h.UUID))
		}
	}
	longest := header{Name: strings.Repeat("n", 127), UUID: strings.Repeat("u", 128)}
	if err := longest.marshal(buf); err != nil {
		t.Errorf("marshal(longest allowed name and uuid) = %v, want nil", err)
	}
	if buf[48+127] != 0 || buf[176+128] != 0 {
		t.Errorf("longest name or uuid is not NUL-terminated")
	}
	if err := longest.marshal(make([]byte, 311)); err == nil {
		t.Errorf("marshal into 311 bytes succeeded, want an error")
	}
}

func TestTargetLayout(t *testing.T) {
	targets := []Target{
		{Start: 0, Length: 2048, Type: "linear", Params: "8:1 0"},                 // 40+6 -> 48
		{Start: 2048, Length: 100, Type: "zero", Params: strings.Repeat("x", 15)}, // 40+16 -> 56
		{Start: 2148, Length: 1, Type: "error", Params: ""},                       // 40+1 -> 48
	}
	got, err := encodeTargets(targets)
	if err != nil {
		t.Fatalf("encodeTargets: %v", err)
	}
	var want []byte
	spec := func(start, length uint64, next uint32, typ, params string, size int) {
		rec := make([]byte, size)
		binary.LittleEndian.PutUint64(rec[0:], start)
		binary.LittleEndian.PutUint64(rec[8:], length)
		binary.LittleEndian.PutUint32(rec[20:], next)
		copy(rec[24:40], typ)
		copy(rec[40:], params)
		want = append(want, rec...)
	}
	spec(0, 2048, 48, "linear", "8:1 0", 48)
	spec(2048, 100, 56, "zero", strings.Repeat("x", 15), 56)
	spec(2148, 1, 48, "error", "", 48)
	if !bytes.Equal(got, want) {
		t.Errorf("encodeTargets =\n%s\nwant\n%s", hex.Dump(got), hex.Dump(want))
	}
	for i := 0; i < len(got); {
		if i%8 != 0 {
			t.Errorf("a target spec starts at %d, not 8-aligned", i)
		}
		i += int(binary.LittleEndian.Uint32(got[i+20:]))
	}
}

func TestTargetErrors(t *testing.T) {
	for _, tt := range []Target{
		{Type: "", Params: "x"},
		{Type: strings.Repeat("t", 16)},
		{Type: "linear", Params: "8:1\x000"},
	} {
		if _, err := encodeTargets([]Target{tt}); err == nil {
			t.Errorf("encodeTargets(%+v) succeeded, want an error", tt)
		}
	}
}

func TestCryptTable(t *testing.T) {
	key := make([]byte, CryptKeySize)
	for i := range key {
		key[i] = byte(i)
	}
	rec, err := Crypt{Device: "/dev/vda2", Offset: 2048, Sectors: 1 << 20, Key: key}.cryptSpec()
	if err != nil {
		t.Fatalf("cryptSpec: %v", err)
	}
	targets, err := parseTargets(rec, 1)
	if err != nil {
		t.Fatalf("parseTargets(cryptSpec): %v", err)
	}
	want := []Target{{
		Start: 0, Length: 1 << 20, Type: "crypt",
		Params: "aes-xts-plain64 " + hex.EncodeToString(key) + " 0 /dev/vda2 2048 1 allow_discards",
	}}
	if diff := cmp.Diff(want, targets); diff != "" {
		t.Errorf("crypt table differs (-want +got):\n%s", diff)
	}
	for _, c := range []Crypt{
		{Device: "/dev/vda2", Sectors: 1, Key: key[:32]},
		{Device: "/dev/vda2", Sectors: 0, Key: key},
		{Device: "", Sectors: 1, Key: key},
	} {
		if _, err := c.cryptSpec(); err == nil {
			t.Errorf("cryptSpec(device %q, %d sectors, %d-byte key) succeeded, want an error",
				c.Device, c.Sectors, len(c.Key))
		} else if strings.Contains(err.Error(), hex.EncodeToString(key[:8])) {
			t.Errorf("cryptSpec error %q shows the key", err)
		}
	}
}

// statusReply builds a DM_TABLE_STATUS reply as the kernel does: next is
// measured from the start of the payload.
func statusReply(targets []Target) []byte {
	var data []byte
	for _, t := range targets {
		rec := make([]byte, align8(40+len(t.Params)+1))
		binary.LittleEndian.PutUint64(rec[0:], t.Start)
		binary.LittleEndian.PutUint64(rec[8:], t.Length)
		copy(rec[24:40], t.Type)
		copy(rec[40:], t.Params)
		binary.LittleEndian.PutUint32(rec[20:], uint32(len(data)+len(rec)))
		data = append(data, rec...)
	}
	buf := make([]byte, 312+len(data)+64)
	h := header{Version: [3]uint32{4, 48, 0}, DataStart: 312, DataSize: uint32(312 + len(data)), TargetCount: uint32(len(targets))}
	if err := h.marshal(buf); err != nil {
		panic(err)
	}
	copy(buf[312:], data)
	return buf
}

func parseStatusReply(buf []byte) ([]Target, error) {
	h, err := unmarshalHeader(buf)
	if err != nil {
		return nil, err
	}
	data, err := h.payload(buf)
	if err != nil {
		return nil, err
	}
	return parseTargets(data, h.TargetCount)
}

func TestParseStatus(t *testing.T) {
	want := []Target{
		{Start: 0, Length: 1000, Type: "crypt", Params: ""},
		{Start: 1000, Length: 24, Type: "linear", Params: "253:0 17"},
	}
	got, err := parseStatusReply(statusReply(want))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parsed status differs (-want +got):\n%s", diff)
	}

	bad := statusReply(want)
	binary.LittleEndian.PutUint32(bad[312+20:], 4) // first spec's next points backwards
	if _, err := parseStatusReply(bad); !errors.Is(err, ErrMalformed) {
		t.Errorf("parse(next pointing backwards) = %v, want ErrMalformed", err)
	}
	short := statusReply(want)
	binary.LittleEndian.PutUint32(short[12:], 312+30) // data_size cuts the first spec
	if _, err := parseStatusReply(short); !errors.Is(err, ErrMalformed) {
		t.Errorf("parse(truncated) = %v, want ErrMalformed", err)
	}
}

func nameRecord(dev uint64, name string, last bool, extra int) []byte {
	rec := make([]byte, align8(12+len(name)+1)+extra)
	binary.LittleEndian.PutUint64(rec[0:], dev)
	if !last {
		binary.LittleEndian.PutUint32(rec[8:], uint32(len(rec)))
	}
	copy(rec[12:], name)
	return rec
}

func TestParseNameList(t *testing.T) {
	data := append(nameRecord(0xfd00, "data", false, 16), nameRecord(0xfd01, "other-volume", true, 0)...)
	got, err := parseNameList(data)
	if err != nil {
		t.Fatalf("parseNameList: %v", err)
	}
	want := []Device{{Name: "data", Dev: 0xfd00}, {Name: "other-volume", Dev: 0xfd01}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseNameList differs (-want +got):\n%s", diff)
	}
	if got, err := parseNameList(make([]byte, 16)); err != nil || len(got) != 0 {
		t.Errorf("parseNameList(no devices) = %v, %v, want none", got, err)
	}
	loop := nameRecord(0xfd00, "data", false, 0)
	binary.LittleEndian.PutUint32(loop[8:], 4)
	if _, err := parseNameList(loop); !errors.Is(err, ErrMalformed) {
		t.Errorf("parseNameList(next inside the record) = %v, want ErrMalformed", err)
	}
	unterminated := nameRecord(0xfd00, "", true, 0)
	for i := 12; i < len(unterminated); i++ {
		unterminated[i] = 'x'
	}
	if _, err := parseNameList(unterminated); !errors.Is(err, ErrMalformed) {
		t.Errorf("parseNameList(unterminated name) = %v, want ErrMalformed", err)
	}
}
