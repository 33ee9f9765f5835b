// Package sink owns the agent's sinks: making one backend's desired
// resources, as delivered by the server, real in the cluster or on disk.
//
//   - [Kube] applies with server-side apply under its own field manager
//     (meshrelay-agent, forcing conflicts), labels what it owns
//     (app.kubernetes.io/managed-by=meshrelay and meshrelay.io/backend) and
//     stamps the server that decided it (annotation meshrelay.io/server). It
//     prunes what it owns and is no longer desired, only when asked to, in
//     the kinds it applied and those declared to it ([Kube.DeclareKinds]:
//     the kinds the backend's plugins declare they emit, each resolved to
//     the version the cluster serves), and never touches an object it does
//     not own: an existing object without the managed-by label is
//     reported, not taken over. Its Run corrects
//     drift (owned objects edited or deleted by someone else are re-applied
//     and counted in meshrelay_agent_drift_corrections_total) and retries
//     resources that failed, such as those whose CRD was missing, until they
//     apply. It takes every API group but the xDS wrappers'
//     ([Kube.TakesGroup]): no cluster serves those, the agent's xDS server
//     does.
//   - [Dir] writes each backend's resources as YAML files under
//     PATH/<backend>/, one per resource, atomically, removing files of
//     resources no longer desired only when asked to prune. A file is named
//     "<kind>.<group>_<namespace>_<name>.yaml" ([FileName]), every byte
//     other than a-z, 0-9, "." and "-" escaped as %XX, so any name (with
//     "/", "?", upper case, …) has its own file inside the directory; a name
//     too long for a file name is cut and ends in a hash, and the file's
//     object always holds the resource's identity. It takes every
//     resource, the xDS wrappers included.
//
// The kube sink's files each do one job: kube.go holds the sink, its
// per-backend state and the kind lookups; kube_options.go its options;
// kube_apply.go applying with ownership and patches; kube_compare.go the
// structural comparison of desired and live objects; kube_prune.go pruning
// and releasing patches; kube_drift.go Run's drift correction and retries.
//
// Both implement the agent's sink contract:
//
//	errs, err := s.Apply(ctx, "istio", desired, prune)
//
// where errs holds the resources that failed (absent ones succeeded) and err
// is set only when nothing could be attempted.
package sink
