package trust

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshrelay/meshrelay/api/meta"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/meshrelay/meshrelay/core/store"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// MaxReportBytes bounds a whole TrustReport message; the server's gate
// holds the Report RPC's messages to it before gRPC reads them.
const MaxReportBytes = 32 << 10

// Bounds on the parts of what an agent may report about its mesh's trust.
const (
	maxCertBytes = 16 << 10
	maxRoots     = 16
	maxErrorLen  = 1024
	maxPolicyLen = 253 + 1 + 253 // namespace/name
)

// reportPrefix keys each cluster's last trust report in the store.
const reportPrefix = "report/"

// root is one mesh root as the store keeps it: the signing
// certificate and its chain, and the key sealed like the relay CA's.
type root struct {
	Cert string `json:"cert"`
	Key  string `json:"key"`
	ca   *pki.CA
}

// state is one MeshTrust's roots and rotation phase, shared by
// replicas through the store. Current is the newest root; Old is the root
// being replaced, kept while it is still trusted.
type state struct {
	Phase      string `json:"phase"`
	Current    *root  `json:"current"`
	Old        *root  `json:"old,omitempty"`
	Generation int64  `json:"generation"`
	// Source is the fingerprint of the root last read from files or a Secret.
	Source string `json:"source,omitempty"`

	// version is the store's version of the record this state was read
	// from (0 for a state not stored yet): the next state is stored only
	// over it.
	version uint64
}

// signer returns the root that signs intermediates in the state's phase.
func (st *state) signer() *pki.CA {
	if st.Phase == policyv1alpha1.TrustPhaseAddingRoot && st.Old != nil {
		return st.Old.ca
	}
	return st.Current.ca
}

// trusted returns the roots the clusters must trust, the signer first.
func (st *state) trusted() []*pki.CA {
	if st.Old == nil {
		return []*pki.CA{st.Current.ca}
	}
	if st.Phase == policyv1alpha1.TrustPhaseAddingRoot {
		return []*pki.CA{st.Old.ca, st.Current.ca}
	}
	return []*pki.CA{st.Current.ca, st.Old.ca}
}

// bundle returns the PEM trust anchors of the trusted roots.
func (st *state) bundle() []byte {
	var out []byte
	for _, ca := range st.trusted() {
		out = append(out, pki.CertificatesPEM(ca.Anchor())...)
	}
	return out
}

// anchors returns the fingerprints of the trusted roots' anchors.
func (st *state) anchors() []string {
	var out []string
	for _, ca := range st.trusted() {
		if fp := pki.Fingerprint(ca.Anchor()); !slices.Contains(out, fp) {
			out = append(out, fp)
		}
	}
	return out
}

// report is what a cluster's agent last said about its mesh's trust.
type report struct {
	Policy  string    `json:"policy"`
	CACert  []byte    `json:"caCert,omitempty"`
	Roots   []string  `json:"roots,omitempty"`
	Bounced int32     `json:"bounced,omitempty"`
	Pending int32     `json:"pending,omitempty"`
	Error   string    `json:"error,omitempty"`
	At      time.Time `json:"at"`
}

// view is what the last reconcile found for one MeshTrust.
type view struct {
	policy   *policyv1alpha1.MeshTrust
	state    *state
	clusters []string
	reports  map[string]report
	err      string
}

// Manager keeps the fleet's mesh trust: the MeshTrust policies of the
// management source, each one's roots in the store, the clusters' reports,
// and the rotation from phase to phase. A phase ends only when every
// cluster the policy selects reported that it got there, so at every
// moment each cluster trusts the root that signed every other cluster's
// intermediate. Make one with New.
type Manager struct {
	opts Options
	deps Deps
	log  *slog.Logger
	wake chan struct{}

	mu       sync.Mutex
	policies []*policyv1alpha1.MeshTrust
	views    map[string]*view
	owner    map[string]string // cluster → policy key
	diags    []meta.Diagnostic
}

// Options configure a Manager.
type Options struct {
	// Interval is how often the manager reconciles when nothing pokes it.
	Interval time.Duration
}

// Deps are what a Manager reads and writes; all but Secrets and Logger are
// required.
type Deps struct {
	Store  Store
	Fleet  Fleet
	Sealer Sealer
	// Secrets reads a root kept in a Secret; nil when the policy source
	// cannot (a MeshTrust whose root is in a Secret then fails).
	Secrets SecretReader
	Logger  *slog.Logger
}

