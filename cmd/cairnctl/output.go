package main

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"cairn.dev/cairn/proto/api"
)

// nodeView is a node as cairnctl prints it, in JSON with these field
// names: a stable shape for scripts, independent of the protobuf's.
type nodeView struct {
	// ID is the node ID, "cairn-" and 16 hex digits.
	ID string `json:"id"`
	// PublicKey is the node's ed25519 public key in hex.
	PublicKey string `json:"public_key"`
	// State is NEW, STANDBY, UP, DECOMMISSIONED or UNKNOWN.
	State string `json:"state"`
	// Roles are the role names (ConsensusMember, KubernetesController,
	// KubernetesWorker); never null.
	Roles []string `json:"roles"`
	// Address is the node's reported external address, "" if none.
	Address string `json:"address"`
	// CuratorPort is the port of the curator the node runs, 0 if none.
	CuratorPort int32 `json:"curator_port"`
	// Version is the Cairn version the node reports.
	Version string `json:"version"`
	// SystemSlot is the system slot the node reports it booted, "a" or
	// "b"; "" if it reports none.
	SystemSlot string `json:"system_slot"`
	// StatusTime is when the node wrote its status, null if never.
	StatusTime *time.Time `json:"status_time"`
	// Health is HEALTHY, HEARTBEAT_TIMEOUT or UNKNOWN for an UP node (see
	// healthName), "" for any other.
	Health string `json:"health"`
	// LastHeartbeat is when a curator leader last heard from the node,
	// null if none ever did.
	LastHeartbeat *time.Time `json:"last_heartbeat"`
	// Clock is the node's clock as the node reports it, null if it
	// reports none.
	Clock *clockView `json:"clock"`
	// PodTunnel is what the node published for the pod tunnel, null if
	// it published nothing.
	PodTunnel *podTunnelView `json:"pod_tunnel"`
	// SecureBoot says whether the node reports that its firmware booted
	// it under Secure Boot, null if it reports nothing of it.
	SecureBoot *bool `json:"secure_boot"`
	// PCR11 is the SHA-256 PCR 11 the node read from its TPM when it
	// started, hex: what the stub measured of the UKI the firmware
	// booted; "" if it reports none.
	PCR11 string `json:"pcr11"`
	// Seal is how the node keeps its sealed configuration, as it said
	// when it committed: "tpm" (with its TPM, not bound to what it
	// boots), "tpm-bound" (with its TPM, bound to releases signed by
	// PCRKey and to PCR 7, as its status says) or "plain" (on its ESP);
	// "" for a node that never committed.
	Seal string `json:"seal"`
	// PCRKey is the SHA-256 of the release PCR key the node binds its
	// seals to, hex; "" when it binds none.
	PCRKey string `json:"pcr_key,omitempty"`
	// Slots are the node's system slots, from its management port
	// (node describe only); SlotsError says why they are missing.
	Slots      []slotView `json:"slots,omitempty"`
	SlotsError string     `json:"slots_error,omitempty"`
}

// podTunnelView is what a node published for the pod tunnel.
type podTunnelView struct {
	// PublicKey is its WireGuard public key, base64 as WireGuard's tools
	// print it.
	PublicKey string `json:"public_key"`
	// PodRange is its pod range, "" for a controller that is no worker.
	PodRange string `json:"pod_range"`
}

func newPodTunnelView(pn *api.PodNetwork) *podTunnelView {
	if pn == nil {
		return nil
	}
	return &podTunnelView{PublicKey: base64.StdEncoding.EncodeToString(pn.GetWireguardPublicKey()), PodRange: pn.GetPodRange()}
}

// podTunnelLine describes what a node published for the pod tunnel.
func podTunnelLine(v *podTunnelView) string {
	switch {
	case v == nil:
		return "-"
	case v.PodRange == "":
		return "key " + v.PublicKey + ", no pod range (a controller)"
	}
	return "key " + v.PublicKey + ", pod range " + v.PodRange
}

// clockView is a node's clock as the node reports it.
type clockView struct {
	// State is UNSYNCHRONIZED, SYNCHRONIZED or KNOWN_WRONG (see
	// clockStateName).
	State string `json:"state"`
	// Server is the NTP server of the node's last good answer, "" if
	// none.
	Server string `json:"server"`
	// OffsetNanos is how far that answer found the node's clock behind
	// the server's (negative: ahead), before the node corrected it.
	OffsetNanos int64 `json:"offset_nanos"`
	// LastSync is when that answer came, by the node's clock, null if
	// never.
	LastSync *time.Time `json:"last_sync"`
	// Reason says why the clock is KNOWN_WRONG, "" otherwise.
	Reason string `json:"reason"`
}

func newClockView(c *api.ClockStatus) *clockView {
	if c == nil {
		return nil
	}
	return &clockView{
		State:       clockStateName(c.GetState()),
		Server:      c.GetServer(),
		OffsetNanos: c.GetOffsetNanos(),
		LastSync:    unixNanos(c.GetLastSyncUnixNanos()),
		Reason:      c.GetReason(),
	}
}

