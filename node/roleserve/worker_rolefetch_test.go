package roleserve

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"cairn.dev/cairn/node/marker"
	api "cairn.dev/cairn/proto/api"
)

// FuzzParseRoles feeds parseRoles what a damaged or tampered roles.pb might
// hold: it must return roles or an error, never panic, and roles it
// accepts must survive being written back and read again.
func FuzzParseRoles(f *testing.F) {
	for _, r := range []*api.NodeRoles{
		{},
		{ConsensusMember: &api.NodeRoles_ConsensusMember{}},
		{
			ConsensusMember:      &api.NodeRoles_ConsensusMember{},
			KubernetesController: &api.NodeRoles_KubernetesController{},
			KubernetesWorker:     &api.NodeRoles_KubernetesWorker{},
		},
	} {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x0a})             // a field cut short
	f.Add([]byte{0x0a, 0x05, 0x01}) // a length past the end
	f.Add([]byte("not a protobuf message at all"))

	f.Fuzz(func(t *testing.T, b []byte) {
		roles, err := parseRoles(b)
		if err != nil {
			if roles != nil {
				t.Errorf("parseRoles(%x) = %v, %v: roles with an error", b, roles, err)
			}
			return
		}
		if roles == nil {
			t.Fatalf("parseRoles(%x) = nil, nil", b)
		}
		// Whatever the roles, their marker parses back to the same names.
		names := roleNames(roles)
		if m, ok := marker.Parse(marker.Format(marker.Roles, "roles", names)); !ok || m.Get("roles") != names {
			t.Errorf("the roles marker of %q parses as %+v, %v", names, m, ok)
		}
		again, err := proto.MarshalOptions{Deterministic: true}.Marshal(roles)
		if err != nil {
			t.Fatalf("marshalling roles parsed from %x: %v", b, err)
		}
		back, err := parseRoles(again)
		if err != nil {
			t.Fatalf("parseRoles(%x) of roles written back: %v", again, err)
		}
		if !proto.Equal(roles, back) {
			t.Errorf("roles parsed from %x changed when written back: %v, then %v", b, roles, back)
		}
	})
}
