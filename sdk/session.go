package sdk

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/meshrelay/meshrelay/api/meta"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
	"github.com/meshrelay/meshrelay/sdk/protocol"
)

// policyGroup is the API group whose objects are policies, wherever they arrive.
const policyGroup = "policy.meshrelay.io"

// clusterState is the session's raw view of one cluster.
type clusterState struct {
	stale    bool
	meshes   []string
	labels   map[string]string
	objects  map[snapshot.ID][]byte
	policies map[snapshot.ID][]byte
	// built is the cluster given to the last translation; it is reused
	// while the cluster's inputs do not change, so its decode cache
	// survives. It shares objects until the next change (borrowed).
	built    *clusterData
	borrowed bool
	// seen is set when a full update mentions the cluster.
	seen bool
}

// policySource identifies a policy: where it was defined and its key.
type policySource struct {
	cluster string
	key     snapshot.ID
}

// decodedPolicy caches the decoding and validation of one raw policy.
type decodedPolicy struct {
	raw    []byte
	policy policyv1alpha1.Policy // nil when invalid
	diags  []Diagnostic
}

// outKey names one output set.
type outKey struct{ cluster, backend string }

// session keeps one Translate stream's view of the fleet and what it sent.
type session struct {
	tt   Translator      // nil for a whole-fleet translator
	ft   FleetTranslator // nil for a per-target translator
	desc Description
	// validator is the translator's PolicyValidator, if it has one.
	validator PolicyValidator

	clusters map[string]*clusterState
	mgmt     map[snapshot.ID][]byte
	decoded  map[policySource]*decodedPolicy
	policies []policyv1alpha1.Policy
	diags    []Diagnostic
	// sent holds the keys of each output set as it was last sent.
	sent    map[outKey]protocol.KeySet
	targets *targets
	// fleet is the fleet of the last update, the base of the next one's.
	fleet *fleetData

	// The update in progress.
	open       bool
	generation uint64
	full       bool
	// keptAllowed is the Begin's kept_allowed: a set sent again may name
	// what did not change instead of sending it.
	keptAllowed bool
	// sameAllowed is the Begin's same_allowed: an output the answer
	// already sent for another cluster may be named instead. same numbers
	// the outputs the answer in progress sent; nil when not allowed.
	sameAllowed bool
	same        *sameOutputs
	// resend holds the clusters whose sets are sent whole this update.
	resend          map[string]bool
	touched         map[string]bool
	policiesTouched bool
	change          *change
	// scope holds the clusters the host asks about; nil for all of them.
	// prevScope is the previous update's; sameScope says the update's
	// Begin kept it (same_targets), so that no cluster entered or left it.
	scope, prevScope map[string]bool
	sameScope        bool
}

// newSession opens a session of t, a Translator or a FleetTranslator.
func newSession(t describer, desc Description) *session {
	s := &session{
		desc:     desc,
		clusters: map[string]*clusterState{},
		mgmt:     map[snapshot.ID][]byte{},
		decoded:  map[policySource]*decodedPolicy{},
		sent:     map[outKey]protocol.KeySet{},
	}
	s.validator, _ = t.(PolicyValidator)
	switch t := t.(type) {
	case Translator:
		s.tt = t
		s.targets = newTargets()
	case FleetTranslator:
		s.ft = t
	}
	return s
}

// sender sends one response message.
type sender func(*translatorv1.TranslateResponse) error