// clockStateName is a ClockState without its CLOCK_STATE_ prefix.
func clockStateName(s api.ClockState) string {
	if name, ok := api.ClockState_name[int32(s)]; ok {
		return strings.TrimPrefix(name, "CLOCK_STATE_")
	}
	return fmt.Sprintf("CLOCK_STATE(%d)", s)
}

// clockLine describes a node's clock in one line, such as "synchronized
// with 10.42.0.1 (offset +1.2ms, 12s ago)".
func clockLine(now time.Time, c *clockView) string {
	if c == nil {
		return "-"
	}
	var line string
	switch c.State {
	case "SYNCHRONIZED":
		line = "synchronized with " + dash(c.Server)
	case "UNSYNCHRONIZED":
		return "unsynchronized (no NTP server has answered since the node booted)"
	case "KNOWN_WRONG":
		line = "KNOWN WRONG: " + dash(c.Reason)
		if c.LastSync == nil {
			return line
		}
		line += "; last synchronized with " + dash(c.Server)
	case "UNSPECIFIED":
		return "-"
	default:
		return c.State
	}
	return fmt.Sprintf("%s (offset %s, %s)", line, signedDuration(time.Duration(c.OffsetNanos)), age(now, c.LastSync))
}

// signedDuration prints d with its sign, to a precision that suits its
// size: "+1.2ms", "-450µs", "+3h0m0.001s".
func signedDuration(d time.Duration) string {
	switch a := d.Abs(); {
	case a >= time.Second:
		d = d.Round(time.Millisecond)
	case a >= time.Millisecond:
		d = d.Round(100 * time.Microsecond)
	default:
		d = d.Round(time.Microsecond)
	}
	if d >= 0 {
		return "+" + d.String()
	}
	return d.String()
}

func unixNanos(n int64) *time.Time {
	if n == 0 {
		return nil
	}
	t := time.Unix(0, n).UTC()
	return &t
}

func newNodeView(n *api.Node) nodeView {
	return nodeView{
		ID:            n.GetId(),
		PublicKey:     hex.EncodeToString(n.GetPublicKey()),
		State:         stateName(n.GetState()),
		Roles:         roleNames(n.GetRoles()),
		Address:       n.GetStatus().GetExternalAddress(),
		CuratorPort:   n.GetStatus().GetRunningCurator().GetPort(),
		Version:       n.GetStatus().GetVersion(),
		SystemSlot:    n.GetStatus().GetSystemSlot(),
		StatusTime:    unixNanos(n.GetStatus().GetTimestampUnixNanos()),
		Health:        healthName(n.GetHealth()),
		LastHeartbeat: unixNanos(n.GetLastHeartbeatUnixNanos()),
		Clock:         newClockView(n.GetStatus().GetClock()),
		PodTunnel:     newPodTunnelView(n.GetPodNetwork()),
		SecureBoot:    secureBootOf(n.GetStatus()),
		PCR11:         hex.EncodeToString(n.GetStatus().GetBootSecurity().GetPcr11()),
		Seal:          sealOf(n),
		PCRKey:        hex.EncodeToString(n.GetStatus().GetBootSecurity().GetPcrKey()),
	}
}

// secureBootOf is whether the node's status says it booted under Secure
// Boot; nil when it says nothing of it.
func secureBootOf(st *api.NodeStatus) *bool {
	if st.GetBootSecurity() == nil {
		return nil
	}
	on := st.GetBootSecurity().GetSecureBoot()
	return &on
}

// sealOf is how n keeps its sealed configuration: "tpm" or "plain", or ""
// before it committed (NEW, STANDBY), when it has said nothing yet.
func sealOf(n *api.Node) string {
	switch n.GetState() {
	case api.NodeState_NODE_STATE_NEW, api.NodeState_NODE_STATE_STANDBY, api.NodeState_NODE_STATE_UNKNOWN:
		return ""
	}
	if n.GetSealsWithTpm() {
		if len(n.GetStatus().GetBootSecurity().GetPcrKey()) > 0 {
			return "tpm-bound"
		}
		return "tpm"
	}
	return "plain"
}

// secureBootLine describes whether a node booted under Secure Boot.
func secureBootLine(on *bool) string {
	switch {
	case on == nil:
		return "-"
	case *on:
		return "on"
	}
	return "off"
}

// sealLine describes how a node keeps its sealed configuration.
func sealLine(seal string) string {
	switch seal {
	case "tpm":
		return "TPM, not bound to what the node boots (no PCR policy)"
	case "tpm-bound":
		return "TPM, bound to releases its PCR key signed (PCR 11) and to PCR 7"
	case "plain":
		return "none: plain on the ESP"
	}
	return "-"
}

