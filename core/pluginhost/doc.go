// Package pluginhost finds, verifies, starts and restarts meshrelay
// translator plugins, and calls them through the translator protocol
// (proto/translator/v1) the way the engine needs. The protocol's host side
// (working out what the plugin holds and what to send, checking and
// assembling answers) is sdk/protocol/host,
// which sdk/sdktest runs too; pluginhost adds processes, the lock file,
// restarts and timeouts around it, and names its types.
//
// A plugin directory holds plugin binaries and a lock file,
// plugins.lock.json, recording each plugin's name, version, protocol
// version, backends, sha256, path and install time:
//
//	e, err := pluginhost.Install(dir, "./meshrelay-plugin-netpol", "")        // a path: sha256 computed
//	e, err := pluginhost.Install(dir, "https://example.com/netpol", sha256hex) // a URL needs the sha256
//	entries, err := pluginhost.List(dir)
//	err = pluginhost.Verify(dir)        // recompute every sha256
//	err = pluginhost.Remove(dir, "netpol")
//
// Plugins are published to and installed from OCI registries (oras-go)
// as an image index of artifact type [ArtifactType] with one manifest per
// platform, each holding the config blob ([ArtifactConfig], what the
// plugin declares) and one layer, the binary:
//
//	idx, err := pluginhost.Push(ctx, "oci://reg/acme:0.1.0", binaries, pluginhost.PushOptions{SignKey: key})
//	e, err := pluginhost.InstallOCI(ctx, dir, "oci://reg/acme:0.1.0", pluginhost.OCIOptions{VerifyKeys: keys})
//	entries, err := pluginhost.InstallFromLock(ctx, dir, "", opts) // what the lock names, this platform
//	idx, err = pluginhost.Pull(ctx, "oci://reg/acme:0.1.0", layoutDir, opts) // air-gapped
//
// The index digest is signed in cosign's key-based layout (sign.go) and
// verified offline against the keys the user trusts ([ErrUnsigned],
// [ErrSignature]); every blob is checked against its digest ([ErrDigest]);
// the lock entry records the index digest and every platform's binary
// sha256. A refused install leaves the plugin directory as it was.
//
// Install starts the plugin once to describe it and refuses one that speaks
// no supported protocol version ([ErrUnsupportedProtocol]).
//
// A [Host] runs the installed plugins:
//
//	h, err := pluginhost.New(dir, logger, pluginhost.DefaultOptions())
//	defer h.Close() // kills every plugin process
//	p, _ := h.Plugin("netpol")
//	res, err := p.Translate(ctx, pluginhost.View{Clusters: ..., Policies: ...})
//
// A [Plugin] starts its process on first use through go-plugin: before
// every start go-plugin's SecureConfig hashes the file against the sha256
// from the lock file as it executes it, once ([ErrChecksum] names the
// plugin, the expected and the actual sum), only gRPC is allowed, the
// connection uses automatic mTLS, protocol versions are negotiated, the
// plugin's hclog output arrives in the host's *slog.Logger with a plugin
// attribute and its levels, and anything it writes to stdout is logged
// (before the handshake it is a clear start error). Every call is bounded
// by its silence (Options.CallTimeout: the plugin takes no part of the
// update and sends no part of its answer), not by its length, and
// [Host.Watch] checks each plugin's health on a timer, busy or idle; a
// plugin that crashes or hangs is killed and started again with
// exponential backoff; its new session sends the next call's view in full.
// Answers that break the protocol — invalid JSON, objects
// without kind or name, outputs for clusters not in the view or for
// backends the plugin does not serve, sets over Options.MaxOutputBytes — are
// refused as errors, never passed on as empty outputs.
//
// [InProcess] runs an sdk.Translator in the host process over an in-memory
// connection with the same protocol and the same method set.
//
// [Scaffold] writes a new plugin project, for `meshrelay plugin init`.
package pluginhost
