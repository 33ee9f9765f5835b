// Command meshrelay-plugin-cilium is meshrelay's Cilium translator plugin:
// it serves the cilium backend, turning AccessPolicies into Cilium network
// policies and VirtualDestinations into ClusterMesh global services. The
// host starts it; run by hand it says so and exits.
package main
