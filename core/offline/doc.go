// Package offline runs translation once over files, with no server and no
// agents: the clusters are directories of YAML, the policies a directory,
// the translators real plugins (or in-process ones). It backs `meshrelay
// translate`, for CI pipelines and debugging.
package offline
