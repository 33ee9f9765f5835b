package host

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/meshrelay/meshrelay/api/meta"
	"github.com/meshrelay/meshrelay/api/snapshot"
	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
	"github.com/meshrelay/meshrelay/sdk/protocol"
)

// Session is the host's side of one Translate stream, and the one owner of
// what the plugin holds: given the [View] the host wants the plugin to
// have, it sends the whole view or only what changed, in parts, and checks
// and assembles the answer. Calls must not overlap.
type Session struct {
	plugin    string
	backends  []string
	maxOutput int

	stream     translatorv1.Translator_TranslateClient
	cancel     context.CancelFunc
	generation uint64
	// held is the view the plugin answered for last; holds is false until
	// it answered one, and again after a failed update, whose next update
	// is full.
	held  View
	holds bool
	// checked holds, by (cluster, backend), the resources of the plugin's
	// last answer for the set, which passed the checks, as digests of
	// their identity and body (protocol.ResourceKey). A resource answered again
	// unchanged is not checked again, so an answer costs the host what
	// changed; a digest, not the resource, keeps what that costs small.
	checked map[[2]string]protocol.KeySet
	// bodies holds the digests of resources that passed the checks lately,
	// in any set: an object the plugin emits the same for many clusters
	// (an edit of a fleet-wide policy, the first outputs of a fleet
	// running the same apps) is checked once.
	bodies checkedBodies
	// answered are the digests of the sets of the last answer received,
	// kept as checked once it is accepted.
	answered map[[2]string]protocol.KeySet
	// takesSame is set once the plugin said it takes Begin.same_targets;
	// begun and begunScoped are the targets and scope of the last Begin
	// sent.
	takesSame   bool
	begun       []string
	begunScoped bool
}

// Open starts a Translate stream on client with the plugin of that name,
// which serves backends (as it described them) and may answer at most
// maxOutput bytes of bodies per (cluster, backend) set. The stream lives
// until Close.
func Open(client translatorv1.TranslatorClient, plugin string, backends []string, maxOutput int) (*Session, error) {
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := client.Translate(ctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("open translate session: %w", err)
	}
	return &Session{
		plugin: plugin, backends: backends, maxOutput: maxOutput, stream: stream, cancel: cancel,
		checked: map[[2]string]protocol.KeySet{}, bodies: newCheckedBodies(checkedBodiesLimit),
	}, nil
}

// Close ends the stream.
func (s *Session) Close() {
	_ = s.stream.CloseSend()
	s.cancel()
}

// Translate brings the plugin to v and returns its checked answer. When v
// is the view the plugin holds, nothing is sent and the Result's Sent is
// false. Any error but one wrapping [ErrPluginFailed] leaves the session
// unusable; one wrapping [ErrProtocol] means the plugin answered something
// the host refuses.
func (s *Session) Translate(ctx context.Context, v View) (Result, error) {
	u := s.plan(v)
	if u.none(s.held) {
		if s.holds {
			s.held = v // the same view, under the number the next one names as its base
		}
		return Result{}, nil
	}
	stop := context.AfterFunc(ctx, s.cancel)
	defer stop()
	res, lost, err := s.update(ctx, u, v)
	if err != nil {
		return Result{}, err
	}
	if len(lost) > 0 {
		// The plugin kept resources of sets whose last answer the host no
		// longer holds as it was answered (View.Delivered): ask for those
		// clusters' sets whole, in an update that may keep nothing.
		again, _, err := s.update(ctx, update{scoped: v.Scoped, targets: v.Targets, resend: lost}, v)
		if err != nil {
			return Result{}, err
		}
		res = merge(res, again)
		res.Resent = lost
	}
	res.Sent, res.Full, res.Clusters = true, u.full, len(u.clusters)
	return res, nil
}

