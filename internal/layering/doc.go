// Package layering states which of meshrelay's packages may import which,
// and its test checks every package's imports against the rules with
// `go list`. docs/architecture.md explains the layers.
//
// The rules, on non-test imports between packages of this module:
//
//   - layers, lowest first: proto; api (and deploy); sdk and the test
//     helpers internal/testenv, internal/testutil, internal/tcpproxy;
//     core, plugins and examples; the tools internal/demo,
//     internal/offline, internal/bench and their admin API client
//     internal/adminclient; cmd. Nothing imports a higher
//     layer, and nothing imports cmd;
//   - api imports only api and proto;
//   - core never names a plugin package, and plugins and examples never
//     import core; sdk and plugins import no internal package of the
//     module root (tools or test helpers);
//   - inside core, lowest first: store, pki, manifest, catalog, pluginhost;
//     engine; server and agent; ui. core/agent/... and core/server never
//     import each other.
//
// [Check] applies the rules to one import; [Violations] to a graph. The
// package's tests also check that CONTRIBUTING.md's layout table has a row
// for every package and names only existing ones, and that every test
// docs/architecture.md links (the failure contract's) exists in the file
// it names.
package layering
