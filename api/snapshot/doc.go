// Package snapshot owns meshrelay's data model: resources identified by group,
// version, kind, namespace and name with a canonical JSON body and a content
// hash; immutable, versioned snapshots of them; and the deltas that move one
// snapshot to another.
//
// A snapshot changes only when meaning changes. [Normalize] strips what
// Kubernetes adds to objects without meaning (managedFields, resourceVersion,
// uid, generation, creationTimestamp, and status for kinds whose status is
// churn), and bodies are canonical JSON, so the same object always has the
// same bytes and the same hash, whatever order it was read in.
//
// Typical use:
//
//	a, _ := snapshot.New(1, resources)
//	b, _ := snapshot.New(2, changed)
//	d := snapshot.Diff(a, b)        // only what changed
//	c, err := snapshot.Apply(a, d)  // c.Hash() == b.Hash()
//
// Every ID is bounded ([ID.Validate]: each field [MaxFieldBytes], names
// [MaxNameBytes], no control characters); what an agent sends as input must
// also be a Kubernetes object ([ID.ValidateObject], [Resource.ValidateObject];
// [InputDeltaFromProto] decodes an input's delta and checks both at once).
// IDs count in every size ([Resource.Size], [Delta.Size], [Snapshot.Size]),
// and a delta's deletes count too, so limits on bytes bound all a delta
// carries.
//
// IDs decoded from the network ([IDFromProto], [DeltaFromProto]) and from
// the store ([Unmarshal]) share one copy per process of each group,
// version, kind and namespace (unique.Make, which holds them weakly), so a
// fleet's inputs and outputs do not hold those few values once per object.
// Bodies are held once per process by content ([InternBody], weakly): an
// agent's input decoded by [InputDeltaFromProto] shares each body with
// every other input that has the same object, as clusters running the
// same apps do.
//
// [DecodeHeader] reads what names an object from its JSON exactly as
// encoding/json would, checking the whole body but decoding only the header;
// [DecodeLabels] reads metadata.labels the same way;
// [ObjectMembers] walks a JSON object's top-level members without decoding
// their values.
//
// Snapshots never change once built: Apply returns a new one and shares
// nothing mutable with its input. A delta that carries a whole run of a
// snapshot's resources ([FullDelta], [Diff] from an empty snapshot) shares
// them rather than copying them: deltas are read, never modified in place.
package snapshot
