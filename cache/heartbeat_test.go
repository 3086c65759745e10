package cache

import "testing"

func TestHeartbeatClusterIsAReservedValidClusterName(t *testing.T) {
	if err := ValidateClusterName(HeartbeatCluster); err != nil {
		t.Errorf("partition paths would refuse the heartbeat cluster: %v", err)
	}
	if !IsReservedName(HeartbeatCluster) {
		t.Errorf("%q is not reserved: anyone could write there", HeartbeatCluster)
	}
}
