package server

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
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
	"k8s.io/apimachinery/pkg/runtime"
)

// Bounds on what an agent may report about its mesh's trust.
const (
	maxTrustCertBytes   = 16 << 10
	maxTrustRoots       = 16
	maxTrustErrorLen    = 1024
	maxTrustPolicyLen   = 253 + 1 + 253 // namespace/name
	maxTrustReportBytes = 32 << 10      // the whole message
)

// trustReportPrefix keys each cluster's last trust report in the store.
const trustReportPrefix = "report/"

// trustRoot is one mesh root as the store keeps it: the signing
// certificate and its chain, and the key sealed like the relay CA's.
type trustRoot struct {
	Cert string `json:"cert"`
	Key  string `json:"key"`
	ca   *pki.CA
}

// trustState is one MeshTrust's roots and rotation phase, shared by
// replicas through the store. Current is the newest root; Old is the root
// being replaced, kept while it is still trusted.
type trustState struct {
	Phase      string     `json:"phase"`
	Current    *trustRoot `json:"current"`
	Old        *trustRoot `json:"old,omitempty"`
	Generation int64      `json:"generation"`
	// Source is the fingerprint of the root last read from files or a Secret.
	Source string `json:"source,omitempty"`

	// version is the store's version of the record this state was read
	// from (0 for a state not stored yet): the next state is stored only
	// over it.
	version uint64
}

// signer returns the root that signs intermediates in the state's phase.
func (st *trustState) signer() *pki.CA {
	if st.Phase == policyv1alpha1.TrustPhaseAddingRoot && st.Old != nil {
		return st.Old.ca
	}
	return st.Current.ca
}

// trusted returns the roots the clusters must trust, the signer first.
func (st *trustState) trusted() []*pki.CA {
	if st.Old == nil {
		return []*pki.CA{st.Current.ca}
	}
	if st.Phase == policyv1alpha1.TrustPhaseAddingRoot {
		return []*pki.CA{st.Old.ca, st.Current.ca}
	}
	return []*pki.CA{st.Current.ca, st.Old.ca}
}

// bundle returns the PEM trust anchors of the trusted roots.
func (st *trustState) bundle() []byte {
	var out []byte
	for _, ca := range st.trusted() {
		out = append(out, pki.CertificatesPEM(ca.Anchor())...)
	}
	return out
}

// anchors returns the fingerprints of the trusted roots' anchors.
func (st *trustState) anchors() []string {
	var out []string
	for _, ca := range st.trusted() {
		if fp := pki.Fingerprint(ca.Anchor()); !slices.Contains(out, fp) {
			out = append(out, fp)
		}
	}
	return out
}

// trustReport is what a cluster's agent last said about its mesh's trust.
type trustReport struct {
	Policy  string    `json:"policy"`
	CACert  []byte    `json:"caCert,omitempty"`
	Roots   []string  `json:"roots,omitempty"`
	Bounced int32     `json:"bounced,omitempty"`
	Pending int32     `json:"pending,omitempty"`
	Error   string    `json:"error,omitempty"`
	At      time.Time `json:"at"`
}

// trustView is what the last reconcile found for one MeshTrust.
type trustView struct {
	policy   *policyv1alpha1.MeshTrust
	state    *trustState
	clusters []string
	reports  map[string]trustReport
	err      string
}

// trustManager keeps the fleet's mesh trust: the MeshTrust policies of the
// management source, each one's roots in the store, the clusters' reports,
// and the rotation from phase to phase. A phase ends only when every
// cluster the policy selects reported that it got there, so at every
// moment each cluster trusts the root that signed every other cluster's
// intermediate.
type trustManager struct {
	s    *Server
	wake chan struct{}

	mu       sync.Mutex
	policies []*policyv1alpha1.MeshTrust
	views    map[string]*trustView
	owner    map[string]string // cluster → policy key
	diags    []meta.Diagnostic
}