// update sends u and receives the plugin's answer, and the clusters of
// the sets it could not assemble (see receive).
func (s *Session) update(ctx context.Context, u update, v View) (Result, []string, error) {
	s.generation++
	gen := s.generation
	s.holds = false // until the plugin answers this update
	if err := s.send(u, gen); err != nil {
		return Result{}, nil, fmt.Errorf("send update %d: %w", gen, s.streamErr(ctx, err))
	}
	res, lost, err := s.receive(ctx, gen, v, u)
	if err != nil {
		return Result{}, nil, err
	}
	s.held, s.holds = v, true
	s.keepChecked(v, u)
	return res, lost, nil
}

// merge adds the sets of a second answer to the first's, the second's
// replacing any of the same cluster and backend, and takes its
// diagnostics, which are all the plugin's current ones.
func merge(first, second Result) Result {
	again := map[[2]string]bool{}
	for _, o := range second.Outputs {
		again[[2]string{o.Cluster, o.Backend}] = true
	}
	outs := slices.DeleteFunc(first.Outputs, func(o ClusterOutput) bool { return again[[2]string{o.Cluster, o.Backend}] })
	outs = append(outs, second.Outputs...)
	slices.SortFunc(outs, compareOutputs)
	return Result{Outputs: outs, Diagnostics: second.Diagnostics}
}

// plan works out the update that turns the view the plugin holds into v:
// everything when it holds none.
func (s *Session) plan(v View) update {
	named := v.Base != 0 && v.Base == s.held.Seq
	// A view changed in place compares only with the view it was changed
	// from: the map the session holds is that same map, changed since.
	u := update{full: !s.holds || (v.InPlace && !named), scoped: v.Scoped, targets: v.Targets}
	u.keptAllowed = !u.full && v.Delivered != nil
	u.sameAllowed = true
	held := s.held
	if u.full {
		held = View{}
	}
	// before is what the plugin holds of a cluster.
	before := func(name string) (Cluster, bool) {
		c, ok := held.Clusters[name]
		return c, ok
	}
	if v.InPlace && !u.full {
		before = func(name string) (Cluster, bool) {
			c, ok := v.Was[name]
			return c, ok
		}
	}
	// Only the clusters that changed are sorted: a cycle after one
	// cluster's change should not cost a sort of the fleet.
	var changed, removed []string
	differs := func(name string, c Cluster) bool {
		old, had := before(name)
		return !had || !old.Same(c)
	}
	if !u.full && named {
		// The view names what may differ from the one the plugin holds.
		for _, name := range slices.Compact(slices.Sorted(slices.Values(v.Changed))) {
			if c, ok := v.Clusters[name]; ok {
				if differs(name, c) {
					changed = append(changed, name)
				}
			} else if _, had := before(name); had {
				removed = append(removed, name)
			}
		}
	} else {
		for name, c := range v.Clusters {
			if differs(name, c) {
				changed = append(changed, name)
			}
		}
		for name := range held.Clusters {
			if _, ok := v.Clusters[name]; !ok {
				removed = append(removed, name)
			}
		}
	}
	slices.Sort(changed)
	slices.Sort(removed)
	for _, name := range changed {
		c := v.Clusters[name]
		old, had := before(name)
		base := snapshot.Empty
		if had {
			base = old.Input
		}
		d := snapshot.Diff(base, c.Input)
		u.clusters = append(u.clusters, clusterUpdate{name: name, stale: c.Stale, meshes: c.Meshes, labels: c.Labels, upserts: d.Upserts, deletes: d.Deletes})
	}
	for _, name := range removed {
		u.clusters = append(u.clusters, clusterUpdate{name: name, removed: true})
	}
	pd := snapshot.Diff(orEmpty(held.Policies), orEmpty(v.Policies))
	u.policyUpserts, u.policyDeletes = pd.Upserts, pd.Deletes
	return u
}

// none reports whether u changes nothing of held, the view the plugin holds.
func (u update) none(held View) bool {
	return !u.full && len(u.clusters) == 0 && len(u.policyUpserts)+len(u.policyDeletes) == 0 &&
		u.scoped == held.Scoped && slices.Equal(u.targets, held.Targets)
}

func orEmpty(s *snapshot.Snapshot) *snapshot.Snapshot {
	if s == nil {
		return snapshot.Empty
	}
	return s
}