// handle applies one request message; at a Commit it translates and sends
// the answer.
func (s *session) handle(ctx context.Context, req *translatorv1.TranslateRequest, send sender) error {
	switch m := req.GetMsg().(type) {
	case *translatorv1.TranslateRequest_Begin:
		return s.begin(m.Begin)
	case *translatorv1.TranslateRequest_Cluster:
		if !s.open {
			return errors.New("cluster input outside an update")
		}
		return s.clusterInput(m.Cluster)
	case *translatorv1.TranslateRequest_Policies:
		if !s.open {
			return errors.New("policy change outside an update")
		}
		return s.policyChange(m.Policies)
	case *translatorv1.TranslateRequest_Commit:
		if !s.open {
			return errors.New("commit outside an update")
		}
		if g := m.Commit.GetGeneration(); g != s.generation {
			return fmt.Errorf("commit of generation %d ends update %d", g, s.generation)
		}
		s.open = false
		err := s.commit(ctx, send)
		// The change index and the touched set serve one update only.
		s.change, s.touched = nil, nil
		return err
	default:
		return fmt.Errorf("unknown request message %T", m)
	}
}

func (s *session) begin(b *translatorv1.Begin) error {
	if s.open {
		return fmt.Errorf("begin of generation %d while update %d is open", b.GetGeneration(), s.generation)
	}
	s.open, s.generation, s.full = true, b.GetGeneration(), b.GetFull()
	s.touched = map[string]bool{}
	s.policiesTouched = false
	s.change = newChange()
	s.prevScope, s.scope, s.sameScope = s.scope, nil, false
	switch {
	case b.GetSameTargets() && (s.full || !b.GetScoped() || s.prevScope == nil):
		return fmt.Errorf("begin of generation %d keeps the targets of no scoped update before it", s.generation)
	case b.GetSameTargets():
		s.scope, s.sameScope = s.prevScope, true
	case b.GetScoped():
		s.scope = make(map[string]bool, len(b.GetTargets()))
		for _, t := range b.GetTargets() {
			s.scope[t] = true
		}
	}
	s.keptAllowed = b.GetKeptAllowed() && !s.full
	s.sameAllowed = b.GetSameAllowed()
	s.resend = nil
	if names := b.GetResend(); len(names) > 0 {
		// The host lost this session's last answer for these clusters:
		// compute them again and send every set whole.
		s.resend = make(map[string]bool, len(names))
		for _, name := range names {
			s.resend[name] = true
			for _, b := range s.desc.Backends {
				delete(s.sent, outKey{name, b})
			}
			if s.targets != nil {
				s.targets.drop(name)
				s.targets.retry = append(s.targets.retry, name)
			}
		}
	}
	if s.full {
		for _, cs := range s.clusters {
			cs.seen = false
			cs.objects, cs.borrowed = map[snapshot.ID][]byte{}, false
			cs.policies = map[snapshot.ID][]byte{}
		}
		s.mgmt = map[snapshot.ID][]byte{}
		s.policiesTouched = true
	}
	return nil
}

func (s *session) clusterInput(in *translatorv1.ClusterInput) error {
	name := in.GetCluster()
	if name == "" {
		return errors.New("cluster input without a cluster name")
	}
	first := !s.touched[name]
	s.touched[name] = true
	if in.GetRemoved() {
		if cs, ok := s.clusters[name]; ok {
			s.removeCluster(name, cs)
		}
		return nil
	}
	cs, ok := s.clusters[name]
	if !ok {
		cs = &clusterState{objects: map[snapshot.ID][]byte{}, policies: map[snapshot.ID][]byte{}}
		s.clusters[name] = cs
	}
	cs.seen = true
	cs.labels = in.GetLabels() // whole in every part
	if first {
		cs.stale = in.GetStale()
		cs.meshes = slices.Clone(in.GetMeshes())
	} else {
		cs.stale = cs.stale || in.GetStale()
		cs.meshes = append(cs.meshes, in.GetMeshes()...)
	}
	for _, r := range in.GetUpserts() {
		k, err := snapshot.IDFromProto(r.GetId())
		if err != nil {
			return fmt.Errorf("cluster %q: %w", name, err)
		}
		if k.Group == policyGroup {
			cs.policies[k] = r.GetBody()
			s.policyChanged(k)
			continue
		}
		old, had := cs.objects[k]
		if had && bytes.Equal(old, r.GetBody()) {
			continue
		}
		s.own(cs)
		// Held once in the process however many clusters have it.
		body := snapshot.InternBody(r.GetBody(), sha256.Sum256(r.GetBody()))
		cs.objects[k] = body
		s.recordObject(name, objectChange{key: k, old: old, new: body})
	}
	for _, id := range in.GetDeletes() {
		k, err := snapshot.IDFromProto(id)
		if err != nil {
			return fmt.Errorf("cluster %q: %w", name, err)
		}
		if k.Group == policyGroup {
			delete(cs.policies, k)
			s.policyChanged(k)
			continue
		}
		old, had := cs.objects[k]
		if !had {
			continue
		}
		s.own(cs)
		delete(cs.objects, k)
		s.recordObject(name, objectChange{key: k, old: old})
	}
	return nil
}

