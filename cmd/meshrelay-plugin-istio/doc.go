// Command meshrelay-plugin-istio is the meshrelay translator plugin for
// Istio: it maps TrafficPolicy, AccessPolicy and VirtualDestination to
// Istio resources for every cluster where discovery found Istio. The
// meshrelay server starts it; run by hand it says so and exits.
package main
