package consensus

// ClosedByPeer is closedByPeer, for the tests of package consensus_test.
var ClosedByPeer = closedByPeer