// recordObject records a changed object in the change index. A full update
// computes every target, so it needs no index.
func (s *session) recordObject(cluster string, oc objectChange) {
	if !s.full {
		s.change.addObject(cluster, oc)
	}
}

// own gives the cluster its own objects map before a change, when the map
// is shared with the cluster built for the last translation.
func (s *session) own(cs *clusterState) {
	if cs.borrowed {
		cs.objects, cs.borrowed = maps.Clone(cs.objects), false
	}
}

// removeCluster drops a cluster from the view and records what that changed.
func (s *session) removeCluster(name string, cs *clusterState) {
	for k := range cs.policies {
		s.policyChanged(k)
	}
	if !s.full {
		for k, old := range cs.objects {
			s.change.addObject(name, objectChange{key: k, old: old})
		}
		if cs.built != nil {
			s.change.addMeta(name, cs.built.meshes, nil)
			s.change.presence[name] = true
			s.change.left[name] = cs.built.labels
		}
	}
	delete(s.clusters, name)
}

// policyChanged records that a policy of k's kind changed.
func (s *session) policyChanged(k snapshot.ID) {
	s.policiesTouched = true
	s.change.policyKinds[k.Kind] = true
}

func (s *session) policyChange(pc *translatorv1.PolicyChange) error {
	s.policiesTouched = true
	for _, r := range pc.GetUpserts() {
		k, err := snapshot.IDFromProto(r.GetId())
		if err != nil {
			return fmt.Errorf("policy change: %w", err)
		}
		s.mgmt[k] = r.GetBody()
		s.policyChanged(k)
	}
	for _, id := range pc.GetDeletes() {
		k, err := snapshot.IDFromProto(id)
		if err != nil {
			return fmt.Errorf("policy change: %w", err)
		}
		delete(s.mgmt, k)
		s.policyChanged(k)
	}
	return nil
}

// commit ends the update: it rebuilds what changed, translates and sends.
// A failed translation is answered with Done{error} only; the session's
// view still moves on, so the next update is a delta from this one.
func (s *session) commit(ctx context.Context, send sender) error {
	s.same = nil
	if s.sameAllowed {
		s.same = &sameOutputs{}
	}
	fleet, changed := s.buildFleet()
	s.change.clusterLabels = func(name string) map[string]string {
		if cd, ok := fleet.byName[name]; ok {
			return cd.labels
		}
		return s.change.left[name] // it left: its Services matched as it was
	}
	if s.tt != nil {
		return s.commitTargets(ctx, fleet, send)
	}
	for k := range s.sent {
		if s.scope != nil && !s.scope[k.cluster] {
			// The host forgets outputs it no longer asks for.
			delete(s.sent, k)
		}
	}
	req := &FleetRequest{Fleet: fleet.view(nil), Full: s.full, ChangedClusters: changed, PoliciesChanged: s.policiesTouched}
	resp := &FleetResponse{collector: newCollector(s.desc)}
	err := s.translate(ctx, req, resp)
	if err == nil {
		err = resp.Err()
	}
	var groups map[outKey][]Output
	if err == nil {
		groups, err = groupOutputs(fleet, s.desc.Backends, resp.Outputs())
	}
	if err != nil {
		return send(done(s.generation, err.Error()))
	}
	if err := s.sendOutputs(fleet, groups, send); err != nil {
		return err
	}
	if err := s.sendDiagnostics(slices.Concat(s.diags, resp.Diagnostics()), send); err != nil {
		return err
	}
	return send(done(s.generation, ""))
}

