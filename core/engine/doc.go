// Package engine turns the fleet's inputs into per-cluster outputs.
//
// The server feeds it each cluster's latest input snapshot ([Engine.SetInput]),
// marks clusters stale while their agents are away ([Engine.SetStale]), and
// gives it the policies of the management source ([Engine.SetPolicies]).
// [Engine.Run] coalesces those changes over a debounce window, then calls
// every translator whose backends run somewhere in the fleet with only what
// changed since that translator last saw the fleet (or everything, after a
// translator restart). Each translator answers with the complete output of
// each (cluster, backend) that changed; the engine hashes it and hands on
// only outputs whose hash differs from the last one handed on, through the
// Options.OnOutput callback.
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