// Store is what a Manager needs of the store: the registry, for which
// clusters are registered, and the trust records (each MeshTrust's roots
// under its namespace/name, each cluster's last report).
type Store interface {
	store.RegistryReader
	store.Trust
}

// Fleet is what a Manager reads of the server it runs in.
type Fleet interface {
	// Meshes returns the meshes each cluster of the fleet view runs, by
	// cluster name.
	Meshes() map[string][]string
	// SafeMode reports whether the server is in safe mode, where no
	// rotation starts or moves on.
	SafeMode() bool
}

// Sealer seals the private key of a mesh root for the store, and opens it.
type Sealer interface {
	// SealCA returns the CA's certificates and its key sealed.
	SealCA(ca *pki.CA) (certPEM, sealedKey []byte, err error)
	// OpenCA returns the CA whose certificates and sealed key SealCA
	// returned, or an error when the key does not open.
	OpenCA(certPEM, sealedKey []byte) (*pki.CA, error)
}

// New returns a Manager; Run runs it.
func New(opts Options, deps Deps) *Manager {
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{opts: opts, deps: deps, log: log, wake: make(chan struct{}, 1), views: map[string]*view{}, owner: map[string]string{}}
}

// policyKey is a MeshTrust's namespace/name, which keys its roots in the
// store.
func policyKey(p *policyv1alpha1.MeshTrust) string { return p.Namespace + "/" + p.Name }

// IsPolicy reports whether a management resource is a MeshTrust: the
// Manager's, never a translator's.
func IsPolicy(r snapshot.Resource) bool {
	return r.ID.Group == policyv1alpha1.GroupName && r.ID.Kind == policyv1alpha1.KindMeshTrust
}

// SetPolicies takes the valid MeshTrusts of the management source; the
// invalid ones get their status from validation like any policy.
func (t *Manager) SetPolicies(p *snapshot.Snapshot) {
	var out []*policyv1alpha1.MeshTrust
	for r := range p.All() {
		if !IsPolicy(r) {
			continue
		}
		ps, err := policyv1alpha1.Decode(r.Body)
		if err != nil || len(ps) != 1 || len(ps[0].Validate()) > 0 {
			continue
		}
		if mt, ok := ps[0].(*policyv1alpha1.MeshTrust); ok {
			out = append(out, mt)
		}
	}
	slices.SortFunc(out, func(a, b *policyv1alpha1.MeshTrust) int { return cmp.Compare(policyKey(a), policyKey(b)) })
	t.mu.Lock()
	t.policies = out
	t.mu.Unlock()
	t.poke()
}

// poke asks for a reconcile soon.
func (t *Manager) poke() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// Run reconciles on every interval and whenever a policy or a report
// changes, until ctx ends; it returns nil.
func (t *Manager) Run(ctx context.Context) error {
	tick := time.NewTicker(t.opts.Interval)
	defer tick.Stop()
	for {
		t.reconcile(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-t.wake:
		}
	}
}

