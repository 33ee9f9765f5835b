// Package conformance holds tests that run every translator of plugins/
// on one fleet and compare what their outputs decide. It has no code of
// its own: the tests import the istio, envoy, cilium and gatewayapi
// plugins, which must never import each other or core/.
package conformance
