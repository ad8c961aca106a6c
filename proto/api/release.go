package api

import "google.golang.org/protobuf/proto"

// Written by hand: `make proto` deletes and regenerates only the .pb.go
// files.

// GivenRelease is the release a cluster rollout gives node n to act on:
// the one for its turn (desired_release), else the one to stage ahead of
// it (release_to_stage), which is staged only whatever it says; nil when
// it is given none.
func (n *Node) GivenRelease() *DesiredRelease {
	if d := n.GetDesiredRelease(); d != nil {
		return d
	}
	d := n.GetReleaseToStage()
	if d == nil {
		return nil
	}
	d = proto.Clone(d).(*DesiredRelease)
	d.StageOnly = true
	return d
}