// reconcile brings every MeshTrust's state up to date and advances its
// rotation where every selected cluster is ready.
func (t *Manager) reconcile(ctx context.Context) {
	t.mu.Lock()
	policies := t.policies
	if len(policies) == 0 {
		// Nothing to select clusters for: the registry is not read, so
		// an idle replica without MeshTrusts does not copy it every
		// interval.
		t.views, t.owner, t.diags = map[string]*view{}, map[string]string{}, nil
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	fleet, err := t.fleet(ctx)
	if err != nil {
		t.log.Warn("mesh trust: read the fleet", "error", err)
		return
	}
	views := map[string]*view{}
	owner := map[string]string{}
	var diags []meta.Diagnostic
	for _, p := range policies {
		v := &view{policy: p, reports: map[string]report{}}
		views[policyKey(p)] = v
		v.clusters, diags = selectClusters(p, fleet, owner, diags)
		if err := t.reconcileOne(ctx, v); err != nil {
			v.err = err.Error()
			diags = append(diags, diag(p, meta.SeverityError, "", err.Error(), ""))
		}
		diags = append(diags, flagClusters(v)...)
	}
	t.mu.Lock()
	t.views, t.owner, t.diags = views, owner, diags
	t.mu.Unlock()
}

// members is what selecting clusters needs: registered clusters, their
// registry labels and their meshes.
type members struct {
	names  []string
	labels map[string]map[string]string
	meshes map[string][]string
}

// fleet returns the registered clusters, those revoked aside, and their
// meshes.
func (t *Manager) fleet(ctx context.Context) (members, error) {
	records, err := t.deps.Store.ListClusters(ctx)
	if err != nil {
		return members{}, err
	}
	f := members{meshes: t.deps.Fleet.Meshes(), labels: map[string]map[string]string{}}
	for _, c := range records {
		if !c.Revoked {
			f.names = append(f.names, c.Name)
			f.labels[c.Name] = c.Labels
		}
	}
	return f, nil
}

// selectClusters returns the registered clusters p names or selects by
// their registry labels that no earlier policy owns, and records them in
// owner. Membership is by name and by the labels administrators set, never
// by what a cluster's agent reports: a cluster that reports an istiod
// cannot join a mesh's root.
func selectClusters(p *policyv1alpha1.MeshTrust, f members, owner map[string]string, diags []meta.Diagnostic) ([]string, []meta.Diagnostic) {
	var out []string
	for i, name := range p.Spec.Clusters {
		if !slices.Contains(f.names, name) {
			diags = append(diags, diag(p, meta.SeverityWarning, fmt.Sprintf("spec.clusters[%d]", i), fmt.Sprintf("cluster %q is not registered", name), name))
		}
	}
	for _, name := range f.names {
		if !p.Spec.SelectsCluster(policyv1alpha1.ClusterMeta{Name: name, Labels: f.labels[name]}) {
			continue
		}
		if slices.Contains(f.meshes[name], "cilium") {
			diags = append(diags, diag(p, meta.SeverityWarning, "", fmt.Sprintf(
				"cluster %q runs Cilium: a Cilium cluster mesh needs the same Cilium CA (the cilium-ca Secret) in every cluster it joins; MeshTrust does not issue it, so install one CA in each cluster with Cilium's own tooling", name), name))
		}
		if prev, taken := owner[name]; taken {
			diags = append(diags, diag(p, meta.SeverityError, "spec.clusters", fmt.Sprintf("cluster %q already shares the root of MeshTrust %s; a cluster belongs to one MeshTrust", name, prev), name))
			continue
		}
		owner[name] = policyKey(p)
		out = append(out, name)
	}
	return out, diags
}

// flagClusters returns warnings about the clusters of v that the rotation
// goes on without, that hold it without reporting, or whose intermediate
// is not constrained to the policy's trust domains.
func flagClusters(v *view) []meta.Diagnostic {
	var diags []meta.Diagnostic
	p, st := v.policy, v.state
	for _, c := range v.clusters {
		r, reported := v.reports[c]
		switch {
		case p.Spec.Excluded(c):
			diags = append(diags, diag(p, meta.SeverityWarning, "spec.rotation.excludedClusters", fmt.Sprintf(
				"cluster %q is excluded from rotations: phases go on without it, and once an old root is removed the other clusters no longer trust its workloads until its agent reports and gets a new intermediate", c), c))
		case st != nil && st.Phase != policyv1alpha1.TrustPhaseActive && !reported:
			diags = append(diags, diag(p, meta.SeverityWarning, "", fmt.Sprintf(
				"the rotation (phase %s) waits for cluster %q, whose agent has not reported; list it in spec.rotation.excludedClusters to go on without it", st.Phase, c), c))
		}
		if reported && !constrained(r, p) {
			diags = append(diags, diag(p, meta.SeverityWarning, "spec.trustDomains", fmt.Sprintf(
				"the intermediate CA of cluster %q is not constrained to the trust domains %v; its agent is asked to replace it", c, p.Spec.Domains()), c))
		}
	}
	return diags
}

// constrained reports whether a report's intermediate, if any, may sign
// workload identities in the policy's trust domains only.
func constrained(r report, p *policyv1alpha1.MeshTrust) bool {
	if len(r.CACert) == 0 {
		return true
	}
	certs, err := pki.ParseCertificatesPEM(r.CACert)
	return err == nil && pki.ConstrainedTo(certs[0], p.Spec.Domains())
}

func diag(p *policyv1alpha1.MeshTrust, severity meta.Severity, path, summary, cluster string) meta.Diagnostic {
	return meta.Diagnostic{
		Severity: severity, Summary: summary, Path: path, Cluster: cluster, Plugin: "trust",
		Policy: meta.PolicyRef{Kind: policyv1alpha1.KindMeshTrust, Namespace: p.Namespace, Name: p.Name},
	}
}

// reconcileOne loads or creates the policy's roots, starts a rotation when
// one is due, and advances the phase when every cluster is ready.
func (t *Manager) reconcileOne(ctx context.Context, v *view) error {
	key := policyKey(v.policy)
	st, err := t.load(ctx, key)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	for _, c := range v.clusters {
		if r, err := t.report(ctx, c); err == nil && r.Policy == key {
			v.reports[c] = r
		}
	}
	next, err := t.next(ctx, v.policy, st, v)
	if err != nil {
		if st != nil {
			v.state = st
		}
		return err
	}
	v.state = next
	if next == st {
		return nil
	}
	var base uint64
	if st != nil {
		base = st.version
	}
	switch err := t.save(ctx, key, base, next); {
	case errors.Is(err, store.ErrConflict):
		// Another replica moved the roots on first: its state wins, and
		// this replica takes it up on its next reconcile.
		v.state = st
		t.log.Info("mesh trust: another replica changed the roots first", "policy", key)
		t.poke()
		return nil
	case err != nil:
		v.state = st
		return fmt.Errorf("store mesh roots: %w", err)
	}
	t.log.Info("mesh trust phase", "policy", key, "phase", next.Phase, "roots", next.anchors())
	return nil
}

// next returns the state that follows st (st itself when nothing changes).
func (t *Manager) next(ctx context.Context, p *policyv1alpha1.MeshTrust, st *state, v *view) (*state, error) {
	src, err := t.sourceCA(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("root: %w", err)
	}
	if st == nil {
		return t.initial(p, src)
	}
	if st.Phase == policyv1alpha1.TrustPhaseActive {
		return t.maybeRotate(p, st, src)
	}
	if t.safeMode() || !t.allReached(st, v) {
		return st, nil
	}
	n := *st
	switch st.Phase {
	case policyv1alpha1.TrustPhaseAddingRoot:
		n.Phase = policyv1alpha1.TrustPhaseReissuing
	case policyv1alpha1.TrustPhaseReissuing:
		n.Phase, n.Old = policyv1alpha1.TrustPhaseRemovingRoot, nil
	case policyv1alpha1.TrustPhaseRemovingRoot:
		n.Phase = policyv1alpha1.TrustPhaseActive
	}
	return &n, nil
}

// initial makes the first root: the source's, or a generated one.
func (t *Manager) initial(p *policyv1alpha1.MeshTrust, src *pki.CA) (*state, error) {
	st := &state{Phase: policyv1alpha1.TrustPhaseActive, Generation: p.Spec.Rotation.Generation}
	root, err := t.newRoot(p, src)
	if err != nil {
		return nil, err
	}
	st.Current = root
	if src != nil {
		st.Source = pki.Fingerprint(src.Certificate())
	}
	return st, nil
}

// maybeRotate starts a rotation when the source's root changed, the
// rotation generation changed, or a generated root nears its expiry.
func (t *Manager) maybeRotate(p *policyv1alpha1.MeshTrust, st *state, src *pki.CA) (*state, error) {
	due := false
	switch {
	case src != nil:
		due = pki.Fingerprint(src.Certificate()) != st.Source
	default:
		expiry := st.Current.ca.Certificate().NotAfter
		due = p.Spec.Rotation.Generation != st.Generation || time.Until(expiry) < p.Spec.RootRenewBefore() || st.Source != ""
	}
	if !due || t.safeMode() {
		return st, nil
	}
	root, err := t.newRoot(p, src)
	if err != nil {
		return nil, err
	}
	n := &state{Phase: policyv1alpha1.TrustPhaseAddingRoot, Current: root, Old: st.Current, Generation: p.Spec.Rotation.Generation}
	if src != nil {
		n.Source = pki.Fingerprint(src.Certificate())
	}
	return n, nil
}

// newRoot seals the source's CA, or a generated root, for the store.
func (t *Manager) newRoot(p *policyv1alpha1.MeshTrust, src *pki.CA) (*root, error) {
	ca := src
	if ca == nil {
		var err error
		if ca, err = pki.GenerateMeshRoot("meshrelay mesh root "+policyKey(p), p.Spec.RootTTL()); err != nil {
			return nil, err
		}
	}
	certPEM, sealed, err := t.deps.Sealer.SealCA(ca)
	if err != nil {
		return nil, err
	}
	return &root{Cert: string(certPEM), Key: string(sealed), ca: ca}, nil
}

// allReached reports whether every selected cluster reached st's phase,
// but those the operator excluded from rotations.
func (t *Manager) allReached(st *state, v *view) bool {
	for _, c := range v.clusters {
		if v.policy.Spec.Excluded(c) {
			continue
		}
		r, ok := v.reports[c]
		if !ok || !reached(st, st.Phase, r) {
			return false
		}
	}
	return true
}

// reached reports whether a cluster's report shows phase done: the roots it
// trusts, the root that signed its intermediate, and no workload left to
// restart.
func reached(st *state, phase string, r report) bool {
	if r.Pending > 0 || r.Error != "" {
		return false
	}
	want := st.anchors()
	switch phase {
	case policyv1alpha1.TrustPhaseAddingRoot:
		return containsAll(r.Roots, want)
	case policyv1alpha1.TrustPhaseReissuing:
		return containsAll(r.Roots, want) && signedBy(r.CACert, st.Current.ca)
	default:
		return sameSet(r.Roots, want) && signedBy(r.CACert, st.signer())
	}
}

// clusterPhase is the last phase a cluster completed, "Pending" before its
// first intermediate.
func clusterPhase(st *state, r report) string {
	order := []string{policyv1alpha1.TrustPhaseActive, policyv1alpha1.TrustPhaseAddingRoot, policyv1alpha1.TrustPhaseReissuing, policyv1alpha1.TrustPhaseRemovingRoot}
	i := slices.Index(order, st.Phase)
	if reached(st, st.Phase, r) {
		return st.Phase
	}
	if i <= 0 {
		return "Pending"
	}
	return order[i-1]
}

func signedBy(certPEM []byte, ca *pki.CA) bool {
	certs, err := pki.ParseCertificatesPEM(certPEM)
	return err == nil && certs[0].CheckSignatureFrom(ca.Certificate()) == nil && time.Now().Before(certs[0].NotAfter)
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

func sameSet(have, want []string) bool { return containsAll(have, want) && containsAll(want, have) }

// safeMode reports whether the server is in safe mode.
func (t *Manager) safeMode() bool { return t.deps.Fleet.SafeMode() }

// load reads a MeshTrust's state from the store and opens its keys.
func (t *Manager) load(ctx context.Context, key string) (*state, error) {
	rec, err := t.deps.Store.GetTrust(ctx, key)
	if err != nil {
		return nil, err
	}
	var st state
	if err := json.Unmarshal(rec.Data, &st); err != nil || st.Current == nil {
		return nil, fmt.Errorf("decode the stored mesh roots of %s: %v", key, cmp.Or(err, errors.New("no current root")))
	}
	st.version = rec.Version
	for _, r := range []*root{st.Current, st.Old} {
		if r == nil {
			continue
		}
		if r.ca, err = t.deps.Sealer.OpenCA([]byte(r.Cert), []byte(r.Key)); err != nil {
			return nil, fmt.Errorf("open the stored mesh root of %s: %w", key, err)
		}
	}
	return &st, nil
}

// save stores st over the record at version base (0: none stored), and
// fails with an error wrapping store.ErrConflict when another replica
// changed it since: two replicas never both start a rotation, each with a
// root of its own.
func (t *Manager) save(ctx context.Context, key string, base uint64, st *state) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	stored, err := t.deps.Store.CompareAndPutTrust(ctx, store.TrustRecord{Name: key, Data: data, Version: base})
	if err != nil {
		return err
	}
	st.version = stored.Version
	return nil
}

// report returns cluster's last report.
func (t *Manager) report(ctx context.Context, cluster string) (report, error) {
	var r report
	rec, err := t.deps.Store.GetTrust(ctx, reportPrefix+cluster)
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal(rec.Data, &r)
}

// Forget deletes the trust report of a cluster that left the fleet.
func (t *Manager) Forget(ctx context.Context, cluster string) {
	if err := t.deps.Store.DeleteTrust(ctx, reportPrefix+cluster); err != nil {
		t.log.Warn("delete the trust report of a deregistered cluster", "cluster", cluster, "error", err)
	}
}

// plan returns what cluster's mesh must trust now.
func (t *Manager) plan(cluster string) (*relayv1.TrustPlan, *view) {
	t.mu.Lock()
	defer t.mu.Unlock()
	key, ok := t.owner[cluster]
	v := t.views[key]
	if !ok || v == nil || v.state == nil {
		return &relayv1.TrustPlan{}, nil
	}
	spec := &v.policy.Spec
	return &relayv1.TrustPlan{
		Policy:             key,
		Namespace:          spec.Namespace(),
		Phase:              v.state.Phase,
		TrustBundle:        v.state.bundle(),
		SigningRoot:        pki.Fingerprint(v.state.signer().Certificate()),
		RenewBeforeSeconds: int64(renewBefore(v, cluster) / time.Second),
		BouncePerMinute:    int32(spec.BouncePerMinute()),
	}, v
}

// renewBefore is how long before its expiry cluster's intermediate is
// replaced: the policy's margin, or its whole remaining life when the
// intermediate its agent last reported is not constrained to the policy's
// trust domains (one issued before they were set, or for others), so that
// the agent replaces it now.
func renewBefore(v *view, cluster string) time.Duration {
	d := v.policy.Spec.IntermediateRenewBefore()
	r, ok := v.reports[cluster]
	if !ok || constrained(r, v.policy) {
		return d
	}
	if certs, err := pki.ParseCertificatesPEM(r.CACert); err == nil {
		d = max(d, time.Until(certs[0].NotAfter)+time.Hour)
	}
	return d
}

// Report records the trust an authenticated cluster's agent reports and
// returns the cluster's plan. An invalid report is refused with
// codes.InvalidArgument.
func (t *Manager) Report(ctx context.Context, cluster string, req *relayv1.TrustReport) (*relayv1.TrustPlan, error) {
	if err := checkReport(req); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "trust report of cluster %q: %v", cluster, err)
	}
	r := report{Policy: req.GetPolicy(), CACert: req.GetCaCert(), Roots: req.GetRoots(), Bounced: req.GetBounced(), Pending: req.GetPending(), Error: req.GetError(), At: time.Now()}
	if data, err := json.Marshal(r); err == nil && req.GetPolicy() != "" {
		put := func([]byte, bool) ([]byte, error) { return data, nil }
		if _, err := store.UpdateTrust(ctx, t.deps.Store, reportPrefix+cluster, put); err != nil {
			t.log.Warn("store trust report", "cluster", cluster, "error", err)
		}
		t.poke()
	}
	plan, _ := t.plan(cluster)
	return plan, nil
}