// healthName is a NodeHealth without its NODE_HEALTH_ prefix: HEALTHY
// (a leader heard from the node within the heartbeat timeout),
// HEARTBEAT_TIMEOUT (none did), UNKNOWN (the leader took over a moment ago
// and cannot tell yet), or "" when the curator does not judge the node (it
// is not UP).
func healthName(h api.NodeHealth) string {
	if h == api.NodeHealth_NODE_HEALTH_UNSPECIFIED {
		return ""
	}
	if name, ok := api.NodeHealth_name[int32(h)]; ok {
		return strings.TrimPrefix(name, "NODE_HEALTH_")
	}
	return fmt.Sprintf("HEALTH(%d)", h)
}

// stateName is a NodeState without its NODE_STATE_ prefix.
func stateName(s api.NodeState) string {
	if name, ok := api.NodeState_name[int32(s)]; ok {
		return strings.TrimPrefix(name, "NODE_STATE_")
	}
	return fmt.Sprintf("STATE(%d)", s)
}

func storageName(p api.StorageSecurityPolicy) string {
	switch p {
	case api.StorageSecurityPolicy_STORAGE_SECURITY_POLICY_ENCRYPTED:
		return "encrypted"
	case api.StorageSecurityPolicy_STORAGE_SECURITY_POLICY_INSECURE:
		return "insecure"
	}
	return "unspecified (encrypted)"
}

func tpmName(m api.TPMMode) string {
	switch m {
	case api.TPMMode_TPM_MODE_REQUIRED:
		return "required"
	case api.TPMMode_TPM_MODE_BEST_EFFORT:
		return "best-effort"
	case api.TPMMode_TPM_MODE_DISABLED:
		return "disabled"
	}
	return "unspecified (required)"
}

// secureBootName says whether a cluster of configuration cc requires
// Secure Boot, and a seal bound to signed releases.
func secureBootName(cc *api.ClusterConfiguration) string {
	switch {
	case cc.GetBoundSealRequired():
		return "required, with seals bound to signed releases"
	case cc.GetSecureBootRequired():
		return "required"
	}
	return "optional"
}

// age says how long ago t was, "never" for nil.
func age(now time.Time, t *time.Time) string {
	if t == nil {
		return "never"
	}
	d := now.Sub(*t)
	if d < 0 {
		// Clocks of the leader and of this machine disagree.
		return "now"
	}
	return d.Round(time.Second).String() + " ago"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("when writing JSON: %w", err)
	}
	return nil
}

// writeNodeTable prints one line per node.
func writeNodeTable(w io.Writer, now time.Time, nodes []nodeView) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tHEALTH\tROLES\tADDRESS\tVERSION\tHEARTBEAT")
	for _, n := range nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.ID, n.State, dash(n.Health), dash(strings.Join(n.Roles, ",")),
			dash(n.Address), dash(n.Version), age(now, n.LastHeartbeat))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("when writing table: %w", err)
	}
	return nil
}

// writeNodeDescription prints every field of one node, one per line.
func writeNodeDescription(w io.Writer, now time.Time, n nodeView) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	timeOf := func(t *time.Time) string {
		if t == nil {
			return "never"
		}
		return t.Format(time.RFC3339) + " (" + age(now, t) + ")"
	}
	curator := "no"
	if n.CuratorPort != 0 {
		curator = fmt.Sprintf("yes, port %d", n.CuratorPort)
	}
	fmt.Fprintf(tw, "ID:\t%s\n", n.ID)
	fmt.Fprintf(tw, "Public key:\t%s\n", n.PublicKey)
	fmt.Fprintf(tw, "State:\t%s\n", n.State)
	fmt.Fprintf(tw, "Health:\t%s\n", dash(n.Health))
	fmt.Fprintf(tw, "Roles:\t%s\n", dash(strings.Join(n.Roles, ", ")))
	fmt.Fprintf(tw, "Address:\t%s\n", dash(n.Address))
	fmt.Fprintf(tw, "Curator:\t%s\n", curator)
	fmt.Fprintf(tw, "Version:\t%s\n", dash(n.Version))
	fmt.Fprintf(tw, "System slot:\t%s\n", dash(n.SystemSlot))
	fmt.Fprintf(tw, "Status written:\t%s\n", timeOf(n.StatusTime))
	fmt.Fprintf(tw, "Clock:\t%s\n", clockLine(now, n.Clock))
	fmt.Fprintf(tw, "Pod tunnel:\t%s\n", podTunnelLine(n.PodTunnel))
	fmt.Fprintf(tw, "Secure Boot:\t%s\n", secureBootLine(n.SecureBoot))
	fmt.Fprintf(tw, "PCR 11:\t%s\n", dash(n.PCR11))
	fmt.Fprintf(tw, "Seal:\t%s\n", sealLine(n.Seal))
	if n.PCRKey != "" {
		fmt.Fprintf(tw, "PCR key:\t%s\n", n.PCRKey)
	}
	fmt.Fprintf(tw, "Last heartbeat:\t%s\n", timeOf(n.LastHeartbeat))
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("when writing description: %w", err)
	}
	return nil
}
