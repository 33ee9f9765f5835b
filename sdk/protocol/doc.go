// Package protocol is what the meshrelay plugin host and the SDK agree on to
// talk over go-plugin: the handshake cookie, the negotiated protocol
// versions and the plugin sets that carry the translator gRPC service, and
// the message size limits both sides raise.
//
// Translator authors do not use this package: [sdk.Serve] does. The plugin
// host (core/pluginhost) uses it to start plugins. A future protocol version
// 2 is added as a new entry of [ServerPlugins] and [ClientPlugins] beside
// version 1, so that hosts and plugins of either version keep negotiating.
package protocol
