// Package rollout is the staged rollout of the management source's policy
// changes, as pure logic: no server, store or clock of its own.
//
// A [Record] is the fleet's rollout state, which the server keeps in its
// store (compare-and-set, so that replicas take turns and a replica that
// dies mid-rollout leaves the next one exactly where it was). It names the
// revision the fleet holds outside a rollout ([Record.Live]) and the
// current or last [Rollout]. A revision is a management-source policy set,
// named by its hash.
//
// [Record.Source] hears of the policy set the management source holds and
// of its RolloutStrategy: without a strategy the set becomes live at once;
// with one, a change starts a rollout from the live revision to the new
// one ([Plan]): its clusters are divided into the strategy's stages
// (the first stage that selects a cluster takes it; the clusters no stage
// selects form a last stage). A change during a rollout waits: the source
// holds the latest set, which starts as the next rollout when this one
// completes or is undone (queue-and-collapse: at most two live revisions).
//
// The owner observes each released cluster's health ([Rollout.Observe])
// and calls [Record.Advance] with the time: a stage releases its clusters
// at most MaxConcurrent at a time, advances when all of them have been
// healthy for MinHealthy, waits for [Rollout.Approve] when gated, and
// pauses when more clusters failed than its budget allows or it ran past
// its ProgressDeadline. [Rollout.Pause], [Rollout.Resume] and
// [Record.Undo] are the administrator's. [Record.Revisions] says which
// revisions are live and which clusters hold the previous one.
package rollout
