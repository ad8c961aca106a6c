package kubernetes

import (
	"encoding/hex"
	"strings"
	"testing"
)

// Nodes as the apiserver stores them in etcd, encoded by Kubernetes' own
// protobuf serializer (k8s.io/apimachinery's runtime/serializer/protobuf,
// v0.37.2) from a v1.Node named cairn-0123456789abcdef with a label, a
// taint and an InternalIP.
const (
	// With spec.podCIDR and spec.podCIDRs 10.192.3.0/24.
	storedNodeWithRange = "6b3873000a0a0a02763112044e6f646512b5010a410a16636169726e2d3031323334353637383961626364656612001a0022002a003200380042005a190a106b756265726e657465732e696f2f6f7312056c696e757812370a0d31302e3139322e332e302f323412001a0020002a110a016b12001a0a4e6f5363686564756c653a0d31302e3139322e332e302f32341a371a002a170a0a496e7465726e616c4950120931302e302e322e313532040a0208003a140a0012001a0022002a0032003a0042004a0052001a002200"
	// With an empty spec.
	storedNodeWithoutRange = "6b3873000a0a0a02763112044e6f64651286010a410a16636169726e2d3031323334353637383961626364656612001a0022002a003200380042005a190a106b756265726e657465732e696f2f6f7312056c696e757812080a0012001a0020001a371a002a170a0a496e7465726e616c4950120931302e302e322e313532040a0208003a140a0012001a0022002a0032003a0042004a0052001a002200"
)

func TestStoredPodCIDR(t *testing.T) {
	decode := func(s string) []byte {
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	withRange := decode(storedNodeWithRange)
	for _, tc := range []struct {
		name    string
		stored  []byte
		want    string
		wantErr string
	}{
		{"with a range", withRange, "10.192.3.0/24", ""},
		{"without a range", decode(storedNodeWithoutRange), "", ""},
		{"JSON", []byte(`{"spec":{"podCIDR":"10.192.3.0/24"}}`), "", "not in the apiserver's protobuf storage format"},
		{"cut short", withRange[:60], "", "bad field"},
		{"magic alone", []byte("k8s\x00"), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := storedPodCIDR(tc.stored)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("storedPodCIDR = %q, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("storedPodCIDR = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
