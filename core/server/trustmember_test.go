package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"math/big"
	"net/url"
	"strings"
	"testing"
	"time"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/core/agent/trust"
	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
)

// verifyAsIstio signs a workload leaf for a SPIFFE ID with the
// intermediate of a cacerts Secret, as istiod does, and verifies it with
// Go's x509 the way a peer reads the Secret: root-cert.pem the roots,
// cert-chain.pem the chain.
func verifyAsIstio(t *testing.T, s *corev1.Secret, id string) error {
	t.Helper()
	key, err := pki.ParseKeyPEM(s.Data[trust.KeyCAKey])
	if err != nil {
		t.Fatal(err)
	}
	chain, err := pki.ParseCertificatesPEM(s.Data[trust.KeyCertChain])
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(id)
	if err != nil {
		t.Fatal(err)
	}
	leafKey, err := pki.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), URIs: []*url.URL{u},
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
	roots, mids := x509.NewCertPool(), x509.NewCertPool()
	if !roots.AppendCertsFromPEM(s.Data[trust.KeyRootCert]) {
		t.Fatal("root-cert.pem holds no certificate")
	}
	for _, c := range chain {
		mids.AddCert(c)
	}
	_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: mids})
	return err
}

// A cluster's intermediate signs workload identities in the MeshTrust's
// trust domains only: in the cacerts Secret the agent writes, a leaf for
// another trust domain fails verification against root-cert.pem.
func TestMeshTrustIntermediateConstrained(t *testing.T) {
	pols := &memPolicies{}
	ts := startServerDeps(t, nil, "", withPolicies(pols))
	east := startDirCluster(t, ts, "east", ts.register("east"))
	pols.set(t, meshTrustYAML([]string{"east"}, ""))
	testutil.Eventually(t, "east's cacerts Secret", func() bool {
		_ = east.mgr.Step(context.Background())
		return east.secret(t) != nil
	})
	s := east.secret(t)
	if err := verifyAsIstio(t, s, "spiffe://cluster.local/ns/bookinfo/sa/bookinfo-reviews"); err != nil {
		t.Fatalf("a leaf in the mesh's trust domain: %v", err)
	}
	for _, id := range []string{"spiffe://other-domain.example/ns/bookinfo/sa/bookinfo-reviews", "spiffe://meshrelay/cluster/west"} {
		if err := verifyAsIstio(t, s, id); err == nil {
			t.Errorf("a leaf for %s verified against east's root-cert.pem; want the intermediate's name constraint to refuse it", id)
		}
	}
}

// A cluster the operator excludes from rotations does not hold one: while
// it never reports, the rotation waits and says so; once excluded, the
// rotation ends without it, and the status flags it.
func TestMeshTrustExcludedClusterDoesNotHoldRotation(t *testing.T) {
	pols := &memPolicies{}
	ts := startServerDeps(t, nil, "", withPolicies(pols))
	east := startDirCluster(t, ts, "east", ts.register("east"))
	ts.register("west") // registered, never reports
	both := []string{"east", "west"}
	pols.set(t, meshTrustYAML(both, ""))
	testutil.Eventually(t, "east's cacerts Secret", func() bool {
		_ = east.mgr.Step(context.Background())
		return east.secret(t) != nil
	})
	first := trustStatus(t, ts).GetRoots()[0]
	pols.set(t, meshTrustYAML(both, "  rotation: {generation: 2}"))
	testutil.Eventually(t, "a warning that the rotation waits for west", func() bool {
		_ = east.mgr.Step(context.Background())
		return hasTrustDiag(ts, "west", "waits for cluster \"west\", whose agent has not reported")
	})
	if p := trustStatus(t, ts).GetPhase(); p != policyv1alpha1.TrustPhaseAddingRoot {
		t.Fatalf("phase %s while west has not reported, want %s", p, policyv1alpha1.TrustPhaseAddingRoot)
	}
	pols.set(t, meshTrustYAML(both, "  rotation: {generation: 2, excludedClusters: [west]}"))
	testutil.Eventually(t, "the rotation to end without west", func() bool {
		_ = east.mgr.Step(context.Background())
		ms := trustStatus(t, ts)
		return ms.GetPhase() == policyv1alpha1.TrustPhaseActive && len(ms.GetRoots()) == 1 && ms.GetRoots()[0] != first
	})
	if !hasTrustDiag(ts, "west", "excluded from rotations") {
		t.Errorf("no warning flags west as excluded: %v", ts.trust.Diagnostics())
	}
	if roots := rootsOf(t, east.secret(t)); len(roots) != 1 || roots[0] != trustStatus(t, ts).GetRoots()[0] {
		t.Errorf("east trusts %v after the rotation, want only the new root", roots)
	}
}

