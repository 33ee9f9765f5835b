// Package preview translates a proposed change of the management source's
// policies over a fleet, without changing anything, and reports what it
// would do: per cluster and backend, the resources it would create, change
// (with a unified diff of their YAML) and delete, and the diagnostics it
// would add or clear. `meshrelay diff` runs it in the server, over every
// cluster's input in the store and with the installed plugins (each on a
// scratch session of its own, see pluginhost.Scratch), or offline over
// directories.
//
//	rep, err := preview.Run(ctx, translators, preview.Fleet{Inputs: inputs, Policies: current},
//		preview.Change{Upserts: proposed})
//	if rep.Empty() { ... nothing would change ... }
//
// The fleet is translated twice in a fresh engine over an in-memory view
// (engine.MemView): with the policies as they are, then, incrementally,
// with the change. A translator that fails makes the preview fail: a
// partial answer is never a diff.
package preview
