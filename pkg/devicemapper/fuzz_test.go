package devicemapper

import (
	"testing"
)

// FuzzParseReply feeds arbitrary reply buffers to every parser of kernel
// output: the header, the status/table payload and the device list. None
// may panic or loop; whatever parses must stay inside the buffer.
func FuzzParseReply(f *testing.F) {
	f.Add(statusReply([]Target{{Length: 8, Type: "crypt", Params: "aes-xts-plain64 00 0 8:1 0"}}))
	f.Add(statusReply(nil))
	f.Add(append(make([]byte, 312), append(nameRecord(1, "a", false, 0), nameRecord(2, "b", true, 0)...)...))
	f.Add(make([]byte, 311))
	f.Fuzz(func(t *testing.T, buf []byte) {
		h, err := unmarshalHeader(buf)
		if err != nil {
			return
		}
		data, err := h.payload(buf)
		if err != nil {
			return
		}
		if targets, err := parseTargets(data, h.TargetCount); err == nil {
			if len(targets) != int(h.TargetCount) {
				t.Errorf("parseTargets returned %d targets for a count of %d", len(targets), h.TargetCount)
			}
			for _, tg := range targets {
				if len(tg.Params) > len(data) {
					t.Errorf("target params of %d bytes from a payload of %d", len(tg.Params), len(data))
				}
			}
		}
		if devs, err := parseNameList(data); err == nil && len(devs) > len(data)/13+1 {
			t.Errorf("parseNameList found %d devices in %d bytes", len(devs), len(data))
		}
	})
}
