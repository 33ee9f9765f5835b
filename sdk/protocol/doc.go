// Package protocol is what the meshrelay plugin host and the SDK agree on to
// talk over go-plugin: the handshake cookie, the negotiated protocol
// versions and the plugin sets that carry the translator gRPC service, the
// message size limits both sides raise, the go-plugin client configuration
// a host starts a plugin binary with ([ClientConfig]), and an in-memory
// connection for translators linked into the host ([ServeInMemory]).
//
// Translator authors do not use this package: [sdk.Serve] does. The host
// side of a Translate session — sending updates in parts, checking and
// assembling answers — is in the subpackage host, which both the plugin
// host (core/pluginhost) and sdk/sdktest run. A future protocol version 2
// is added as a new entry of [ServerPlugins] and [ClientPlugins] beside
// version 1, so that hosts and plugins of either version keep negotiating.
package protocol
