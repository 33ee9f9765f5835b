// Package manifest reads a directory tree of Kubernetes manifests into
// snapshots: the agent's dir source (core/agent/discovery.Dir) and the
// server's dir policy source (core/server.DirPolicies) both read with it,
// each passing in what it keeps of an object and how it builds the
// snapshot ([Options]).
//
// [Dir] reads every file ending in .yaml, .yml or .json below its
// directory, skipping names that start with "."; a file may hold several
// documents separated by "---" lines, and a document of a kind ending in
// "List" stands for its items. Malformed files and documents are logged and
// skipped, never fatal. Files over [MaxFileSize] are skipped, and a tree of
// more than [MaxFiles] manifests is an error. Only files whose content
// changed are parsed again.
//
//	d := manifest.NewDir("policies/", manifest.Options{Logger: logger})
//	s, err := d.Snapshot()                 // read once
//	err = d.Run(ctx, func(s *snapshot.Snapshot) { … }) // watch and publish changes
//
// Run watches the directories it reads (fsnotify), reads again shortly
// after a change and every [DefaultResync] in case a notification was lost,
// and polls a directory it cannot watch, such as one that does not exist
// yet. It publishes only when the snapshot's content changed.
package manifest
