package envoy_test

import (
	"testing"

	"github.com/meshrelay/meshrelay/plugins/envoy"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
)

// TestNetworkChanges changes what cross-network endpoints depend on, a
// cluster's east-west gateway and a cluster's network, and checks that the
// incremental outputs equal full translations.
func TestNetworkChanges(t *testing.T) {
	base := loadFleet(t, "networks")
	noGateway := base.Clone(t)
	west := noGateway.Cluster("west")
	west.Remove(west.Object("Gateway", "istio-eastwestgateway"))
	moved := noGateway.Clone(t)
	get(moved.Cluster("north").Object("Mesh", "istio"), "spec")["network"] = "network-east"
	movedPort := moved.Clone(t)
	get(movedPort.Cluster("east").Object("Gateway", "istio-eastwestgateway"), "spec")["port"] = 15443
	sdktest.CheckIncremental(t, envoy.New(), base.Fixture(t), noGateway.Fixture(t), moved.Fixture(t), movedPort.Fixture(t), base.Fixture(t))

	res := sdktest.RunFixture(t, envoy.New(), noGateway.Fixture(t))
	warned := 0
	for _, d := range res.Diagnostics {
		if d.Cluster == "east" && d.Path == "spec.services" {
			warned++
		}
	}
	if warned != 2 {
		t.Errorf("east's warnings about clusters on other networks without a gateway = %d, want 2 (west and north): %+v", warned, res.Diagnostics)
	}
}