// sendDiagnostics sends diagnostics sorted, without duplicates.
func (s *session) sendDiagnostics(ds []Diagnostic, send sender) error {
	for _, d := range sortDiagnostics(ds) {
		if err := send(&translatorv1.TranslateResponse{Msg: &translatorv1.TranslateResponse_Diagnostic{Diagnostic: meta.DiagnosticToProto(d)}}); err != nil {
			return err
		}
	}
	return nil
}

// sortDiagnostics orders diagnostics by policy, cluster, path, severity and
// text, and drops duplicates.
func sortDiagnostics(ds []Diagnostic) []Diagnostic {
	ds = slices.Clone(ds)
	slices.SortFunc(ds, compareDiagnostics)
	return slices.Compact(ds)
}

func compareDiagnostics(a, b Diagnostic) int {
	return cmp.Or(cmp.Compare(a.Policy.Cluster, b.Policy.Cluster), cmp.Compare(a.Policy.Kind, b.Policy.Kind),
		cmp.Compare(a.Policy.Namespace, b.Policy.Namespace), cmp.Compare(a.Policy.Name, b.Policy.Name),
		cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Path, b.Path), cmp.Compare(a.Severity, b.Severity),
		cmp.Compare(a.Summary, b.Summary), cmp.Compare(a.Detail, b.Detail))
}

func done(generation uint64, errText string) *translatorv1.TranslateResponse {
	return &translatorv1.TranslateResponse{Msg: &translatorv1.TranslateResponse_Done{Done: &translatorv1.Done{Generation: generation, Error: errText, TakesSameTargets: true}}}
}

// translate calls the translator, turning a panic into an error.
func (s *session) translate(ctx context.Context, req *FleetRequest, resp *FleetResponse) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("translate panicked: %v\n%s", r, debug.Stack())
		}
	}()
	if err := s.ft.Translate(ctx, req, resp); err != nil {
		return fmt.Errorf("translate: %w", err)
	}
	return nil
}

// buildFleet assembles the fleet from the raw view, reusing the cluster of
// every cluster whose inputs did not change, and records in s.change the
// clusters that appeared, left or changed staleness or meshes. It returns
// the names of the clusters that changed, sorted.
func (s *session) buildFleet() (*fleetData, []string) {
	if !s.full && s.fleet != nil {
		return s.nextFleet()
	}
	var changed []string
	for name := range s.touched {
		if _, ok := s.clusters[name]; !ok {
			changed = append(changed, name) // removed
		}
	}
	clusters := make([]*clusterData, 0, len(s.clusters))
	for name, cs := range s.clusters {
		if s.full && !cs.seen {
			s.removeCluster(name, cs)
			changed = append(changed, name)
			continue
		}
		if (s.full || s.touched[name]) && s.rebuild(name, cs) {
			changed = append(changed, name)
		}
		clusters = append(clusters, cs.built)
	}
	slices.Sort(changed)
	changed = slices.Compact(changed)
	if s.policiesTouched {
		s.rebuildPolicies()
	}
	var shared *sharedValues
	if s.targets != nil {
		shared = s.targets.shared
	}
	s.fleet = newFleetData(clusters, slices.Clone(s.policies), shared)
	return s.fleet, changed
}