func newTrustManager(s *Server) *trustManager {
	return &trustManager{s: s, wake: make(chan struct{}, 1), views: map[string]*trustView{}, owner: map[string]string{}}
}

func trustKey(p *policyv1alpha1.MeshTrust) string { return p.Namespace + "/" + p.Name }

// isTrustPolicy reports whether a management resource is a MeshTrust.
func isTrustPolicy(r snapshot.Resource) bool {
	return r.ID.Group == policyv1alpha1.GroupName && r.ID.Kind == policyv1alpha1.KindMeshTrust
}

// setPolicies takes the valid MeshTrusts of the management source; the
// invalid ones get their status from validation like any policy.
func (t *trustManager) setPolicies(p *snapshot.Snapshot) {
	var out []*policyv1alpha1.MeshTrust
	for r := range p.All() {
		if !isTrustPolicy(r) {
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
	slices.SortFunc(out, func(a, b *policyv1alpha1.MeshTrust) int { return cmp.Compare(trustKey(a), trustKey(b)) })
	t.mu.Lock()
	t.policies = out
	t.mu.Unlock()
	t.poke()
}

// poke asks for a reconcile soon.
func (t *trustManager) poke() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// run reconciles on every heartbeat and whenever poked.
func (t *trustManager) run(ctx context.Context) error {
	tick := time.NewTicker(t.s.opts.Heartbeat)
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
func (t *trustManager) reconcile(ctx context.Context) {
	t.mu.Lock()
	policies := t.policies
	t.mu.Unlock()
	fleet, err := t.fleet(ctx)
	if err != nil {
		t.s.log.Warn("mesh trust: read the fleet", "error", err)
		return
	}
	views := map[string]*trustView{}
	owner := map[string]string{}
	var diags []meta.Diagnostic
	for _, p := range policies {
		v := &trustView{policy: p, reports: map[string]trustReport{}}
		views[trustKey(p)] = v
		v.clusters, diags = selectTrustClusters(p, fleet, owner, diags)
		if err := t.reconcileOne(ctx, v); err != nil {
			v.err = err.Error()
			diags = append(diags, trustDiag(p, meta.SeverityError, "", err.Error(), ""))
		}
		diags = append(diags, flagClusters(v)...)
	}
	t.mu.Lock()
	t.views, t.owner, t.diags = views, owner, diags
	t.mu.Unlock()
}

// trustFleet is what selecting clusters needs: registered clusters and
// their meshes.
type trustFleet struct {
	names  []string
	meshes map[string][]string
	labels map[string]map[string]string
}

func (t *trustManager) fleet(ctx context.Context) (trustFleet, error) {
	records, err := t.s.deps.Store.ListClusters(ctx)
	if err != nil {
		return trustFleet{}, err
	}
	f := trustFleet{meshes: map[string][]string{}, labels: map[string]map[string]string{}}
	for _, c := range records {
		if !c.Revoked {
			f.names = append(f.names, c.Name)
			f.labels[c.Name] = c.Labels
		}
	}
	for _, ci := range t.s.engine.Clusters() {
		f.meshes[ci.Name] = ci.Meshes
	}
	return f, nil
}

// selectTrustClusters returns the registered clusters p names or selects
// by their registry labels that no earlier policy owns, and records them
// in owner. Membership is by name and by the labels administrators set,
// never by what a cluster's agent reports: a cluster that reports an
// istiod cannot join a mesh's root.
func selectTrustClusters(p *policyv1alpha1.MeshTrust, f trustFleet, owner map[string]string, diags []meta.Diagnostic) ([]string, []meta.Diagnostic) {
	var out []string
	for i, name := range p.Spec.Clusters {
		if !slices.Contains(f.names, name) {
			diags = append(diags, trustDiag(p, meta.SeverityWarning, fmt.Sprintf("spec.clusters[%d]", i), fmt.Sprintf("cluster %q is not registered", name), name))
		}
	}
	for _, name := range f.names {
		if !p.Spec.SelectsCluster(policyv1alpha1.ClusterMeta{Name: name, Labels: f.labels[name]}) {
			continue
		}
		if slices.Contains(f.meshes[name], "cilium") {
			diags = append(diags, trustDiag(p, meta.SeverityWarning, "", fmt.Sprintf(
				"cluster %q runs Cilium: a Cilium cluster mesh needs the same Cilium CA (the cilium-ca Secret) in every cluster it joins; MeshTrust does not issue it, so install one CA in each cluster with Cilium's own tooling", name), name))
		}
		if prev, taken := owner[name]; taken {
			diags = append(diags, trustDiag(p, meta.SeverityError, "spec.clusters", fmt.Sprintf("cluster %q already shares the root of MeshTrust %s; a cluster belongs to one MeshTrust", name, prev), name))
			continue
		}
		owner[name] = trustKey(p)
		out = append(out, name)
	}
	return out, diags
}

// flagClusters returns warnings about the clusters of v that the rotation
// goes on without, that hold it without reporting, or whose intermediate
// is not constrained to the policy's trust domains.
func flagClusters(v *trustView) []meta.Diagnostic {
	var diags []meta.Diagnostic
	p, st := v.policy, v.state
	for _, c := range v.clusters {
		r, reported := v.reports[c]
		switch {
		case p.Spec.Excluded(c):
			diags = append(diags, trustDiag(p, meta.SeverityWarning, "spec.rotation.excludedClusters", fmt.Sprintf(
				"cluster %q is excluded from rotations: phases go on without it, and once an old root is removed the other clusters no longer trust its workloads until its agent reports and gets a new intermediate", c), c))
		case st != nil && st.Phase != policyv1alpha1.TrustPhaseActive && !reported:
			diags = append(diags, trustDiag(p, meta.SeverityWarning, "", fmt.Sprintf(
				"the rotation (phase %s) waits for cluster %q, whose agent has not reported; list it in spec.rotation.excludedClusters to go on without it", st.Phase, c), c))
		}
		if reported && !constrained(r, p) {
			diags = append(diags, trustDiag(p, meta.SeverityWarning, "spec.trustDomains", fmt.Sprintf(
				"the intermediate CA of cluster %q is not constrained to the trust domains %v; its agent is asked to replace it", c, p.Spec.Domains()), c))
		}
	}
	return diags
}

// constrained reports whether a report's intermediate, if any, may sign
// workload identities in the policy's trust domains only.
func constrained(r trustReport, p *policyv1alpha1.MeshTrust) bool {
	if len(r.CACert) == 0 {
		return true
	}
	certs, err := pki.ParseCertificatesPEM(r.CACert)
	return err == nil && pki.ConstrainedTo(certs[0], p.Spec.Domains())
}

func trustDiag(p *policyv1alpha1.MeshTrust, severity meta.Severity, path, summary, cluster string) meta.Diagnostic {
	return meta.Diagnostic{
		Severity: severity, Summary: summary, Path: path, Cluster: cluster, Plugin: "trust",
		Policy: meta.PolicyRef{Kind: policyv1alpha1.KindMeshTrust, Namespace: p.Namespace, Name: p.Name},
	}
}

// reconcileOne loads or creates the policy's roots, starts a rotation when
// one is due, and advances the phase when every cluster is ready.
func (t *trustManager) reconcileOne(ctx context.Context, v *trustView) error {
	key := trustKey(v.policy)
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
		t.s.log.Info("mesh trust: another replica changed the roots first", "policy", key)
		t.poke()
		return nil
	case err != nil:
		v.state = st
		return fmt.Errorf("store mesh roots: %w", err)
	}
	t.s.log.Info("mesh trust phase", "policy", key, "phase", next.Phase, "roots", next.anchors())
	return nil
}

// next returns the state that follows st (st itself when nothing changes).
func (t *trustManager) next(ctx context.Context, p *policyv1alpha1.MeshTrust, st *trustState, v *trustView) (*trustState, error) {
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
func (t *trustManager) initial(p *policyv1alpha1.MeshTrust, src *pki.CA) (*trustState, error) {
	st := &trustState{Phase: policyv1alpha1.TrustPhaseActive, Generation: p.Spec.Rotation.Generation}
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
func (t *trustManager) maybeRotate(p *policyv1alpha1.MeshTrust, st *trustState, src *pki.CA) (*trustState, error) {
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
	n := &trustState{Phase: policyv1alpha1.TrustPhaseAddingRoot, Current: root, Old: st.Current, Generation: p.Spec.Rotation.Generation}
	if src != nil {
		n.Source = pki.Fingerprint(src.Certificate())
	}
	return n, nil
}

// newRoot seals the source's CA, or a generated root, for the store.
func (t *trustManager) newRoot(p *policyv1alpha1.MeshTrust, src *pki.CA) (*trustRoot, error) {
	ca := src
	if ca == nil {
		var err error
		if ca, err = pki.GenerateMeshRoot("meshrelay mesh root "+trustKey(p), p.Spec.RootTTL()); err != nil {
			return nil, err
		}
	}
	secret, err := t.s.caKeySecret()
	if err != nil {
		return nil, err
	}
	pemData, err := ca.MarshalPEM()
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM := splitPEM(pemData)
	sealed, err := sealCAKey(secret, certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	return &trustRoot{Cert: string(certPEM), Key: string(sealed), ca: ca}, nil
}

// allReached reports whether every selected cluster reached st's phase,
// but those the operator excluded from rotations.
func (t *trustManager) allReached(st *trustState, v *trustView) bool {
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
func reached(st *trustState, phase string, r trustReport) bool {
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
func clusterPhase(st *trustState, r trustReport) string {
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

func (t *trustManager) safeMode() bool {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	return t.s.safe.on
}

// load reads a MeshTrust's state from the store and opens its keys.
func (t *trustManager) load(ctx context.Context, key string) (*trustState, error) {
	rec, err := t.s.deps.Store.GetTrust(ctx, key)
	if err != nil {
		return nil, err
	}
	var st trustState
	if err := json.Unmarshal(rec.Data, &st); err != nil || st.Current == nil {
		return nil, fmt.Errorf("decode the stored mesh roots of %s: %v", key, cmp.Or(err, errors.New("no current root")))
	}
	st.version = rec.Version
	secret, err := t.s.caKeySecret()
	if err != nil {
		return nil, err
	}
	for _, r := range []*trustRoot{st.Current, st.Old} {
		if r == nil {
			continue
		}
		keyPEM, err := openCAKey(secret, []byte(r.Cert), []byte(r.Key))
		if err != nil {
			return nil, fmt.Errorf("open the stored mesh root of %s: %w", key, err)
		}
		if r.ca, err = pki.ParsePEM(append([]byte(r.Cert), keyPEM...)); err != nil {
			return nil, fmt.Errorf("open the stored mesh root of %s: %w", key, err)
		}
	}
	return &st, nil
}

// save stores st over the record at version base (0: none stored), and
// fails with an error wrapping store.ErrConflict when another replica
// changed it since: two replicas never both start a rotation, each with a
// root of its own.
func (t *trustManager) save(ctx context.Context, key string, base uint64, st *trustState) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	stored, err := t.s.deps.Store.CompareAndPutTrust(ctx, store.TrustRecord{Name: key, Data: data, Version: base})
	if err != nil {
		return err
	}
	st.version = stored.Version
	return nil
}

func (t *trustManager) report(ctx context.Context, cluster string) (trustReport, error) {
	var r trustReport
	rec, err := t.s.deps.Store.GetTrust(ctx, trustReportPrefix+cluster)
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal(rec.Data, &r)
}

// forget deletes the trust report of a cluster that left the fleet.
func (t *trustManager) forget(ctx context.Context, cluster string) {
	if err := t.s.deps.Store.DeleteTrust(ctx, trustReportPrefix+cluster); err != nil {
		t.s.log.Warn("delete the trust report of a deregistered cluster", "cluster", cluster, "error", err)
	}
}

// plan returns what cluster's mesh must trust now.
func (t *trustManager) plan(cluster string) (*relayv1.TrustPlan, *trustView) {
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
func renewBefore(v *trustView, cluster string) time.Duration {
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

// trustService serves the Trust RPCs to agents.
type trustService struct {
	relayv1.UnimplementedTrustServer
	s *Server
}

// caller authenticates a Trust call like a Sync stream: the client
// certificate under mTLS, the cluster and token headers otherwise.
func (ts *trustService) caller(ctx context.Context) (string, error) {
	s := ts.s
	if s.authMode() == ModeMTLS {
		id, err := s.peerCluster(ctx)
		return id.cluster, err
	}
	cluster, tok, ok := streamToken(ctx)
	if !ok {
		return "", status.Error(codes.Unauthenticated, "the x-meshrelay-cluster and x-meshrelay-token headers are required")
	}
	if _, _, err := s.checkToken(ctx, cluster, tok); err != nil {
		return "", s.refuseToken(peerHost(ctx), cluster, err)
	}
	return cluster, nil
}

// Report records the cluster's trust and returns its plan.
func (ts *trustService) Report(ctx context.Context, req *relayv1.TrustReport) (*relayv1.TrustPlan, error) {
	cluster, err := ts.caller(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkTrustReport(req); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "trust report of cluster %q: %v", cluster, err)
	}
	r := trustReport{Policy: req.GetPolicy(), CACert: req.GetCaCert(), Roots: req.GetRoots(), Bounced: req.GetBounced(), Pending: req.GetPending(), Error: req.GetError(), At: time.Now()}
	if data, err := json.Marshal(r); err == nil && req.GetPolicy() != "" {
		put := func([]byte, bool) ([]byte, error) { return data, nil }
		if _, err := store.UpdateTrust(ctx, ts.s.deps.Store, trustReportPrefix+cluster, put); err != nil {
			ts.s.log.Warn("store trust report", "cluster", cluster, "error", err)
		}
		ts.s.trust.poke()
	}
	plan, _ := ts.s.trust.plan(cluster)
	return plan, nil
}

// checkTrustReport bounds a report: the whole message, the intermediate,
// the error, and each root, which is a SHA-256 fingerprint in hex.
func checkTrustReport(req *relayv1.TrustReport) error {
	switch {
	case proto.Size(req) > maxTrustReportBytes:
		return fmt.Errorf("%d bytes, over %d", proto.Size(req), maxTrustReportBytes)
	case len(req.GetCaCert()) > maxTrustCertBytes:
		return fmt.Errorf("a certificate of %d bytes, over %d", len(req.GetCaCert()), maxTrustCertBytes)
	case len(req.GetRoots()) > maxTrustRoots:
		return fmt.Errorf("%d roots, over %d", len(req.GetRoots()), maxTrustRoots)
	case len(req.GetError()) > maxTrustErrorLen:
		return fmt.Errorf("an error of %d bytes, over %d", len(req.GetError()), maxTrustErrorLen)
	case len(req.GetPolicy()) > maxTrustPolicyLen:
		return fmt.Errorf("a policy name of %d bytes, over %d", len(req.GetPolicy()), maxTrustPolicyLen)
	}
	for i, r := range req.GetRoots() {
		if b, err := hex.DecodeString(r); err != nil || len(b) != sha256.Size || r != strings.ToLower(r) {
			return fmt.Errorf("root %d is not a SHA-256 fingerprint in lowercase hex", i)
		}
	}
	return nil
}

// Sign signs the cluster's intermediate CSR with the signing root.
func (ts *trustService) Sign(ctx context.Context, req *relayv1.TrustSignRequest) (*relayv1.TrustSignResponse, error) {
	cluster, err := ts.caller(ctx)
	if err != nil {
		return nil, err
	}
	plan, v := ts.s.trust.plan(cluster)
	if v == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "no MeshTrust selects cluster %q", cluster)
	}
	if req.GetPolicy() != plan.GetPolicy() {
		return nil, status.Errorf(codes.FailedPrecondition, "cluster %q belongs to MeshTrust %s, not %q", cluster, plan.GetPolicy(), req.GetPolicy())
	}
	ts.s.trust.mu.Lock()
	signer := v.state.signer()
	ts.s.trust.mu.Unlock()
	certPEM, chainPEM, notAfter, err := signer.SignIntermediateCSR(req.GetCsr(), cluster, v.policy.Spec.Domains(), v.policy.Spec.IntermediateTTL())
	if err != nil {
		ts.s.log.Warn("refused an intermediate CSR", "cluster", cluster, "error", err)
		return nil, status.Errorf(codes.InvalidArgument, "%v", err)
	}
	ts.s.log.Info("signed a mesh intermediate", "cluster", cluster, "policy", plan.GetPolicy(), "expires", notAfter)
	return &relayv1.TrustSignResponse{CaCert: certPEM, CertChain: chainPEM, TrustBundle: plan.GetTrustBundle(), NotAfter: timestamppb.New(notAfter)}, nil
}

// diagnostics returns the trust problems found by the last reconcile.
func (t *trustManager) diagnostics() []meta.Diagnostic {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.diags)
}

// statuses returns each MeshTrust's rotation and its clusters' trust.
func (t *trustManager) statuses() []*relayv1.MeshTrustStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*relayv1.MeshTrustStatus
	for _, p := range t.policies {
		v := t.views[trustKey(p)]
		ms := &relayv1.MeshTrustStatus{Namespace: p.Namespace, Name: p.Name}
		if v != nil && v.state != nil {
			ms.Phase, ms.Roots = v.state.Phase, v.state.anchors()
			for _, c := range v.clusters {
				ms.Clusters = append(ms.Clusters, clusterTrustStatus(v, c))
			}
		}
		out = append(out, ms)
	}
	return out
}

func clusterTrustStatus(v *trustView, cluster string) *relayv1.MeshTrustClusterStatus {
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
func issuerRoot(st *trustState, c *x509.Certificate) string {
	for _, r := range []*trustRoot{st.Current, st.Old} {
		if r != nil && c.CheckSignatureFrom(r.ca.Certificate()) == nil {
			return pki.Fingerprint(r.ca.Anchor())
		}
	}
	return "unknown"
}

// reach returns the clusters a MeshTrust selects and those that completed
// its current phase, as a policy's targets and where it is applied.
func (t *trustManager) reach(ref meta.PolicyRef) (targets, applied []string) {
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

// kubeStatus returns the MeshTrust-specific fields of a policy's status.
func (t *trustManager) kubeStatus(ref meta.PolicyRef) map[string]any {
	for _, ms := range t.statuses() {
		if ms.Namespace != ref.Namespace || ms.Name != ref.Name {
			continue
		}
		st := policyv1alpha1.MeshTrustStatus{Phase: ms.Phase, Roots: ms.Roots}
		for _, c := range ms.Clusters {
			m := policyv1alpha1.MeshTrustMesh{Cluster: c.Cluster, Phase: c.Phase, IssuerRoot: c.IssuerRoot, Bounced: c.Bounced, Pending: c.Pending, Error: c.Error}
			if c.IntermediateNotAfter != nil {
				m.IntermediateExpiry = ptrTime(c.IntermediateNotAfter.AsTime())
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
