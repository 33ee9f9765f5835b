// Package protocol is what the meshrelay plugin host and the SDK agree on to
// talk over go-plugin: the handshake cookie, the negotiated protocol
// versions and the plugin sets that carry the translator gRPC service, the
// message size limits both sides raise, the go-plugin client configuration
// a host starts a plugin binary with ([ClientConfig]), and an in-memory
// connection for translators linked into the host ([ServeInMemory]).
//
// A Translate session carries updates (Begin, the parts of the view,
// Commit) and answers (output parts, diagnostics, Done), as
// proto/translator/v1 describes. A plugin may send each output set as soon
// as it has it, in any order; the host sorts the answer, and drops all of
// it when Done carries an error. A host takes a plugin as hung when a
// call makes no progress for its call timeout (core/pluginhost
// Options.CallTimeout): it takes no part of the update and sends no
// output part and no Done. A plugin that takes and answers a large view
// steadily is never cut off, however long the whole call.
//
// Translator authors do not use this package: [sdk.Serve] does. The host
// side of a Translate session — sending updates in parts, checking and
// assembling answers — is in the subpackage host, which both the plugin
// host (core/pluginhost) and sdk/sdktest run. A future protocol version 2
// is added as a new entry of [ServerPlugins] and [ClientPlugins] beside
// version 1, so that hosts and plugins of either version keep negotiating.
package protocol
