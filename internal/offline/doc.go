// Package offline translates with no server and no agents. [Translate]
// runs translation once over files — the clusters are directories of YAML,
// the policies a directory, the translators real plugins (or in-process
// ones) — and backs `meshrelay translate`, for CI pipelines and debugging.
// [Model] keeps a fleet's inputs and policies in memory and translates
// them again after each change: the chaos soak's checker (internal/bench)
// holds what every cluster's outputs must be with it.
package offline
