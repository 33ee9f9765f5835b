package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/agent/trust"
	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// memPolicies is a management policy source the test sets by hand.
type memPolicies struct {
	mu      sync.Mutex
	publish func(*snapshot.Snapshot)
	last    *snapshot.Snapshot
	version uint64
}

func (m *memPolicies) Run(ctx context.Context, publish func(*snapshot.Snapshot)) error {
	m.mu.Lock()
	m.publish = publish
	if m.last != nil {
		publish(m.last)
	}
	m.mu.Unlock()
	<-ctx.Done()
	return nil
}

// set publishes the policies, each a YAML document.
func (m *memPolicies) set(t *testing.T, docs ...string) {
	t.Helper()
	var rs []snapshot.Resource
	for _, d := range docs {
		data, err := yaml.YAMLToJSON([]byte(d))
		if err != nil {
			t.Fatal(err)
		}
		r, err := snapshot.FromJSON(data)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.version++
	s, err := snapshot.New(m.version, rs)
	if err != nil {
		t.Fatal(err)
	}
	m.last = s
	if m.publish != nil {
		m.publish(s)
	}
}

// withPolicies gives a server its management policies.
func withPolicies(p PolicySource) func(*Deps) { return func(d *Deps) { d.Policies = p } }

// meshTrustYAML is a MeshTrust for clusters; extra is appended to its spec.
func meshTrustYAML(clusters []string, extra string) string {
	return fmt.Sprintf(`apiVersion: policy.meshrelay.io/v1alpha1
kind: MeshTrust
metadata: {name: fleet, namespace: meshrelay}
spec:
  clusters: [%s]
%s`, strings.Join(clusters, ", "), extra)
}

// trustCluster is one workload cluster: a real kube-apiserver, a real
// agent for credentials and its trust manager, stepped by the test.
type trustCluster struct {
	name  string
	kube  kubernetes.Interface
	agent *testAgent
	mgr   *trust.Manager
	clock *fakeClock
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func startTrustCluster(t *testing.T, ts *testServer, name string) *trustCluster {
	t.Helper()
	k := testenv.StartKube(t)
	cs, err := kubernetes.NewForConfig(k.Config())
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{policyv1alpha1.DefaultMeshNamespace, "app"} {
		if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ta := startAgent(t, ts, name, ts.register(name))
	clock := &fakeClock{now: time.Now()}
	mgr := trust.New(trust.Options{Cluster: name, Now: clock.Now}, ta.TrustClient(), trust.KubeSecrets{Client: cs}, cs, discardLogger())
	return &trustCluster{name: name, kube: cs, agent: ta, mgr: mgr, clock: clock}
}

// step runs one trust step; errors are the test's to judge, so it returns them.
func (c *trustCluster) step(t *testing.T) error {
	t.Helper()
	return c.mgr.Step(context.Background())
}

// secret returns the cluster's cacerts Secret, or nil.
func (c *trustCluster) secret(t *testing.T) *corev1.Secret {
	t.Helper()
	s, err := c.kube.CoreV1().Secrets(policyv1alpha1.DefaultMeshNamespace).Get(context.Background(), trust.SecretName, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return s
}

// trustStatus returns the server's status of the fleet MeshTrust.
func trustStatus(t *testing.T, ts *testServer) *relayv1.MeshTrustStatus {
	t.Helper()
	st, err := ts.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st.GetTrust() {
		if m.GetName() == "fleet" {
			return m
		}
	}
	return nil
}

// clusterStatus returns one cluster's row of the fleet MeshTrust's status.
func clusterStatus(t *testing.T, ts *testServer, cluster string) *relayv1.MeshTrustClusterStatus {
	t.Helper()
	for _, c := range trustStatus(t, ts).GetClusters() {
		if c.GetCluster() == cluster {
			return c
		}
	}
	return nil
}

// workloadLeaf signs a workload certificate with the intermediate CA of a
// cacerts Secret, as istiod would, and returns it with the chain it sends.
func workloadLeaf(t *testing.T, s *corev1.Secret) (*x509.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := pki.ParseKeyPEM(s.Data[trust.KeyCAKey])
	if err != nil {
		t.Fatal(err)
	}
	chain, err := pki.ParseCertificatesPEM(s.Data[trust.KeyCertChain])
	if err != nil {
		t.Fatal(err)
	}
	leafKey, err := pki.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "spiffe://cluster.local/ns/app/sa/reviews"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, chain[0], leafKey.Public(), key.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	mids := x509.NewCertPool()
	for _, c := range chain[:len(chain)-1] {
		mids.AddCert(c)
	}
	return leaf, mids
}

// verifiesAgainst checks that a workload of cluster from is trusted by
// cluster to: its leaf verifies against to's root-cert.pem.
func verifiesAgainst(t *testing.T, from, to *corev1.Secret) error {
	t.Helper()
	leaf, mids := workloadLeaf(t, from)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(to.Data[trust.KeyRootCert]) {
		return fmt.Errorf("root-cert.pem holds no certificate")
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: mids})
	return err
}

// The agent writes Istio's cacerts Secret in a real cluster: the key is
// made there, the chain verifies from a workload leaf up to the root the
// server reports, drift is corrected, and a deleted Secret comes back.
func TestMeshTrustWritesCacerts(t *testing.T) {
	pols := &memPolicies{}
	ts := startServerDeps(t, nil, "", withPolicies(pols))
	east := startTrustCluster(t, ts, "east")
	pols.set(t, meshTrustYAML([]string{"east"}, ""))

	testutil.Eventually(t, "the cacerts Secret", func() bool { _ = east.step(t); return east.secret(t) != nil })
	s := east.secret(t)
	for _, k := range []string{trust.KeyCACert, trust.KeyCAKey, trust.KeyRootCert, trust.KeyCertChain} {
		if len(s.Data[k]) == 0 {
			t.Fatalf("cacerts lacks %s", k)
		}
	}
	if err := verifiesAgainst(t, s, s); err != nil {
		t.Fatalf("a workload leaf does not verify up to root-cert.pem: %v", err)
	}
	roots, _ := pki.ParseCertificatesPEM(s.Data[trust.KeyRootCert])
	testutil.Eventually(t, "east's report in the status", func() bool {
		_ = east.step(t)
		c := clusterStatus(t, ts, "east")
		return c != nil && c.GetPhase() == policyv1alpha1.TrustPhaseActive
	})
	ms := trustStatus(t, ts)
	if len(roots) != 1 || !slices.Equal(ms.GetRoots(), []string{pki.Fingerprint(roots[0])}) {
		t.Fatalf("status roots %v, Secret root %s", ms.GetRoots(), pki.Fingerprint(roots[0]))
	}
	c := clusterStatus(t, ts, "east")
	inter, _ := pki.ParseCertificatesPEM(s.Data[trust.KeyCACert])
	if c.GetIssuerRoot() != ms.GetRoots()[0] || !c.GetIntermediateNotAfter().AsTime().Equal(inter[0].NotAfter) {
		t.Errorf("status of east: issuer %s expiry %v; want %s %v", c.GetIssuerRoot(), c.GetIntermediateNotAfter().AsTime(), ms.GetRoots()[0], inter[0].NotAfter)
	}

	// Drift: someone replaces the roots and drops the key.
	drifted := s.DeepCopy()
	drifted.Data[trust.KeyRootCert] = []byte("not a certificate")
	delete(drifted.Data, trust.KeyCAKey)
	if _, err := east.kube.CoreV1().Secrets(s.Namespace).Update(context.Background(), drifted, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := east.step(t); err != nil {
		t.Fatal(err)
	}
	if got := east.secret(t); !sameData(got, s) {
		t.Fatal("drift in the cacerts Secret was not corrected")
	}
	// Deleted: it comes back with the same intermediate.
	if err := east.kube.CoreV1().Secrets(s.Namespace).Delete(context.Background(), trust.SecretName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := east.step(t); err != nil {
		t.Fatal(err)
	}
	if got := east.secret(t); !sameData(got, s) {
		t.Fatal("the deleted cacerts Secret did not come back as it was")
	}
}

func sameData(a, b *corev1.Secret) bool {
	if a == nil || b == nil || len(a.Data) != len(b.Data) {
		return false
	}
	for k, v := range a.Data {
		if string(b.Data[k]) != string(v) {
			return false
		}
	}
	return true
}

// A root rotation across two clusters: at every step of every phase, a
// workload leaf of each cluster verifies against the roots the other
// cluster holds, and the rotation ends on a new root.
func TestMeshTrustRotationAcrossClusters(t *testing.T) {
	pols := &memPolicies{}
	ts := startServerDeps(t, nil, "", withPolicies(pols))
	east, west := startTrustCluster(t, ts, "east"), startTrustCluster(t, ts, "west")
	clusters := []*trustCluster{east, west}
	pols.set(t, meshTrustYAML([]string{"east", "west"}, ""))
	testutil.Eventually(t, "both clusters active", func() bool {
		stepAll(t, clusters)
		for _, c := range clusters {
			if cs := clusterStatus(t, ts, c.name); cs == nil || cs.GetPhase() != policyv1alpha1.TrustPhaseActive {
				return false
			}
		}
		return true
	})
	oldRoot := trustStatus(t, ts).GetRoots()[0]

	pols.set(t, meshTrustYAML([]string{"east", "west"}, "  rotation: {generation: 2}"))
	seen := map[string]bool{}
	testutil.Eventually(t, "the rotation to end on a new root", func() bool {
		for _, c := range clusters {
			_ = c.step(t)
			checkCrossTrust(t, east, west)
		}
		ms := trustStatus(t, ts)
		seen[ms.GetPhase()] = true
		return ms.GetPhase() == policyv1alpha1.TrustPhaseActive && len(ms.GetRoots()) == 1 && ms.GetRoots()[0] != oldRoot &&
			clusterStatus(t, ts, "east").GetPhase() == policyv1alpha1.TrustPhaseActive &&
			clusterStatus(t, ts, "west").GetPhase() == policyv1alpha1.TrustPhaseActive
	})
	for _, p := range []string{policyv1alpha1.TrustPhaseAddingRoot, policyv1alpha1.TrustPhaseReissuing, policyv1alpha1.TrustPhaseRemovingRoot} {
		if !seen[p] {
			t.Errorf("the rotation skipped phase %s (saw %v)", p, seen)
		}
	}
	newRoot := trustStatus(t, ts).GetRoots()[0]
	for _, c := range clusters {
		roots := rootsOf(t, c.secret(t))
		if !slices.Equal(roots, []string{newRoot}) {
			t.Errorf("%s trusts %v after the rotation, want only the new root %s", c.name, roots, newRoot)
		}
	}
}

func stepAll(t *testing.T, clusters []*trustCluster) {
	t.Helper()
	for _, c := range clusters {
		_ = c.step(t)
	}
}

func rootsOf(t *testing.T, s *corev1.Secret) []string {
	t.Helper()
	certs, err := pki.ParseCertificatesPEM(s.Data[trust.KeyRootCert])
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range certs {
		out = append(out, pki.Fingerprint(c))
	}
	return out
}

// checkCrossTrust fails the test unless each cluster's workloads are
// trusted by the other.
func checkCrossTrust(t *testing.T, a, b *trustCluster) {
	t.Helper()
	sa, sb := a.secret(t), b.secret(t)
	if sa == nil || sb == nil {
		t.Fatal("a cacerts Secret disappeared")
	}
	if err := verifiesAgainst(t, sa, sb); err != nil {
		t.Fatalf("a workload of %s is not trusted by %s: %v", a.name, b.name, err)
	}
	if err := verifiesAgainst(t, sb, sa); err != nil {
		t.Fatalf("a workload of %s is not trusted by %s: %v", b.name, a.name, err)
	}
}

// The server goes away in the middle of a rotation: the agents keep their
// Secrets, whole and trusting each other; a new server on the same store
// resumes the rotation where it was and finishes it.
func TestMeshTrustServerAwayDuringRotation(t *testing.T) {
	pols := &memPolicies{}
	st, dir := store.Store(memory.New()), t.TempDir()
	ts := startServerDeps(t, st, dir, withPolicies(pols))
	east, west := startTrustCluster(t, ts, "east"), startTrustCluster(t, ts, "west")
	clusters := []*trustCluster{east, west}
	pols.set(t, meshTrustYAML([]string{"east", "west"}, ""))
	testutil.Eventually(t, "both clusters active", func() bool {
		stepAll(t, clusters)
		e, w := clusterStatus(t, ts, "east"), clusterStatus(t, ts, "west")
		return e != nil && w != nil && e.GetPhase() == policyv1alpha1.TrustPhaseActive && w.GetPhase() == policyv1alpha1.TrustPhaseActive
	})
	pols.set(t, meshTrustYAML([]string{"east", "west"}, "  rotation: {generation: 2}"))
	testutil.Eventually(t, "the new intermediates phase", func() bool {
		stepAll(t, clusters)
		return trustStatus(t, ts).GetPhase() == policyv1alpha1.TrustPhaseReissuing
	})
	// east gets its new intermediate; then the server is gone.
	testutil.Eventually(t, "east's new intermediate", func() bool {
		_ = east.step(t)
		return clusterStatus(t, ts, "east").GetPhase() == policyv1alpha1.TrustPhaseReissuing
	})
	before := map[string]*corev1.Secret{"east": east.secret(t), "west": west.secret(t)}
	ts.stop()
	for _, c := range clusters {
		if err := c.step(t); err == nil {
			t.Fatalf("%s: a step with the server away succeeded", c.name)
		}
		if !sameData(c.secret(t), before[c.name]) {
			t.Fatalf("%s: the Secret changed while the server was away", c.name)
		}
		if len(rootsOf(t, c.secret(t))) != 2 {
			t.Fatalf("%s: the Secret lost a root while the server was away", c.name)
		}
	}
	checkCrossTrust(t, east, west)

	ts2 := startServerDeps(t, st, dir, withPolicies(pols))
	for _, c := range clusters {
		c.agent.cancel()
		c.agent = startAgent(t, ts2, c.name, ts2.register(c.name))
		c.agent.src.set(t, "reviews") // a fresh input ends the new server's safe mode
		c.mgr = trust.New(trust.Options{Cluster: c.name, Now: c.clock.Now}, c.agent.TrustClient(), trust.KubeSecrets{Client: c.kube}, c.kube, discardLogger())
	}
	pols.set(t, meshTrustYAML([]string{"east", "west"}, "  rotation: {generation: 2}"))
	testutil.Eventually(t, "the second server to resume the rotation", func() bool {
		ms := trustStatus(t, ts2)
		return ms != nil && ms.GetPhase() != ""
	})
	if p := trustStatus(t, ts2).GetPhase(); p != policyv1alpha1.TrustPhaseReissuing {
		t.Fatalf("the second server is in phase %s, want it to resume %s", p, policyv1alpha1.TrustPhaseReissuing)
	}
	testutil.Eventually(t, "the rotation to finish", func() bool {
		for _, c := range clusters {
			_ = c.step(t)
			checkCrossTrust(t, east, west)
		}
		ms := trustStatus(t, ts2)
		return ms.GetPhase() == policyv1alpha1.TrustPhaseActive && len(rootsOf(t, east.secret(t))) == 1 && len(rootsOf(t, west.secret(t))) == 1
	})
}

// A CSR that is not one is refused with an error naming the cluster, and
// an oversized report is refused.
func TestMeshTrustRefusesBadRequests(t *testing.T) {
	pols := &memPolicies{}
	ts := startServerDeps(t, nil, "", withPolicies(pols))
	pols.set(t, meshTrustYAML([]string{"east"}, ""))
	east := startAgent(t, ts, "east", ts.register("east"))
	client := east.TrustClient()
	testutil.Eventually(t, "the plan", func() bool {
		plan, err := client.Report(context.Background(), &relayv1.TrustReport{})
		return err == nil && plan.GetPolicy() == "meshrelay/fleet"
	})
	_, err := client.Sign(context.Background(), &relayv1.TrustSignRequest{Policy: "meshrelay/fleet", Csr: []byte("not a CSR")})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `cluster "east"`) || !strings.Contains(err.Error(), "invalid certificate signing request") {
		t.Errorf("Sign(garbage) = %v, want InvalidArgument naming the cluster and the CSR", err)
	}
	key, _ := pki.NewKey()
	csr, _ := pki.NewCSR(key, "east")
	if _, err := client.Sign(context.Background(), &relayv1.TrustSignRequest{Policy: "meshrelay/other", Csr: csr}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("Sign for another policy = %v, want FailedPrecondition", err)
	}
	if _, err := client.Report(context.Background(), &relayv1.TrustReport{Policy: "meshrelay/fleet", CaCert: make([]byte, maxTrustCertBytes+1)}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Report(oversized) = %v, want InvalidArgument", err)
	}
}

// An intermediate is replaced renewBefore its expiry, with a new key; an
// agent that restarts adopts the Secret it wrote instead of replacing it.
func TestMeshTrustRenewsIntermediates(t *testing.T) {
	pols := &memPolicies{}
	ts := startServerDeps(t, nil, "", withPolicies(pols))
	east := startTrustCluster(t, ts, "east")
	pols.set(t, meshTrustYAML([]string{"east"}, "  intermediate: {ttl: 2h, renewBefore: 1h}"))
	testutil.Eventually(t, "the cacerts Secret", func() bool { _ = east.step(t); return east.secret(t) != nil })
	first := east.secret(t)

	east.mgr = trust.New(trust.Options{Cluster: "east", Now: east.clock.Now}, east.agent.TrustClient(), trust.KubeSecrets{Client: east.kube}, east.kube, discardLogger())
	if err := east.step(t); err != nil {
		t.Fatal(err)
	}
	if !sameData(east.secret(t), first) {
		t.Fatal("a restarted agent replaced the intermediate it had written")
	}

	east.clock.add(59 * time.Minute)
	if err := east.step(t); err != nil {
		t.Fatal(err)
	}
	if !sameData(east.secret(t), first) {
		t.Fatal("the intermediate was replaced more than renewBefore ahead of its expiry")
	}
	east.clock.add(2 * time.Minute)
	if err := east.step(t); err != nil {
		t.Fatal(err)
	}
	renewed := east.secret(t)
	if string(renewed.Data[trust.KeyCACert]) == string(first.Data[trust.KeyCACert]) || string(renewed.Data[trust.KeyCAKey]) == string(first.Data[trust.KeyCAKey]) {
		t.Fatal("the intermediate was not renewed with a new key within renewBefore of its expiry")
	}
	if err := verifiesAgainst(t, renewed, first); err != nil {
		t.Fatalf("the renewed intermediate is not trusted where the old one was: %v", err)
	}
}