func hasTrustDiag(ts *testServer, cluster, summary string) bool {
	for _, d := range ts.trust.Diagnostics() {
		if d.Cluster == cluster && strings.Contains(d.Summary, summary) {
			return true
		}
	}
	return false
}

// A MeshTrust that names no cluster is invalid and selects none: a
// registered cluster gets no plan and no intermediate, whatever it runs.
// Reports are bounded in size, root by root.
func TestMeshTrustMembershipAndReportBounds(t *testing.T) {
	pols := &memPolicies{}
	ts := startServerDeps(t, nil, "", withPolicies(pols))
	pols.set(t, `apiVersion: policy.meshrelay.io/v1alpha1
kind: MeshTrust
metadata: {name: fleet, namespace: meshrelay}
spec: {}
`)
	rogue := startAgent(t, ts, "rogue", ts.register("rogue"))
	client := rogue.TrustClient()
	ctx := context.Background()
	var plan *relayv1.TrustPlan
	testutil.Eventually(t, "the agent's first report", func() bool {
		var err error
		plan, err = client.Report(ctx, &relayv1.TrustReport{Policy: "meshrelay/fleet"})
		return err == nil
	})
	if plan.GetPolicy() != "" {
		t.Fatalf("Report of an unnamed cluster = %v; want an empty plan", plan)
	}
	key, _ := pki.NewKey()
	csr, _ := pki.NewCSR(key, "rogue")
	if _, err := client.Sign(ctx, &relayv1.TrustSignRequest{Policy: "meshrelay/fleet", Csr: csr}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("Sign by an unnamed cluster = %v, want FailedPrecondition", err)
	}
	// Reports under the relay's receive limit for Report reach the
	// server's checks; larger ones never reach gRPC (budget_test.go).
	long := strings.Repeat("a", 8<<10)
	fp := strings.Repeat("ab", 32)
	for name, r := range map[string]*relayv1.TrustReport{
		"two 8 KiB roots":       {Policy: "meshrelay/fleet", Roots: []string{long, long}},
		"a root not a SHA-256":  {Policy: "meshrelay/fleet", Roots: []string{fp + "00"}},
		"an uppercase root":     {Policy: "meshrelay/fleet", Roots: []string{strings.ToUpper(fp)}},
		"an 8 KiB policy name":  {Policy: long},
		"too many valid roots":  {Policy: "meshrelay/fleet", Roots: []string{fp, fp, fp, fp, fp, fp, fp, fp, fp, fp, fp, fp, fp, fp, fp, fp, fp}},
		"a 20 KiB error string": {Policy: "meshrelay/fleet", Error: strings.Repeat("e", 20<<10)},
	} {
		if _, err := client.Report(ctx, r); status.Code(err) != codes.InvalidArgument {
			t.Errorf("Report(%s) = %v, want InvalidArgument", name, err)
		}
	}
	if _, err := client.Report(ctx, &relayv1.TrustReport{Policy: "meshrelay/fleet", Roots: []string{fp}}); err != nil {
		t.Errorf("Report with a fingerprint root: %v", err)
	}
	big := strings.Repeat("a", 1<<20)
	if _, err := client.Report(ctx, &relayv1.TrustReport{Policy: "meshrelay/fleet", Roots: []string{big, big}}); err == nil {
		t.Error("Report(two 1 MiB roots) succeeded")
	}
}