// nextFleet is buildFleet after a delta: it rebuilds the touched clusters
// only and derives the fleet from the previous one, so that a change costs
// what it touched, not the fleet's size.
func (s *session) nextFleet() (*fleetData, []string) {
	var changed []string
	updates := map[string]*clusterData{}
	for name := range s.touched {
		cs, ok := s.clusters[name]
		switch {
		case !ok:
			updates[name] = nil // removed
		case s.rebuild(name, cs):
			updates[name] = cs.built
		default:
			continue
		}
		changed = append(changed, name)
	}
	slices.Sort(changed)
	var policies []policyv1alpha1.Policy
	if s.policiesTouched {
		s.rebuildPolicies()
		policies = slices.Clone(s.policies)
	}
	if s.tt != nil {
		// A target's computation reads the fleet only while it runs, so
		// the fleet changes in place.
		s.fleet.apply(updates, policies, s.policiesTouched)
	} else {
		// A FleetTranslator may hold on to the Fleet of its last call.
		s.fleet = s.fleet.next(updates, policies, s.policiesTouched)
	}
	return s.fleet, changed
}

// rebuild builds a cluster's data again when its raw state changed, and
// records a change of its staleness or meshes. It reports whether it did.
func (s *session) rebuild(name string, cs *clusterState) bool {
	if cs.matches(name) {
		return false
	}
	old := cs.built
	cs.built, cs.borrowed = newClusterData(name, cs.stale, cs.meshes, cs.labels, cs.objects), true
	if s.targets != nil {
		cs.built.decoded = &s.targets.decoded
	}
	if old == nil || old.stale != cs.built.stale || !slices.Equal(old.meshes, cs.built.meshes) {
		var oldMeshes []string
		if old != nil {
			oldMeshes = old.meshes
		}
		s.change.addMeta(name, oldMeshes, cs.built.meshes)
		if old == nil {
			s.change.presence[name] = true
		}
	}
	if old != nil && !maps.Equal(old.labels, cs.built.labels) {
		s.change.addLabels(name, old.labels, cs.built.labels)
	}
	return true
}

// matches reports whether the built cluster still reflects the raw state.
func (cs *clusterState) matches(name string) bool {
	b := cs.built
	if b == nil || b.name != name || b.stale != cs.stale || !maps.Equal(b.labels, cs.labels) {
		return false
	}
	ms := slices.Clone(cs.meshes)
	slices.Sort(ms)
	if !slices.Equal(b.meshes, slices.Compact(ms)) {
		return false
	}
	return cs.borrowed || maps.EqualFunc(b.objects, cs.objects, bytes.Equal)
}

// rebuildPolicies decodes and validates every policy whose raw form
// changed, and keeps the valid ones and every policy diagnostic.
func (s *session) rebuildPolicies() {
	live := map[policySource][]byte{}
	for k, raw := range s.mgmt {
		live[policySource{key: k}] = raw
	}
	for name, cs := range s.clusters {
		for k, raw := range cs.policies {
			live[policySource{cluster: name, key: k}] = raw
		}
	}
	for src := range s.decoded {
		if _, ok := live[src]; !ok {
			delete(s.decoded, src)
		}
	}
	s.policies, s.diags = nil, nil
	srcs := slices.SortedFunc(maps.Keys(live), func(a, b policySource) int {
		return cmp.Or(cmp.Compare(a.cluster, b.cluster), a.key.Compare(b.key))
	})
	for _, src := range srcs {
		raw := live[src]
		d, ok := s.decoded[src]
		if !ok || !bytes.Equal(d.raw, raw) {
			d = s.decodePolicy(src, raw)
			s.decoded[src] = d
		}
		if d.policy != nil {
			s.policies = append(s.policies, d.policy)
		}
		s.diags = append(s.diags, d.diags...)
	}
}

