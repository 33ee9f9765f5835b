// Command meshrelay-plugin-gatewayapi is meshrelay's Gateway API
// translator plugin: it serves the gatewayapi backend, turning
// TrafficPolicies into mesh routes (HTTPRoute and GRPCRoute with a Service
// parent) and, where Linkerd runs, AccessPolicies into Linkerd's
// authorization resources. The host starts it; run by hand it says so and
// exits.
package main

import (
	"github.com/meshrelay/meshrelay/plugins/gatewayapi"
	"github.com/meshrelay/meshrelay/sdk"
)

func main() { sdk.Serve(gatewayapi.New()) }