// checkReport bounds a report: the whole message, the intermediate,
// the error, and each root, which is a SHA-256 fingerprint in hex.
func checkReport(req *relayv1.TrustReport) error {
	switch {
	case proto.Size(req) > MaxReportBytes:
		return fmt.Errorf("%d bytes, over %d", proto.Size(req), MaxReportBytes)
	case len(req.GetCaCert()) > maxCertBytes:
		return fmt.Errorf("a certificate of %d bytes, over %d", len(req.GetCaCert()), maxCertBytes)
	case len(req.GetRoots()) > maxRoots:
		return fmt.Errorf("%d roots, over %d", len(req.GetRoots()), maxRoots)
	case len(req.GetError()) > maxErrorLen:
		return fmt.Errorf("an error of %d bytes, over %d", len(req.GetError()), maxErrorLen)
	case len(req.GetPolicy()) > maxPolicyLen:
		return fmt.Errorf("a policy name of %d bytes, over %d", len(req.GetPolicy()), maxPolicyLen)
	}
	for i, r := range req.GetRoots() {
		if b, err := hex.DecodeString(r); err != nil || len(b) != sha256.Size || r != strings.ToLower(r) {
			return fmt.Errorf("root %d is not a SHA-256 fingerprint in lowercase hex", i)
		}
	}
	return nil
}

