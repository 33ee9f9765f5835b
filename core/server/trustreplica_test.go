package server

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/core/agent/trust"
	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	corev1 "k8s.io/api/core/v1"
)

// readGate makes server replicas decide from the same trust state: once
// armed, each replica's read of the record is held, after the read, until
// every replica has read it (or a generous deadline passes).
type readGate struct {
	mu       sync.Mutex
	replicas int
	arrived  map[string]bool
	open     chan struct{} // nil while disarmed
}

func (g *readGate) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.arrived, g.open = map[string]bool{}, make(chan struct{})
}

func (g *readGate) wait(ctx context.Context, replica string) {
	g.mu.Lock()
	open := g.open
	if open == nil || g.arrived[replica] {
		g.mu.Unlock()
		return
	}
	g.arrived[replica] = true
	if len(g.arrived) == g.replicas {
		close(open)
		g.open = nil
	}
	g.mu.Unlock()
	select {
	case <-open:
	case <-ctx.Done():
	case <-time.After(30 * time.Second):
	}
}

// gatedStore is a replica's store: reads of the record key pass the gate,
// and every write of it is recorded. It runs and reports the health of the
// write-through store it wraps, as the server does with one.
type gatedStore struct {
	*store.WriteThrough
	replica string
	key     string
	gate    *readGate
	writes  *writeLog
}

type writeLog struct {
	t     *testing.T
	mu    sync.Mutex
	roots []string // the current root of each trust state written
}

func (l *writeLog) add(data []byte) {
	t := l.t
	var st trustState
	if err := json.Unmarshal(data, &st); err != nil || st.Current == nil {
		t.Errorf("a trust state that does not decode was written: %v", err)
		return
	}
	certs, err := pki.ParseCertificatesPEM([]byte(st.Current.Cert))
	if err != nil {
		t.Errorf("a trust state with a bad root was written: %v", err)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if fp := pki.Fingerprint(certs[0]); !slices.Contains(l.roots, fp) {
		l.roots = append(l.roots, fp)
	}
}

func (l *writeLog) distinct() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.roots)
}

func (g *gatedStore) GetTrust(ctx context.Context, name string) (store.TrustRecord, error) {
	r, err := g.WriteThrough.GetTrust(ctx, name)
	if name == g.key {
		g.gate.wait(ctx, g.replica)
	}
	return r, err
}

func (g *gatedStore) CompareAndPutTrust(ctx context.Context, r store.TrustRecord) (store.TrustRecord, error) {
	stored, err := g.WriteThrough.CompareAndPutTrust(ctx, r)
	if err == nil && r.Name == g.key {
		g.writes.add(r.Data)
	}
	return stored, err
}

func (g *gatedStore) PutTrust(ctx context.Context, r store.TrustRecord) error {
	err := g.WriteThrough.PutTrust(ctx, r)
	if err == nil && r.Name == g.key {
		g.writes.add(r.Data)
	}
	return err
}

// dirCluster is a workload cluster whose cacerts Secret is a file, with a
// real agent for credentials and its trust manager, stepped by the test.
type dirCluster struct {
	name    string
	agent   *testAgent
	secrets trust.DirSecrets
	mgr     *trust.Manager
}

func startDirCluster(t *testing.T, ts *testServer, name, token string) *dirCluster {
	t.Helper()
	ta := startAgent(t, ts, name, token)
	secrets := trust.DirSecrets{Dir: t.TempDir()}
	mgr := trust.New(trust.Options{Cluster: name}, ta.TrustClient(), secrets, nil, discardLogger())
	return &dirCluster{name: name, agent: ta, secrets: secrets, mgr: mgr}
}

