package main

import (
	"bytes"
	"encoding/hex"
	"testing"
	"time"

	"cairn.dev/cairn/proto/api"
)

// TestNodeDescribeBootSecurity reads, through GetNodes, whether nodes
// booted under Secure Boot, their PCR 11 and how they keep their sealed
// configuration, as node describe prints them and in JSON.
func TestNodeDescribeBootSecurity(t *testing.T) {
	pcr := bytes.Repeat([]byte{0xab}, 32)
	secure := testNode(t, api.NodeState_NODE_STATE_UP, nil, &api.NodeStatus{
		ExternalAddress: "10.42.0.10", BootSecurity: &api.BootSecurity{SecureBoot: true, Pcr11: pcr},
	}, time.Time{})
	secure.SealsWithTpm = true
	plain := testNode(t, api.NodeState_NODE_STATE_UP, nil, &api.NodeStatus{
		ExternalAddress: "10.42.0.11", BootSecurity: &api.BootSecurity{},
	}, time.Time{})
	silent := testNode(t, api.NodeState_NODE_STATE_UP, nil, &api.NodeStatus{ExternalAddress: "10.42.0.12"}, time.Time{})
	silent.SealsWithTpm = true
	fresh := testNode(t, api.NodeState_NODE_STATE_NEW, nil, nil, time.Time{})
	pcrKey := bytes.Repeat([]byte{0xcd}, 32)
	bound := testNode(t, api.NodeState_NODE_STATE_UP, nil, &api.NodeStatus{
		ExternalAddress: "10.42.0.13", BootSecurity: &api.BootSecurity{SecureBoot: true, Pcr11: pcr, PcrKey: pcrKey},
	}, time.Time{})
	bound.SealsWithTpm = true
	dir, s := bootstrapped(t, secure, plain, silent, fresh, bound)
	mustRun(t, dir, "--endpoint", s.addr, "takeownership")

	on, off := true, false
	for _, tc := range []struct {
		node       *api.Node
		lines      []string
		secureBoot *bool
		seal       string
	}{
		{secure, []string{"Secure Boot:     on\n", "PCR 11:          " + hex.EncodeToString(pcr) + "\n",
			"Seal:            TPM, not bound to what the node boots (no PCR policy)\n"}, &on, "tpm"},
		{plain, []string{"Secure Boot:     off\n", "PCR 11:          -\n", "Seal:            none: plain on the ESP\n"}, &off, "plain"},
		{silent, []string{"Secure Boot:     -\n", "Seal:            TPM, not bound"}, nil, "tpm"},
		{fresh, []string{"Secure Boot:     -\n", "Seal:            -\n"}, nil, ""},
		{bound, []string{"Secure Boot:     on\n", "Seal:            TPM, bound to releases its PCR key signed (PCR 11) and to PCR 7\n",
			"PCR key:         " + hex.EncodeToString(pcrKey) + "\n"}, &on, "tpm-bound"},
	} {
		for _, line := range tc.lines {
			v := describe(t, dir, tc.node.Id, line)
			wantPCR := ""
			if tc.node == secure || tc.node == bound {
				wantPCR = hex.EncodeToString(pcr)
			}
			if (v.SecureBoot == nil) != (tc.secureBoot == nil) || (v.SecureBoot != nil && *v.SecureBoot != *tc.secureBoot) || v.Seal != tc.seal || v.PCR11 != wantPCR {
				t.Errorf("node describe -o json %s: secure_boot %v, pcr11 %q, seal %q; want %v, %q, %q", tc.node.Id, v.SecureBoot, v.PCR11, v.Seal, tc.secureBoot, wantPCR, tc.seal)
			}
		}
	}
}