// Sign signs an authenticated cluster's intermediate CSR with the signing
// root of its MeshTrust. It fails with codes.FailedPrecondition when no
// MeshTrust, or another one, selects the cluster, and with
// codes.InvalidArgument for a CSR the root does not sign.
func (t *Manager) Sign(ctx context.Context, cluster string, req *relayv1.TrustSignRequest) (*relayv1.TrustSignResponse, error) {
	plan, v := t.plan(cluster)
	if v == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "no MeshTrust selects cluster %q", cluster)
	}
	if req.GetPolicy() != plan.GetPolicy() {
		return nil, status.Errorf(codes.FailedPrecondition, "cluster %q belongs to MeshTrust %s, not %q", cluster, plan.GetPolicy(), req.GetPolicy())
	}
	t.mu.Lock()
	signer := v.state.signer()
	t.mu.Unlock()
	certPEM, chainPEM, notAfter, err := signer.SignIntermediateCSR(req.GetCsr(), cluster, v.policy.Spec.Domains(), v.policy.Spec.IntermediateTTL())
	if err != nil {
		t.log.Warn("refused an intermediate CSR", "cluster", cluster, "error", err)
		return nil, status.Errorf(codes.InvalidArgument, "%v", err)
	}
	t.log.Info("signed a mesh intermediate", "cluster", cluster, "policy", plan.GetPolicy(), "expires", notAfter)
	return &relayv1.TrustSignResponse{CaCert: certPEM, CertChain: chainPEM, TrustBundle: plan.GetTrustBundle(), NotAfter: timestamppb.New(notAfter)}, nil
}

