// Package snapshotv1 is the generated Go code of proto/snapshot/v1: the wire
// form of resources, resource IDs and snapshot deltas. Use api/snapshot to
// build and check them; regenerate with `make generate`.
package snapshotv1