// decodePolicy decodes, validates and offers one policy to the
// translator's PolicyValidator.
func (s *session) decodePolicy(src policySource, raw []byte) *decodedPolicy {
	ref := PolicyRef{Kind: src.key.Kind, Namespace: src.key.Namespace, Name: src.key.Name, Cluster: src.cluster}
	d := &decodedPolicy{raw: raw}
	ps, err := policyv1alpha1.Decode(raw)
	if err == nil && len(ps) != 1 {
		err = fmt.Errorf("want one policy, got %d", len(ps))
	}
	if err != nil {
		d.diags = []Diagnostic{{Severity: SeverityError, Summary: "policy does not decode", Detail: err.Error(), Policy: ref}}
		return d
	}
	p := ps[0]
	if src.cluster != "" {
		ann := maps.Clone(p.GetAnnotations())
		if ann == nil {
			ann = map[string]string{}
		}
		ann[SourceClusterAnnotation] = src.cluster
		p.SetAnnotations(ann)
	}
	valid := true
	for _, fe := range p.Validate() {
		valid = false
		d.diags = append(d.diags, Diagnostic{Severity: SeverityError, Summary: fe.ErrorBody(), Path: fe.Field, Policy: ref})
	}
	if src.cluster != "" && valid {
		for _, td := range scopeToCluster(p, src.cluster) {
			valid = valid && td.Severity != SeverityError
			d.diags = append(d.diags, td)
		}
	}
	if s.validator != nil && valid {
		for _, vd := range s.validator.ValidatePolicy(p) {
			if vd.Policy == (PolicyRef{}) {
				vd.Policy = ref
			}
			if vd.Severity == SeverityError {
				valid = false
			}
			d.diags = append(d.diags, vd)
		}
	}
	if valid {
		d.policy = p
	}
	return d
}

// groupOutputs groups outputs by cluster and backend and refuses outputs
// for clusters outside the fleet and duplicate objects.
func groupOutputs(fleet *fleetData, backends []string, outs []Output) (map[outKey][]Output, error) {
	groups := map[outKey][]Output{}
	for i, o := range outs {
		if _, ok := fleet.byName[o.Cluster]; !ok {
			return nil, fmt.Errorf("emitted %s %s/%s to cluster %q, which is not in the fleet", o.Kind, o.Namespace, o.Name, o.Cluster)
		}
		if i > 0 {
			p := outs[i-1]
			if p.Cluster == o.Cluster && p.Backend == o.Backend && p.ID == o.ID {
				return nil, fmt.Errorf("emitted %s %s/%s to cluster %q twice", o.Kind, o.Namespace, o.Name, o.Cluster)
			}
		}
		k := outKey{o.Cluster, o.Backend}
		groups[k] = append(groups[k], o)
	}
	return groups, nil
}

// entered reports whether cluster entered the scope with this update. Its
// every set is sent, empty ones too: the host may hold an output of it
// from before (another replica computed it), which an empty set replaces.
func (s *session) entered(cluster string) bool {
	return s.prevScope != nil && !s.prevScope[cluster] && (s.scope == nil || s.scope[cluster])
}

// sendOutputs sends every (cluster, backend) set that changed since the
// last Done, or every set on a full update or of a cluster that entered
// the scope, split into parts.
func (s *session) sendOutputs(fleet *fleetData, groups map[outKey][]Output, send sender) error {
	for k := range s.sent {
		if _, ok := fleet.byName[k.cluster]; !ok {
			delete(s.sent, k)
		}
	}
	for _, c := range fleet.clusters {
		if s.scope != nil && !s.scope[c.name] {
			continue
		}
		for _, b := range s.desc.Backends {
			k := outKey{c.name, b}
			sent, _, err := s.sendSet(c.name, b, groups[k], keysOf(groups[k]), send)
			if err != nil {
				return err
			}
			s.sent[k] = sent
		}
	}
	return nil
}