// Diagnostics returns the trust problems found by the last reconcile.
func (t *Manager) Diagnostics() []meta.Diagnostic {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.diags)
}

// Statuses returns each MeshTrust's rotation and its clusters' trust.
func (t *Manager) Statuses() []*relayv1.MeshTrustStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*relayv1.MeshTrustStatus
	for _, p := range t.policies {
		v := t.views[policyKey(p)]
		ms := &relayv1.MeshTrustStatus{Namespace: p.Namespace, Name: p.Name}
		if v != nil && v.state != nil {
			ms.Phase, ms.Roots = v.state.Phase, v.state.anchors()
			for _, c := range v.clusters {
				ms.Clusters = append(ms.Clusters, clusterStatus(v, c))
			}
		}
		out = append(out, ms)
	}
	return out
}

// clusterStatus returns cluster's trust in v.
func clusterStatus(v *view, cluster string) *relayv1.MeshTrustClusterStatus {
	cs := &relayv1.MeshTrustClusterStatus{Cluster: cluster, Phase: "Pending"}
	r, ok := v.reports[cluster]
	if !ok {
		cs.Error = "no report from the cluster's agent yet"
		return cs
	}
	cs.Phase, cs.Bounced, cs.Pending, cs.Error, cs.Reported = clusterPhase(v.state, r), r.Bounced, r.Pending, r.Error, timestamppb.New(r.At)
	if certs, err := pki.ParseCertificatesPEM(r.CACert); err == nil {
		cs.IntermediateNotAfter = timestamppb.New(certs[0].NotAfter)
		cs.IssuerRoot = issuerRoot(v.state, certs[0])
	}
	return cs
}

