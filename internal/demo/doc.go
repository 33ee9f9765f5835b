// Package demo runs meshrelay end to end on one machine with nothing
// installed: a management server on the memory store with real generated
// TLS, the four translator plugins installed into a temporary plugin
// directory with their checksums and run as real plugin processes, and four
// agents whose clusters are directories of YAML from testdata/demo (a
// multi-cluster bookinfo: Istio in east and west, Cilium in central, Linkerd
// in north, a standalone Envoy group in west). Policies come from a copy of
// testdata/policies. It prints what was translated where and each policy's
// status, shows one policy edit propagating at once and a second one as a
// staged rollout (clusters labelled by ring, a RolloutStrategy with a
// canary stage and a gated one, approved through the admin API), and
// writes every output to a folder. With Options.ThroughRegistry (`meshrelay demo --plugins
// oci://`) the plugins are first published, signed, to an OCI registry the
// demo starts on loopback and installed from it.
package demo
