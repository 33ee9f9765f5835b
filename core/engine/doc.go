// Package engine turns the fleet's inputs into per-cluster outputs.
//
// The engine reads the fleet from a [View]: every cluster's latest input
// snapshot and whether it is stale (its agent is away). The server's view
// reads the store, the source of truth for inputs, and the server calls
// [Engine.Refresh] after each change; an engine used alone (offline
// translation, tests) keeps its own view, fed with [Engine.SetInput],
// [Engine.SetStale] and [Engine.RemoveCluster]. The server gives it the
// policies of the management source ([Engine.SetPolicies]).
// [Engine.Run] coalesces those changes over a debounce window, then calls
// every translator whose backends run somewhere in the fleet with only what
// changed since that translator last saw the fleet (or everything, after a
// translator restart). The engine keeps only what each translator's session
// has seen, and the outputs it handed on. Each translator answers with the
// complete output of each (cluster, backend) that changed; the engine hashes
// it and hands on only outputs whose hash differs from the last one handed
// on, or, for an output it holds nothing of, from the one the view says was
// delivered before ([View].Delivered: by another replica, or before a
// restart), whose version it continues.
//
// A cycle's result is data: [Engine.Step] returns it as a [Ready], and Run
// sends it on Options.Ready for the caller to deliver (the server writes
// the outputs to the store and sends them to agents). Without Ready, Run
// and [Engine.Cycle] hand it on through the Options.OnOutput and
// Options.OnCycle callbacks.
//
// A translator that fails keeps its last good outputs: the engine never hands
// on an empty output because a translator broke. Its failure shows in
// [Engine.Status] and it is retried with backoff.
//
// The engine talks to translators through [pluginhost.Translator], which
// plugin processes and in-process translators implement alike. Whether a
// translator's session still holds the view is the session's to know: it
// answers [pluginhost.ErrNeedFull] to a delta it cannot apply, and the
// engine resends everything.
package engine