// issuerRoot returns the fingerprint of the anchor of the root that
// signed an intermediate, or "unknown".
func issuerRoot(st *state, c *x509.Certificate) string {
	for _, r := range []*root{st.Current, st.Old} {
		if r != nil && c.CheckSignatureFrom(r.ca.Certificate()) == nil {
			return pki.Fingerprint(r.ca.Anchor())
		}
	}
	return "unknown"
}

// Reach returns the clusters a MeshTrust selects and those that completed
// its current phase, as a policy's targets and where it is applied.
func (t *Manager) Reach(ref meta.PolicyRef) (targets, applied []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v := t.views[ref.Namespace+"/"+ref.Name]
	if v == nil || v.state == nil {
		return nil, nil
	}
	for _, c := range v.clusters {
		targets = append(targets, c)
		if r, ok := v.reports[c]; ok && reached(v.state, v.state.Phase, r) {
			applied = append(applied, c)
		}
	}
	return targets, applied
}

// KubeStatus returns the MeshTrust-specific fields of a policy's status in
// the management cluster.
func (t *Manager) KubeStatus(ref meta.PolicyRef) map[string]any {
	for _, ms := range t.Statuses() {
		if ms.Namespace != ref.Namespace || ms.Name != ref.Name {
			continue
		}
		st := policyv1alpha1.MeshTrustStatus{Phase: ms.Phase, Roots: ms.Roots}
		for _, c := range ms.Clusters {
			m := policyv1alpha1.MeshTrustMesh{Cluster: c.Cluster, Phase: c.Phase, IssuerRoot: c.IssuerRoot, Bounced: c.Bounced, Pending: c.Pending, Error: c.Error}
			if c.IntermediateNotAfter != nil {
				expiry := metav1.NewTime(c.IntermediateNotAfter.AsTime())
				m.IntermediateExpiry = &expiry
			}
			st.Meshes = append(st.Meshes, m)
		}
		out, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
		if err != nil {
			return nil
		}
		return out
	}
	return nil
}
