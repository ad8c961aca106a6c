package ports

import "testing"

func TestWithDefaults(t *testing.T) {
	got := Table{Curator: 17833}.WithDefaults()
	want := Table{Curator: 17833, EtcdPeer: 7834, NodeManagement: 7835, KubernetesAPI: 6443, Kubelet: 10250, KubernetesAPIBalancer: 6444}
	if got != want {
		t.Errorf("Table{Curator: 17833}.WithDefaults() = %+v, want %+v", got, want)
	}
	if d := (Table{}).WithDefaults(); d != Default() {
		t.Errorf("Table{}.WithDefaults() = %+v, want Default() %+v", d, Default())
	}
}

func TestJoin(t *testing.T) {
	for _, tc := range []struct {
		host string
		port int
		want string
	}{
		{"10.42.0.10", 7833, "10.42.0.10:7833"},
		{"fd00::1", 7835, "[fd00::1]:7835"},
		{"[fd00::1]", 7835, "[fd00::1]:7835"},
		{"node0", 6443, "node0:6443"},
	} {
		if got := Join(tc.host, tc.port); got != tc.want {
			t.Errorf("Join(%q, %d) = %q, want %q", tc.host, tc.port, got, tc.want)
		}
	}
}