// sendSet sends one output set when it differs from what was sent of it
// last, and always on a full update, or when its cluster entered the
// scope or is to be sent whole again; a set never sent and still empty is
// not sent, as nothing changed for the host. When the host allows it, a
// set sent again names the resources it sent last unchanged as kept
// instead of sending them. keys are the outputs' (keysOf). It returns the
// set's keys, which session.sent is to keep, and whether it sent the set.
func (s *session) sendSet(cluster, backend string, outs []Output, keys setKeys, send sender) (protocol.KeySet, bool, error) {
	set := keys.set
	prev, had := s.sent[outKey{cluster, backend}]
	whole := s.full || s.entered(cluster) || s.resend[cluster]
	switch {
	case had && !whole && slices.Equal(prev, set):
		return set, false, nil
	case !had && len(outs) == 0 && !whole:
		return set, false, nil
	}
	var kept protocol.KeySet
	if s.keptAllowed && had && !whole {
		kept = prev
	}
	for _, part := range splitOutputs(cluster, backend, outs, keys.each, kept, s.same, protocol.PartBytes) {
		if err := send(&translatorv1.TranslateResponse{Msg: &translatorv1.TranslateResponse_Output{Output: part}}); err != nil {
			return nil, false, err
		}
	}
	return set, true, nil
}

// splitOutputs cuts one output set into parts whose bodies, and the
// identities of those named kept, add up to at most maxBytes each; a
// larger object gets a part of its own. An empty set is one empty part.
// keys are the outputs' keys, in their order; an output whose key kept
// holds is named in the part's kept instead of sent, and one the answer
// sent already for another cluster (same) by its number in the part's
// same.
func splitOutputs(cluster, backend string, outs []Output, keys []protocol.ResourceKey, kept protocol.KeySet, same *sameOutputs, maxBytes int) []*translatorv1.ClusterOutput {
	isKept := func(i int) bool { return kept != nil && kept.Has(keys[i]) }
	// named[i] is the number of the output the answer sent that output i
	// is the same as, or -1 when it is sent (or kept). The parts go in the
	// order of outs, so the outputs sent are numbered in the order they go.
	var named []int64
	if same != nil {
		named = make([]int64, len(outs))
		for i := range outs {
			named[i] = -1
			if !isKept(i) {
				named[i] = same.name(keys[i])
			}
		}
	}
	isSame := func(i int) bool { return named != nil && named[i] >= 0 }
	size := func(i int) int {
		switch {
		case isSame(i):
			return 5 // a varint
		case isKept(i):
			return outs[i].ID.Size()
		}
		return len(outs[i].Body)
	}
	groups := meta.Split(indices(len(outs)), size, maxBytes)
	parts := make([]*translatorv1.ClusterOutput, len(groups))
	for i, g := range groups {
		part := &translatorv1.ClusterOutput{Cluster: cluster, Backend: backend, More: i < len(groups)-1}
		for _, j := range g {
			if isKept(j) {
				part.Kept = append(part.Kept, snapshot.IDToProto(outs[j].ID))
				continue
			}
			if isSame(j) {
				part.Same = append(part.Same, uint32(named[j]))
				continue
			}
			part.Resources = append(part.Resources, &snapshotv1.Resource{
				Id:   snapshot.IDToProto(outs[j].ID),
				Body: outs[j].Body,
			})
		}
		parts[i] = part
	}
	return parts
}

// indices returns 0, 1, …, n-1.
func indices(n int) []int {
	is := make([]int, n)
	for i := range is {
		is[i] = i
	}
	return is
}

// describeToProto converts a description.
func describeToProto(d Description) *translatorv1.DescribeResponse {
	return &translatorv1.DescribeResponse{Name: d.Name, Version: d.Version, Backends: d.Backends, Meshes: d.Meshes, InputKinds: d.InputKinds, OutputKinds: d.OutputKinds}
}

// validateDescription checks what the host relies on.
func validateDescription(d Description) error {
	var errs []string
	if d.Name == "" {
		errs = append(errs, "name is empty")
	}
	if len(d.Backends) == 0 {
		errs = append(errs, "no backends")
	}
	for _, b := range d.Backends {
		if b == "" {
			errs = append(errs, "empty backend name")
		}
	}
	if err := protocol.CheckDeclaration(d.Backends, d.Meshes, d.InputKinds, d.OutputKinds); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid description of translator %q: %s", d.Name, strings.Join(errs, ", "))
	}
	return nil
}
