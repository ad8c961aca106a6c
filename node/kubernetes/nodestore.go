package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/encoding/protowire"
)

// ErrNoPodRange says that Kubernetes has not assigned a node a pod range:
// it has no Node object yet, or the controller-manager has not given that
// Node its range yet.
var ErrNoPodRange = errors.New("no pod range assigned by Kubernetes yet")

// AssignedPodRange reads the pod range Kubernetes assigned to node (its
// Node's spec.podCIDR) straight from where the apiserver keeps the Node
// in etcd, which etcd reaches (the whole key space: no namespace). The
// curator checks what a worker publishes against it without being a
// client of the apiserver.
func AssignedPodRange(ctx context.Context, etcd clientv3.KV, node string) (netip.Prefix, error) {
	key := etcdPrefix + "/registry/minions/" + node
	resp, err := etcd.Get(ctx, key)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("when reading the Node %s from etcd: %w", node, err)
	}
	if len(resp.Kvs) == 0 {
		return netip.Prefix{}, fmt.Errorf("node %s has no Node object: %w", node, ErrNoPodRange)
	}
	cidr, err := storedPodCIDR(resp.Kvs[0].Value)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("when decoding the Node %s stored in etcd: %w", node, err)
	}
	if cidr == "" {
		return netip.Prefix{}, fmt.Errorf("the Node %s has no spec.podCIDR: %w", node, ErrNoPodRange)
	}
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("the Node %s has spec.podCIDR %q: %w", node, cidr, err)
	}
	return p, nil
}

// The apiserver stores objects as protobuf: a 4-byte magic, then a
// runtime.Unknown whose raw field (2) holds the object. A v1.Node has its
// spec in field 2, and a NodeSpec its podCIDR in field 1
// (k8s.io/api/core/v1/generated.proto). These numbers are part of
// Kubernetes' stored format, which every version must read back, so they
// do not change.
var storageMagic = []byte("k8s\x00")

const (
	unknownRawField = 2
	nodeSpecField   = 2
	podCIDRField    = 1
)

// storedPodCIDR returns the spec.podCIDR of a Node as the apiserver
// stores it in etcd; empty if it has none.
func storedPodCIDR(stored []byte) (string, error) {
	rest, ok := bytes.CutPrefix(stored, storageMagic)
	if !ok {
		return "", errors.New("not in the apiserver's protobuf storage format")
	}
	node, err := fieldValues(rest, unknownRawField)
	if err != nil {
		return "", fmt.Errorf("in its envelope: %w", err)
	}
	spec, err := fieldValues(bytes.Join(node, nil), nodeSpecField)
	if err != nil {
		return "", fmt.Errorf("in the Node: %w", err)
	}
	cidrs, err := fieldValues(bytes.Join(spec, nil), podCIDRField)
	if err != nil {
		return "", fmt.Errorf("in its spec: %w", err)
	}
	if len(cidrs) == 0 {
		return "", nil
	}
	return string(cidrs[len(cidrs)-1]), nil
}

// fieldValues returns each value of the length-delimited field num of the
// protobuf message msg, in order. Protobuf merges the values of a message
// field that appears more than once (what joining them does), and keeps
// the last of a string's.
func fieldValues(msg []byte, num protowire.Number) ([][]byte, error) {
	var found [][]byte
	for len(msg) > 0 {
		n, typ, l := protowire.ConsumeTag(msg)
		if l < 0 {
			return nil, fmt.Errorf("bad field tag: %w", protowire.ParseError(l))
		}
		msg = msg[l:]
		if n == num && typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(msg)
			if l < 0 {
				return nil, fmt.Errorf("bad field %d: %w", n, protowire.ParseError(l))
			}
			found = append(found, v)
			msg = msg[l:]
			continue
		}
		l = protowire.ConsumeFieldValue(n, typ, msg)
		if l < 0 {
			return nil, fmt.Errorf("bad field %d: %w", n, protowire.ParseError(l))
		}
		msg = msg[l:]
	}
	return found, nil
}
