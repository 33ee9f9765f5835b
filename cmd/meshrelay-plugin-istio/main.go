// Command meshrelay-plugin-istio is the meshrelay translator plugin for
// Istio: it maps TrafficPolicy, AccessPolicy and VirtualDestination to
// Istio resources for every cluster where discovery found Istio. The
// meshrelay server starts it; run by hand it says so and exits.
package main

import (
	"github.com/meshrelay/meshrelay/plugins/istio"
	"github.com/meshrelay/meshrelay/sdk"
)

func main() { sdk.Serve(istio.New()) }
