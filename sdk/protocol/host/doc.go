// Package host is the host's side of the translator protocol
// (proto/translator/v1). One [Session] per Translate stream owns what the
// plugin holds: the host hands it the [View] it wants the plugin to have
// (inputs, policies, targets), and the session sends the view in full the
// first time and after a failure, then only what changed, or nothing,
// split into parts of about protocol.PartBytes; it checks and assembles
// the answer into a [Result].
//
// An answer is refused, with an error wrapping [ErrProtocol], when it
// breaks the protocol: an output that is not a Kubernetes object matching
// its identity, twice the same object, an output for a cluster not in the
// view the session sent or for a backend the plugin did not describe, a
// (cluster, backend) set over the session's byte limit, parts out of order
// or a Done for another update. Such outputs are never passed on, not even
// as empty sets. A plugin that answers but cannot translate gives an error
// wrapping [ErrPluginFailed], and the session stays usable (its next
// update is full).
//
//	d, err := host.Describe(ctx, client)
//	s, err := host.Open(client, d.GetName(), d.GetBackends(), host.DefaultMaxOutputBytes)
//	defer s.Close()
//	res, err := s.Translate(ctx, host.View{Clusters: ..., Policies: ...})
//
// An answer costs the host what changed: the session keeps, per (cluster,
// backend), a sorted slice of 16-byte digests of the resources it last
// accepted (protocol.KeySet), and an unchanged resource answered again is
// not checked again; nor is a resource that passed the checks in another
// set lately (the digests of two bounded generations of 32,768), such as
// an object the plugin emits the same for many clusters. Such a body is
// also held once in the process, by every set that has it, rather than
// once per set as each answer decodes it (snapshot.InternBody: weak
// pointers, about 40 bytes an entry). With [View.Delivered] set, the
// plugin does not even send it: a set sent again carries what changed and
// names the rest kept, which the session takes from the set Delivered
// returns once each matches the digest of the last answer. A kept resource that does not
// match (the set delivered changed since, or was not delivered yet) makes
// the session ask, in a second round of the same call, for that cluster's
// sets whole, with nothing kept; kept resources on a full update, or in
// that second round, break the protocol. Nor does an update name the
// targets again when they are those of the last one: once the plugin's
// Done says it takes Begin.same_targets, the Begin says that instead.
//
// Working out the update costs the clusters that changed, not the fleet,
// when the view numbers itself ([View.Seq]) and names the clusters that
// may differ from the one before ([View.Base], [View.Changed]). A host
// may change one Clusters map in place from view to view
// ([View.InPlace]), handing what the named clusters were in [View.Was];
// a session holding an older view then sends the whole view.
//
// The server runs it through core/pluginhost, which adds processes,
// restarts and timeouts around it; sdk/sdktest runs the same code, so a
// plugin's tests refuse what the server would refuse.
package host
