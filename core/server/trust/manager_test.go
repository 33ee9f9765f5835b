package trust

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// testFleet is a server in or out of safe mode, whose clusters run Istio.
type testFleet struct{ safe atomic.Bool }

func (f *testFleet) Meshes() map[string][]string {
	return map[string][]string{"east": {"istio"}, "west": {"istio"}}
}
func (f *testFleet) SafeMode() bool { return f.safe.Load() }

// plainSealer keeps a root's key as it is: sealing is the server's.
type plainSealer struct{}

func (plainSealer) SealCA(ca *pki.CA) ([]byte, []byte, error) {
	data, err := ca.MarshalPEM()
	return data, data, err
}
func (plainSealer) OpenCA(_, sealed []byte) (*pki.CA, error) { return pki.ParsePEM(sealed) }

// trustPolicies returns the management snapshot holding one MeshTrust,
// meshrelay/fleet, for clusters at a rotation generation.
func trustPolicies(t *testing.T, generation int, clusters ...string) *snapshot.Snapshot {
	t.Helper()
	quoted := make([]string, len(clusters))
	for i, c := range clusters {
		quoted[i] = fmt.Sprintf("%q", c)
	}
	r, err := snapshot.FromJSON(fmt.Appendf(nil, `{"apiVersion":"policy.meshrelay.io/v1alpha1","kind":"MeshTrust",
	  "metadata":{"name":"fleet","namespace":"meshrelay"},"spec":{"clusters":[%s],"rotation":{"generation":%d}}}`,
		strings.Join(quoted, ","), generation))
	if err != nil {
		t.Fatal(err)
	}
	s, err := snapshot.New(uint64(generation+1), []snapshot.Resource{r})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testCluster is what a cluster's agent does about trust: it reports the
// roots its plan says to trust and the intermediate it last got signed.
type testCluster struct {
	name   string
	caCert []byte
}

// sync reports the cluster's trust, takes the roots of the plan it gets
// back, gets a new intermediate signed when asked to (as an agent does when
// the signing root changed) and reports again.
func (c *testCluster) sync(t *testing.T, m *Manager, sign bool) *relayv1.TrustPlan {
	t.Helper()
	ctx := context.Background()
	plan, err := m.Report(ctx, c.name, &relayv1.TrustReport{Policy: "meshrelay/fleet"})
	if err != nil {
		t.Fatalf("Report(%s) = %v", c.name, err)
	}
	if sign {
		key, err := pki.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		csr, err := pki.NewCSR(key, c.name)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := m.Sign(ctx, c.name, &relayv1.TrustSignRequest{Policy: plan.GetPolicy(), Csr: csr})
		if err != nil {
			t.Fatalf("Sign(%s) = %v", c.name, err)
		}
		c.caCert = resp.GetCaCert()
	}
	roots, err := pki.ParseCertificatesPEM(plan.GetTrustBundle())
	if err != nil {
		t.Fatal(err)
	}
	var fps []string
	for _, r := range roots {
		fps = append(fps, pki.Fingerprint(r))
	}
	plan, err = m.Report(ctx, c.name, &relayv1.TrustReport{Policy: plan.GetPolicy(), Roots: fps, CaCert: c.caCert})
	if err != nil {
		t.Fatalf("Report(%s) = %v", c.name, err)
	}
	return plan
}

// phase reconciles and returns the MeshTrust's phase and roots.
func phase(t *testing.T, m *Manager) (string, []string) {
	t.Helper()
	m.reconcile(context.Background())
	st := m.Statuses()
	if len(st) != 1 {
		t.Fatalf("Statuses() = %v, want one MeshTrust", st)
	}
	return st[0].GetPhase(), st[0].GetRoots()
}

// A Manager on its own, with a store and a fleet: a MeshTrust gets a root,
// its clusters get intermediates, and a new generation rotates the root in
// phases, each one ending only once every cluster reported it got there,
// and none starting in safe mode.
func TestManagerRotatesInPhases(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	for _, c := range []string{"east", "west"} {
		if err := st.PutCluster(ctx, store.Cluster{Name: c}); err != nil {
			t.Fatal(err)
		}
	}
	fleet := &testFleet{}
	m := New(Options{}, Deps{Store: st, Fleet: fleet, Sealer: plainSealer{}})
	m.SetPolicies(trustPolicies(t, 0, "east", "west"))
	p, roots := phase(t, m)
	if p != policyv1alpha1.TrustPhaseActive || len(roots) != 1 {
		t.Fatalf("first reconcile: phase %s, roots %v; want Active with one root", p, roots)
	}
	first := roots[0]
	east, west := &testCluster{name: "east"}, &testCluster{name: "west"}
	east.sync(t, m, true)
	west.sync(t, m, true)

	fleet.safe.Store(true)
	m.SetPolicies(trustPolicies(t, 1, "east", "west"))
	if p, roots := phase(t, m); p != policyv1alpha1.TrustPhaseActive || !slices.Equal(roots, []string{first}) {
		t.Fatalf("in safe mode: phase %s, roots %v; want no rotation", p, roots)
	}
	fleet.safe.Store(false)
	p, roots = phase(t, m)
	if p != policyv1alpha1.TrustPhaseAddingRoot || len(roots) != 2 || roots[0] != first {
		t.Fatalf("new generation: phase %s, roots %v; want AddingRoot, the old root signing first", p, roots)
	}
	second := roots[1]

	// Each phase waits for west until it reports.
	steps := []struct {
		sign  bool
		phase string
		roots []string
	}{
		{false, policyv1alpha1.TrustPhaseReissuing, []string{second, first}},
		{true, policyv1alpha1.TrustPhaseRemovingRoot, []string{second}},
		{false, policyv1alpha1.TrustPhaseActive, []string{second}},
	}
	for _, s := range steps {
		before, _ := phase(t, m)
		east.sync(t, m, s.sign)
		if p, _ := phase(t, m); p != before {
			t.Fatalf("phase %s ended before west reported: now %s", before, p)
		}
		west.sync(t, m, s.sign)
		if p, roots := phase(t, m); p != s.phase || !slices.Equal(roots, s.roots) {
			t.Fatalf("after %s: phase %s, roots %v; want %s, %v", before, p, roots, s.phase, s.roots)
		}
	}
	for _, c := range m.Statuses()[0].GetClusters() {
		if c.GetIssuerRoot() != second || c.GetPhase() != policyv1alpha1.TrustPhaseActive {
			t.Errorf("cluster %s: issuer %s, phase %s; want %s, Active", c.GetCluster(), c.GetIssuerRoot(), c.GetPhase(), second)
		}
	}
}

// The Trust RPCs' bodies refuse what the Manager cannot act on, with the
// gRPC codes the agents see.
func TestManagerRefuses(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	if err := st.PutCluster(ctx, store.Cluster{Name: "east"}); err != nil {
		t.Fatal(err)
	}
	m := New(Options{}, Deps{Store: st, Fleet: &testFleet{}, Sealer: plainSealer{}})
	m.SetPolicies(trustPolicies(t, 0, "east"))
	m.reconcile(ctx)
	tests := map[string]struct {
		call func() error
		want codes.Code
	}{
		"a cluster no MeshTrust selects": {func() error {
			_, err := m.Sign(ctx, "west", &relayv1.TrustSignRequest{Policy: "meshrelay/fleet"})
			return err
		}, codes.FailedPrecondition},
		"another MeshTrust": {func() error {
			_, err := m.Sign(ctx, "east", &relayv1.TrustSignRequest{Policy: "meshrelay/other"})
			return err
		}, codes.FailedPrecondition},
		"not a CSR": {func() error {
			_, err := m.Sign(ctx, "east", &relayv1.TrustSignRequest{Policy: "meshrelay/fleet", Csr: []byte("garbage")})
			return err
		}, codes.InvalidArgument},
		"a root that is no fingerprint": {func() error {
			_, err := m.Report(ctx, "east", &relayv1.TrustReport{Policy: "meshrelay/fleet", Roots: []string{"ABC"}})
			return err
		}, codes.InvalidArgument},
		"an oversized report": {func() error {
			_, err := m.Report(ctx, "east", &relayv1.TrustReport{Policy: "meshrelay/fleet", CaCert: make([]byte, MaxReportBytes)})
			return err
		}, codes.InvalidArgument},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := status.Code(tc.call()); got != tc.want {
				t.Errorf("code = %v, want %v", got, tc.want)
			}
		})
	}
}