func (c *dirCluster) secret(t *testing.T) *corev1.Secret {
	t.Helper()
	s, err := c.secrets.Get(context.Background(), policyv1alpha1.DefaultMeshNamespace)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Two replicas on one real Redis race to create a MeshTrust's root and
// then to start its rotation, both reading the same state before either
// writes: one root wins each time (the other replica's write is refused),
// and both clusters, each on another replica, end on the winner.
func TestMeshTrustReplicasRaceRotation(t *testing.T) {
	r := testenv.StartRedis(t)
	gate, writes := &readGate{replicas: 2}, &writeLog{t: t}
	gated := func(replica string) store.Store {
		return &gatedStore{WriteThrough: redisStore(t, r, replica), replica: replica, key: "meshrelay/fleet", gate: gate, writes: writes}
	}
	raw := rawRedis(t, r)
	pols1, pols2 := &memPolicies{}, &memPolicies{}
	ts1 := startServerDeps(t, gated("r1"), "", withPolicies(pols1), withID("r1"))
	testutil.Eventually(t, "the CA to reach Redis", func() bool {
		_, _, err := raw.GetCA(context.Background())
		return err == nil
	})
	ts2 := startServerDeps(t, gated("r2"), "", withPolicies(pols2), withID("r2"))
	eastTok, westTok := ts1.register("east"), ts1.register("west")
	testutil.Eventually(t, "replica 2 to learn the registrations", func() bool {
		_, e := ts2.store.GetCluster(context.Background(), "east")
		_, w := ts2.store.GetCluster(context.Background(), "west")
		return e == nil && w == nil
	})
	east, west := startDirCluster(t, ts1, "east", eastTok), startDirCluster(t, ts2, "west", westTok)
	clusters := []*dirCluster{east, west}
	setBoth := func(extra string) {
		for _, p := range []*memPolicies{pols1, pols2} {
			p.set(t, meshTrustYAML([]string{"east", "west"}, extra))
		}
	}
	active := func(ts *testServer, root string) bool {
		ms := trustStatus(t, ts)
		if ms == nil || ms.GetPhase() != policyv1alpha1.TrustPhaseActive || len(ms.GetRoots()) != 1 || (root != "" && ms.GetRoots()[0] != root) {
			return false
		}
		for _, c := range ms.GetClusters() {
			if c.GetPhase() != policyv1alpha1.TrustPhaseActive {
				return false
			}
		}
		return len(ms.GetClusters()) == 2
	}

	gate.arm()
	setBoth("")
	testutil.Eventually(t, "both clusters on one first root", func() bool {
		for _, c := range clusters {
			_ = c.mgr.Step(context.Background())
		}
		return active(ts1, "") && active(ts2, trustStatus(t, ts1).GetRoots()[0])
	})
	if got := writes.distinct(); len(got) != 1 {
		t.Fatalf("the replicas stored %d first roots %v, want one", len(got), got)
	}
	first := writes.distinct()[0]

	gate.arm()
	setBoth("  rotation: {generation: 2}")
	testutil.Eventually(t, "the rotation to end on one new root on both replicas", func() bool {
		for _, c := range clusters {
			_ = c.mgr.Step(context.Background())
			if err := verifiesAgainst(t, east.secret(t), west.secret(t)); err != nil {
				t.Fatalf("a workload of east is not trusted by west during the rotation: %v", err)
			}
			if err := verifiesAgainst(t, west.secret(t), east.secret(t)); err != nil {
				t.Fatalf("a workload of west is not trusted by east during the rotation: %v", err)
			}
		}
		ms := trustStatus(t, ts1)
		return ms != nil && len(ms.GetRoots()) == 1 && ms.GetRoots()[0] != first && active(ts1, "") && active(ts2, ms.GetRoots()[0])
	})
	got := writes.distinct()
	if len(got) != 2 {
		t.Fatalf("the replicas stored roots %v, want the first and one new root", got)
	}
	winner := got[1]
	stored, err := raw.GetTrust(context.Background(), "meshrelay/fleet")
	if err != nil {
		t.Fatal(err)
	}
	var st trustState
	if err := json.Unmarshal(stored.Data, &st); err != nil {
		t.Fatal(err)
	}
	if cur, _ := pki.ParseCertificatesPEM([]byte(st.Current.Cert)); pki.Fingerprint(cur[0]) != winner || st.Old != nil {
		t.Errorf("Redis holds root %s (old %v), want only the winner %s", pki.Fingerprint(cur[0]), st.Old != nil, winner)
	}
	for _, c := range clusters {
		roots := rootsOf(t, c.secret(t))
		if !slices.Equal(roots, []string{trustStatus(t, ts1).GetRoots()[0]}) {
			t.Errorf("%s trusts %v after the rotation, want only the winning root", c.name, roots)
		}
	}
}

// A deregistered cluster's trust report leaves the store with it.
func TestMeshTrustReportLeavesWithCluster(t *testing.T) {
	r := testenv.StartRedis(t)
	raw := rawRedis(t, r)
	pols := &memPolicies{}
	ts := startServerDeps(t, redisStore(t, r, "r1"), "", withPolicies(pols), withID("r1"))
	pols.set(t, meshTrustYAML([]string{"east"}, ""))
	east := startDirCluster(t, ts, "east", ts.register("east"))
	ctx := context.Background()
	testutil.Eventually(t, "east's trust report in Redis", func() bool {
		_ = east.mgr.Step(ctx)
		_, err := raw.GetTrust(ctx, trustReportPrefix+"east")
		return err == nil
	})
	if _, err := relayv1.NewAdminClient(ts.dial(nil)).DeregisterCluster(ts.adminCtx(), &relayv1.DeregisterClusterRequest{Cluster: "east"}); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.GetTrust(ctx, trustReportPrefix+"east"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("east's trust report after its deregistration: err = %v, want ErrNotFound", err)
	}
}
