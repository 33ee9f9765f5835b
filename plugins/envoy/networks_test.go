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
	noGateway := base.clone(t)
	noGateway.cluster("west").remove(obj{"kind": "Gateway", "metadata": obj{"name": "istio-eastwestgateway"}})
	moved := noGateway.clone(t)
	get(moved.cluster("north").object("Mesh", "istio"), "spec")["network"] = "network-east"
	movedPort := moved.clone(t)
	get(movedPort.cluster("east").object("Gateway", "istio-eastwestgateway"), "spec")["port"] = 15443
	sdktest.CheckIncremental(t, envoy.New(), base.fixture(t), noGateway.fixture(t), moved.fixture(t), movedPort.fixture(t), base.fixture(t))

	res := sdktest.RunFixture(t, envoy.New(), noGateway.fixture(t))
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
