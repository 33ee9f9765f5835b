// Package engine turns the fleet's inputs into per-cluster outputs.
//
// The engine reads the fleet from a [View]: every cluster's latest input
// snapshot and whether it is stale (its agent is away), and the outputs
// delivered before. The server's view reads the store, the source of truth
// for inputs and outputs; an engine used alone (offline translation,
// tests) reads a [MemView]. The server's view is [Tracked]: the server
// names each cluster that changed ([Engine.RefreshCluster]), and a cycle
// reads only those clusters into the last view's map, in place, numbers
// the view and names them, with what they were, to the translators'
// sessions, which then compare only those clusters with what each plugin
// holds. After one cluster's change a cycle costs that cluster, not the
// fleet. Any other view is read whole every cycle (the owner calls
// [Engine.Refresh]), and a Tracked one at least every 10 s; such a cycle
// names the clusters that differ from the last view. The
// server gives the engine the policies of the management source
// ([Engine.SetPolicies]).
//
// [Engine.Run] runs [Engine.Step] at once for a change that comes a
// debounce window or more after the last cycle ended; sooner, the change
// is part of a burst, which one cycle takes once no change has come for a
// window, or after Options.DebounceMax. A cycle
// hands every translator whose backends run somewhere in the fleet the
// view it is to hold (inputs, policies, targets). What a
// translator holds is its session's to know (sdk/protocol/host): the
// session sends the whole view to a new plugin and after a failure, and
// otherwise only what changed, or nothing. Each translator answers with
// the complete output of each (cluster, backend) that changed; the engine
// hashes it and hands on only outputs whose hash differs from the last one
// handed on, or, for an output it holds no mark of, from the one the view
// says was delivered before ([View].Delivered: by another replica, or
// before a restart), whose version it continues. The engine keeps only the
// marks (hash and version) of what it handed on; the outputs live where
// delivery puts them.
//
// A cycle's result is data, a [Ready], which Run sends on Options.Ready.
// Delivery (the server writes the outputs to the store and offers them to
// agents' streams) then calls [Engine.Advance] with the outputs it did not
// write, which the engine hands on again while they are current: one way
// out of the engine, and one place outputs live. A Ready also names the
// outputs that are current though not handed on (Ready.Current): those
// found equal to the ones delivered before, and, after [Engine.Resume],
// a cluster's outputs as the next cycle that reads it leaves them, so a
// stream that waited for its agent's input sends what it lacks.
//
// During a staged rollout (core/rollout) two revisions of the policies are
// live ([Engine.SetRevisions]): each has its own session with each
// translator ([pluginhost.Sessions]), every cluster is a target of exactly
// one of them, and moving a cluster to the new revision is moving a target
// from one session to the other. Each cluster's outputs come from its own
// revision's policies over the whole fleet's inputs. With one revision the
// engine runs as it always did, one session per translator.
// [Engine.Revision] says which revision a cluster's outputs were last
// computed under.
//
// A translator that fails keeps its last good outputs: the engine never hands
// on an empty output because a translator broke. Its failure shows in
// [Engine.Status] and it is retried with backoff.
//
// The engine talks to translators through [pluginhost.Translator], which
// plugin processes and in-process translators implement alike.
package engine