// keepChecked records the resources of the sets answered, and forgets the
// sets of clusters that left the view with update u. It looks over every
// set only when some cluster left (or u replaced the whole view): after a
// one-cluster change it costs the sets answered, not the fleet.
func (s *Session) keepChecked(v View, u update) {
	maps.Copy(s.checked, s.answered)
	s.answered = nil
	if !u.full && !slices.ContainsFunc(u.clusters, func(c clusterUpdate) bool { return c.removed }) {
		return
	}
	for key := range s.checked {
		if _, ok := v.Clusters[key[0]]; !ok {
			delete(s.checked, key)
		}
	}
}

// streamErr prefers the call's own context error to the transport's echo of it.
func (s *Session) streamErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return err
}

func (s *Session) send(u update, gen uint64) error {
	req := func(m *translatorv1.TranslateRequest) error { return s.stream.Send(m) }
	begin := &translatorv1.Begin{Generation: gen, Full: u.full, Scoped: u.scoped, KeptAllowed: u.keptAllowed, SameAllowed: u.sameAllowed, Resend: u.resend}
	// The targets change far less often than the clusters: when they are
	// those of the last Begin, a plugin that takes it is told so instead
	// of being sent every target's name again.
	if !u.full && u.scoped && s.takesSame && s.begunScoped && slices.Equal(u.targets, s.begun) {
		begin.SameTargets = true
	} else {
		begin.Targets = u.targets
	}
	s.begun, s.begunScoped = u.targets, u.scoped
	if err := req(&translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Begin{Begin: begin}}); err != nil {
		return err
	}
	for _, c := range u.clusters {
		for i, part := range meta.Split(c.upserts, snapshot.Resource.Size, protocol.PartBytes) {
			in := &translatorv1.ClusterInput{Cluster: c.name, Removed: c.removed, Stale: c.stale, Meshes: c.meshes, Labels: c.labels, Upserts: resourcesToProto(part)}
			if i == 0 {
				in.Deletes = idsToProto(c.deletes)
			}
			if err := req(&translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Cluster{Cluster: in}}); err != nil {
				return err
			}
		}
	}
	if len(u.policyUpserts)+len(u.policyDeletes) > 0 {
		for i, part := range meta.Split(u.policyUpserts, snapshot.Resource.Size, protocol.PartBytes) {
			pc := &translatorv1.PolicyChange{Upserts: resourcesToProto(part)}
			if i == 0 {
				pc.Deletes = idsToProto(u.policyDeletes)
			}
			if err := req(&translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Policies{Policies: pc}}); err != nil {
				return err
			}
		}
	}
	return req(&translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Commit{Commit: &translatorv1.Commit{Generation: gen}}})
}

// resourcesToProto converts a part of resources to their wire form.
func resourcesToProto(rs []snapshot.Resource) []*snapshotv1.Resource {
	out := make([]*snapshotv1.Resource, len(rs))
	for i, r := range rs {
		out[i] = snapshot.ResourceToProto(r)
	}
	return out
}

func idsToProto(ids []snapshot.ID) []*snapshotv1.ResourceID {
	out := make([]*snapshotv1.ResourceID, len(ids))
	for i, id := range ids {
		out[i] = snapshot.IDToProto(id)
	}
	return out
}

// Describe asks a plugin what it is, and refuses an answer without a name
// or backends, or with a declaration CheckDeclaration refuses.
func Describe(ctx context.Context, client translatorv1.TranslatorClient) (*translatorv1.DescribeResponse, error) {
	d, err := client.Describe(ctx, &translatorv1.DescribeRequest{})
	if err != nil {
		return nil, fmt.Errorf("describe: %w", err)
	}
	if d.GetName() == "" || len(d.GetBackends()) == 0 {
		return nil, fmt.Errorf("describe: %w: the plugin gave no name or no backends", ErrProtocol)
	}
	if err := protocol.CheckDeclaration(d.GetBackends(), d.GetMeshes(), d.GetInputKinds(), d.GetOutputKinds()); err != nil {
		return nil, fmt.Errorf("describe: %w: plugin %q declares %w", ErrProtocol, d.GetName(), err)
	}
	return d, nil
}
