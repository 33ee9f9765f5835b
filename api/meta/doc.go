// Package meta is the vocabulary every layer of meshrelay shares: the api,
// the plugin SDK, the plugins and core all import it, and it imports nothing
// of meshrelay but the generated protocol (proto/), so every package may
// import it.
//
// It owns:
//
//   - [Diagnostic], a problem a user can fix, with one [Severity] whose
//     values ("Error", "Warning", "Info") are also those of a policy's status
//     (api/policy/v1alpha1) and of the admin API; [DiagnosticToProto] and
//     [DiagnosticFromProto] are the one conversion to and from the plugin
//     protocol;
//   - [PolicyRef], the name of a policy and of the cluster that defined it;
//   - the labels and annotations that say who owns an output object and
//     which policies it derives from ([ManagedByLabel], [PoliciesAnnotation]
//     and the rest), written by the SDK and read by the agent and the server;
//   - [Split], which cuts a list into parts of a bounded byte size for
//     messages on the wire;
//   - [Printable], the one escaping of control characters for every
//     human-readable output (the CLI's tables and descriptions, the web
//     UI's text views) of text that agents, plugins or policies control.
//
// A resource's identity is [github.com/meshrelay/meshrelay/api/snapshot.ID];
// the SDK's outputs and objects carry it too.
package meta
