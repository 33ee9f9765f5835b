package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/agent"
	"github.com/meshrelay/meshrelay/core/agent/xds"
	"github.com/meshrelay/meshrelay/core/engine"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/core/rollout"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/internal/offline"
	"github.com/meshrelay/meshrelay/internal/tcpproxy"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// The tests in this file run staged rollouts through the real Istio
// plugin process (bin/meshrelay-plugin-istio), on a fleet of nine
// clusters labelled into three tiers, and check every cluster's outputs
// against an offline translation of the same inputs under the revision
// its stage is on.

// rolloutTiers are the tiers of the nine clusters, three each.
var rolloutTiers = []string{"one", "two", "three"}

// reviewsPolicy is the TrafficPolicy the rollouts change: a timeout on
// reviews.
func reviewsPolicy(timeout string) string {
	return `apiVersion: policy.meshrelay.io/v1alpha1
kind: TrafficPolicy
metadata: {name: reviews-timeout, namespace: bookinfo}
spec:
  destinationSelectors: [{namespaces: [bookinfo], names: [reviews]}]
  http: [{name: reviews, timeout: ` + timeout + `}]`
}

// strategyYAML is a RolloutStrategy with one stage per tier; stages
// holds each stage's extra fields, by tier.
func strategyYAML(stages map[string]string) string {
	var b strings.Builder
	b.WriteString("apiVersion: policy.meshrelay.io/v1alpha1\nkind: RolloutStrategy\nmetadata: {name: fleet, namespace: meshrelay}\nspec:\n  minHealthy: 300ms\n  progressDeadline: 1h\n  stages:\n")
	for _, tier := range rolloutTiers {
		fmt.Fprintf(&b, "  - name: %s\n    clusterSelector: {matchLabels: {tier: %s}}\n", tier, tier)
		if extra := stages[tier]; extra != "" {
			b.WriteString("    " + extra + "\n")
		}
	}
	return b.String()
}

// rolloutFleet is a server with the Istio plugin, nine agents, and a
// model of what each cluster's outputs must be.
type rolloutFleet struct {
	t       *testing.T
	servers []*testServer
	// logs are each server's last log lines, for failure messages.
	logs      []*tailLines
	pols      []*memPolicies
	agents    map[string]*testAgent
	proxies   map[string]*tcpproxy.Proxy // by cluster: fleetSetup.proxied
	xds       *testXDS                   // the agent's xDS server of fleetSetup.envoy
	clusters  string                     // one directory of YAML per cluster
	inputs    map[string]*snapshot.Snapshot
	model     []pluginhost.Translator
	modelRuns int
	strategy  string
}

// rolloutPlugins are the Istio and Envoy plugin binaries, built once per
// test binary. TestMain removes their directory.
var rolloutPlugins struct {
	once  sync.Once
	dir   string
	paths map[string]string
	err   error
}

// fleetSetup varies the fleet startRolloutFleet starts.
type fleetSetup struct {
	// proxied clusters reach the first server through a proxy the test
	// can cut (rolloutFleet.proxies).
	proxied []string
	// envoy is a cluster that runs the demo's west cluster (an Envoy edge
	// proxy, node "edge"), whose agent serves xDS beside its recording
	// sink, and for which the servers run the Envoy plugin too.
	envoy string
}

// testXDS is an agent's xDS server, serving on a loopback port and
// reporting what proxies reject to its agent.
type testXDS struct {
	*xds.Server
	addr  string
	agent atomic.Pointer[agent.Agent]
}

func startXDS(t *testing.T) *testXDS {
	t.Helper()
	x := &testXDS{}
	x.Server = xds.New(xds.Options{Report: func(backend string, rejected map[snapshot.ID]error) {
		if a := x.agent.Load(); a != nil {
			a.Report(backend, rejected)
		}
	}})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	x.addr = lis.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- x.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return x
}

// istioTranslators starts the Istio plugin in a host of its own.
func istioTranslators(t *testing.T) []pluginhost.Translator {
	return pluginTranslators(t, "istio")
}

// pluginTranslators builds the Istio and Envoy plugins (once) and starts
// those named in a host of their own.
func pluginTranslators(t *testing.T, names ...string) []pluginhost.Translator {
	t.Helper()
	rolloutPlugins.once.Do(func() {
		dir, err := os.MkdirTemp("", "meshrelay-rollout-plugins")
		if err != nil {
			rolloutPlugins.err = err
			return
		}
		rolloutPlugins.dir = dir
		rolloutPlugins.paths, rolloutPlugins.err = pluginhost.BuildBinaries(context.Background(), "../..", dir, []string{"istio", "envoy"})
	})
	if rolloutPlugins.err != nil {
		t.Fatalf("build the plugins: %v", rolloutPlugins.err)
	}
	dir := t.TempDir()
	for _, name := range names {
		if _, err := pluginhost.Install(dir, rolloutPlugins.paths[name], ""); err != nil {
			t.Fatal(err)
		}
	}
	h, err := pluginhost.New(dir, nil, pluginhost.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	var out []pluginhost.Translator
	for _, p := range h.Plugins() {
		out = append(out, p)
	}
	return out
}

func rolloutClusterNames() []string {
	var out []string
	for _, tier := range rolloutTiers {
		for _, n := range []string{"a", "b", "c"} {
			out = append(out, tier+"-"+n)
		}
	}
	return out
}

func memoryStore() store.Store { return memory.New() }

func tierOf(cluster string) string { return strings.SplitN(cluster, "-", 2)[0] }

// startRolloutFleet starts one server per store, each with its own
// plugin process and policy source, registers the nine clusters through
// the first and connects their agents to the servers in order. Each store
// is made when its server starts, so that it loads what the earlier
// servers stored (the CA).
func startRolloutFleet(t *testing.T, stores []func() store.Store, strategy string, setups ...func(*fleetSetup)) *rolloutFleet {
	t.Helper()
	var setup fleetSetup
	for _, s := range setups {
		s(&setup)
	}
	f := &rolloutFleet{t: t, agents: map[string]*testAgent{}, proxies: map[string]*tcpproxy.Proxy{}, clusters: t.TempDir(), strategy: strategy, model: istioTranslators(t)}
	plugins := []string{"istio"}
	for _, name := range rolloutClusterNames() {
		demo := "east"
		if name == setup.envoy {
			demo, plugins = "west", []string{"istio", "envoy"}
		}
		data, err := os.ReadFile("../../testdata/demo/clusters/" + demo + "/cluster.yaml")
		if err != nil {
			t.Fatal(err)
		}
		testutil.WriteFile(t, filepath.Join(f.clusters, name, "cluster.yaml"), string(data))
	}
	f.readInputs()
	var addrs []string
	for i, newStore := range stores {
		st := newStore()
		pols := &memPolicies{}
		pols.set(t, strategy, reviewsPolicy("3s"))
		translators := pluginTranslators(t, plugins...)
		logs := &tailLines{}
		ts := startServerDeps(t, st, "", func(d *Deps) {
			d.Translators, d.Policies = translators, pols
			d.Logger = slog.New(slog.NewTextHandler(logs, nil))
			if os.Getenv("ROLLOUT_DEBUG") != "" {
				d.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
			}
		},
			withID(fmt.Sprintf("replica-%d", i)), func(o *Options) { o.RolloutInterval = 20 * time.Millisecond })
		f.servers, f.pols, f.logs = append(f.servers, ts), append(f.pols, pols), append(f.logs, logs)
		addrs = append(addrs, ts.Addr())
	}
	for _, name := range rolloutClusterNames() {
		tok := f.servers[0].registerWith(&relayv1.RegisterClusterRequest{Cluster: name, Labels: map[string]string{"tier": tierOf(name)}})
		server := strings.Join(addrs, ",")
		if slices.Contains(setup.proxied, name) {
			p, err := tcpproxy.Start(addrs[0])
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			f.proxies[name], server = p, p.Addr()
		}
		var extra agent.Sinks
		if name == setup.envoy {
			f.xds = startXDS(t)
			extra = agent.Sinks{f.xds}
		}
		src := newMemSource()
		a := startAgentSinks(t, f.servers[0], name, tok, src, extra, func(o *agent.Options) { o.Server = server })
		a.src = src
		if name == setup.envoy {
			f.xds.agent.Store(a.Agent)
		}
		a.src.ch <- f.inputs[name]
		f.agents[name] = a
	}
	f.waitOutputs("the old outputs applied everywhere", reviewsPolicy("3s"), rolloutClusterNames())
	return f
}

// readInputs reads every cluster's input from its directory, as an
// agent's dir source discovers it.
func (f *rolloutFleet) readInputs() {
	fleet, err := offline.ReadFleet(f.clusters, "", nil)
	if err != nil {
		f.t.Fatal(err)
	}
	f.inputs = fleet.Inputs
}

// expected translates the fleet's inputs under policy, offline.
func (f *rolloutFleet) expected(policy string) map[string]*snapshot.Snapshot {
	f.t.Helper()
	// A session of its own each time: a model starts from nothing.
	f.modelRuns++
	name := fmt.Sprintf("model-%d", f.modelRuns)
	var translators []pluginhost.Translator
	for _, tr := range f.model {
		s := tr.(pluginhost.Sessions)
		translators = append(translators, s.Session(name))
		defer s.CloseSession(name)
	}
	m := offline.NewModel(translators, nil)
	for name, in := range f.inputs {
		m.SetInput(name, in)
	}
	pols := &memPolicies{}
	pols.set(f.t, policy)
	if err := m.SetPolicies(pols.last.Resources()); err != nil {
		f.t.Fatal(err)
	}
	res := m.Translate(context.Background())
	if len(res.Failed) > 0 {
		f.t.Fatalf("offline translation failed: %v", res.Failed)
	}
	out := map[string]*snapshot.Snapshot{}
	for k, s := range res.Outputs {
		if k.Backend == "istio" {
			out[k.Cluster] = s
		}
	}
	return out
}

// output returns a cluster's stored Istio output.
func (f *rolloutFleet) output(cluster string) *snapshot.Snapshot {
	s, err := f.servers[0].store.GetOutput(context.Background(), cluster, "istio")
	if err != nil {
		return snapshot.Empty
	}
	return s
}

// applied reports whether a cluster's agent acked its stored output, on
// whichever replica it is connected to.
func (f *rolloutFleet) applied(cluster string) bool {
	out := f.output(cluster)
	for _, ts := range f.servers {
		if a, ok := ts.ackStates()[engine.OutputKey{Cluster: cluster, Backend: "istio"}]; ok && a.hash == out.Hash() {
			return true
		}
	}
	return false
}

// waitOutputs waits until each cluster holds, applied, the output the
// offline translation gives under policy.
func (f *rolloutFleet) waitOutputs(what, policy string, clusters []string) {
	f.t.Helper()
	want := f.expected(policy)
	testutil.EventuallyWhy(f.t, what, func() (bool, string) {
		for _, c := range clusters {
			if got := f.output(c); got.Hash() != want[c].Hash() || !f.applied(c) {
				return false, fmt.Sprintf("%s holds %s (applied %v), want %s", c, got.Hash().Short(), f.applied(c), want[c].Hash().Short())
			}
		}
		return true, ""
	})
}

// outputs returns every cluster's stored output.
func (f *rolloutFleet) outputs() map[string]*snapshot.Snapshot {
	out := map[string]*snapshot.Snapshot{}
	for _, c := range rolloutClusterNames() {
		out[c] = f.output(c)
	}
	return out
}

// unchanged checks that the clusters of tiers hold the very outputs of
// before: same content, same version (never delivered again).
func (f *rolloutFleet) unchanged(before map[string]*snapshot.Snapshot, tiers ...string) {
	f.t.Helper()
	for _, c := range rolloutClusterNames() {
		if !slices.Contains(tiers, tierOf(c)) {
			continue
		}
		got := f.output(c)
		if got.Hash() != before[c].Hash() || got.Version() != before[c].Version() {
			f.t.Errorf("%s's output is %s v%d, want the old one %s v%d byte for byte", c, got.Hash().Short(), got.Version(), before[c].Hash().Short(), before[c].Version())
		}
	}
}

// publish sets the management source of every replica.
func (f *rolloutFleet) publish(policy string) {
	for _, p := range f.pols {
		p.set(f.t, f.strategy, policy)
	}
}

// rolloutGauge returns the value of a rollout gauge whose one label has
// the value label.
func rolloutGauge(t *testing.T, ts *testServer, name, label string) float64 {
	t.Helper()
	mfs, err := ts.deps.Gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == name && len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == label {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// policyRollout returns what the status of the management policy name
// says of the rollout carrying it.
func (f *rolloutFleet) policyRollout(name string) string {
	f.t.Helper()
	st, err := f.servers[0].Status(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	for _, p := range st.GetPolicies() {
		if p.GetName() == name && p.GetSourceCluster() == "" {
			return p.GetRollout()
		}
	}
	f.t.Fatalf("no policy %s in the status", name)
	return ""
}

// act calls ActOnRollout on a replica's admin API.
func (f *rolloutFleet) act(ts *testServer, action relayv1.RolloutActionRequest_Action, stage string) *relayv1.RolloutStatus {
	f.t.Helper()
	st, err := relayv1.NewAdminClient(ts.dial(nil)).ActOnRollout(ts.adminCtx(), &relayv1.RolloutActionRequest{Action: action, Stage: stage})
	if err != nil {
		f.t.Fatalf("ActOnRollout(%v %q): %v", action, stage, err)
	}
	return st
}

// record reads the rollout record from the store.
func (f *rolloutFleet) record() *rollout.Record {
	f.t.Helper()
	stored, err := f.servers[len(f.servers)-1].store.GetRollout(context.Background(), rolloutRecord)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		f.t.Fatal(err)
	}
	rec, err := rollout.Decode(stored.Data)
	if err != nil {
		f.t.Fatal(err)
	}
	return rec
}

// waitRollout waits until the rollout record satisfies cond.
func (f *rolloutFleet) waitRollout(what string, cond func(*rollout.Rollout) bool) *rollout.Rollout {
	f.t.Helper()
	var ro *rollout.Rollout
	testutil.EventuallyWhy(f.t, what, func() (bool, string) {
		ro = f.record().Rollout
		if ro == nil {
			return false, "no rollout"
		}
		return cond(ro), fmt.Sprintf("%s at stage %d: %s", ro.Phase, ro.Stage, ro.Reason)
	})
	return ro
}

// waitPausedBy waits for the rollout to pause and checks that it did for
// cluster's apply errors in its backend's output, saying msg, with the
// cluster failed.
func (f *rolloutFleet) waitPausedBy(cluster, backend, msg string) *rollout.Rollout {
	f.t.Helper()
	ro := f.waitRollout("paused by "+cluster+"'s apply errors", func(ro *rollout.Rollout) bool { return ro.Phase == rollout.Paused })
	if !strings.Contains(ro.Reason, cluster+" (apply errors in output "+backend+": ") || !strings.Contains(ro.Reason, msg) {
		f.t.Errorf("paused because %q, want %s's apply errors in its %s output: %s", ro.Reason, cluster, backend, msg)
	}
	if c := ro.Clusters[cluster]; c.Phase != rollout.Failed {
		f.t.Errorf("%s is %s, want Failed", cluster, c.Phase)
	}
	return ro
}

// stageHealthy reports whether every cluster of a tier was released and
// is healthy.
func stageHealthy(ro *rollout.Rollout, tier string) bool {
	for name, c := range ro.Clusters {
		if tierOf(name) == tier && (c.Phase == rollout.Pending || (c.Phase != rollout.Succeeded && c.HealthySince.IsZero())) {
			return false
		}
	}
	return true
}

func clustersOf(tiers ...string) []string {
	var out []string
	for _, c := range rolloutClusterNames() {
		if slices.Contains(tiers, tierOf(c)) {
			out = append(out, c)
		}
	}
	return out
}

// While stage one soaks, stages two and three keep their old outputs byte
// for byte; an endpoint change in a stage-two cluster is translated under
// the old revision there, and under the new one in stage one.
func TestRolloutSoakKeepsLaterStagesOnTheOldRevision(t *testing.T) {
	f := startRolloutFleet(t, []func() store.Store{memoryStore}, strategyYAML(map[string]string{"one": "minHealthy: 1h"}))
	before := f.outputs()
	f.publish(reviewsPolicy("5s"))

	f.waitOutputs("stage one on the new revision", reviewsPolicy("5s"), clustersOf("one"))
	f.waitRollout("stage one healthy, soaking", func(ro *rollout.Rollout) bool {
		return ro.Phase == rollout.Progressing && ro.Stage == 0 && stageHealthy(ro, "one")
	})
	f.unchanged(before, "two", "three")
	if got := f.policyRollout("reviews-timeout"); !strings.HasPrefix(got, "rollout 1 Progressing at stage one: 3/9 released") {
		t.Errorf("the policy's status says %q, want the rollout carrying it at stage one", got)
	}

	// two-a's east-west gateway moves: every cluster's view of two-a's
	// endpoints changes.
	path := filepath.Join(f.clusters, "two-a", "cluster.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WriteFile(t, path, strings.Replace(string(data), "ip: 203.0.113.10", "ip: 203.0.113.99", 1))
	f.readInputs()
	f.agents["two-a"].src.ch <- f.inputs["two-a"]
	f.waitOutputs("stages two and three: the new endpoints under the old revision", reviewsPolicy("3s"), clustersOf("two", "three"))
	f.waitOutputs("stage one: the new endpoints under the new revision", reviewsPolicy("5s"), clustersOf("one"))
	if got := f.output("two-b"); got.Hash() == before["two-b"].Hash() {
		t.Errorf("two-b's output did not change with two-a's endpoints")
	}
	if ro := f.record().Rollout; ro.Phase != rollout.Progressing || ro.Stage != 0 {
		t.Errorf("rollout %s at stage %d, want still soaking stage 0", ro.Phase, ro.Stage)
	}
}

// An apply error from a stage-one cluster pauses the rollout; undo puts
// stage one back on the old outputs and changes nothing elsewhere.
func TestRolloutApplyErrorPausesAndUndoRestores(t *testing.T) {
	f := startRolloutFleet(t, []func() store.Store{memoryStore}, strategyYAML(map[string]string{"one": "minHealthy: 1h"}))
	before := f.outputs()
	f.agents["one-b"].sink.failApply("VirtualService", "reviews-timeout-reviews", "admission webhook denied the request")
	f.publish(reviewsPolicy("5s"))

	f.waitPausedBy("one-b", "istio", "admission webhook denied")
	f.unchanged(before, "two", "three")
	testutil.Eventually(t, "the metrics saying Paused with one failed cluster", func() bool {
		return rolloutGauge(t, f.servers[0], "meshrelay_rollout_phase", "Paused") == 1 &&
			rolloutGauge(t, f.servers[0], "meshrelay_rollout_clusters", "failed") == 1
	})

	if st := f.act(f.servers[0], relayv1.RolloutActionRequest_ACTION_UNDO, ""); st.GetPhase() != "Undone" || st.GetPending() != 9 {
		t.Errorf("undo answered %s with %d pending, want Undone with all 9", st.GetPhase(), st.GetPending())
	}
	testutil.EventuallyWhy(t, "stage one back on its old outputs", func() (bool, string) {
		for _, c := range clustersOf("one") {
			if got := f.output(c); got.Hash() != before[c].Hash() || !f.applied(c) {
				return false, c + " holds " + got.Hash().Short()
			}
		}
		return true, ""
	})
	f.unchanged(before, "two", "three")
	rec := f.record()
	if rec.Rollout.Phase != rollout.Undone || rec.Live != rec.Rollout.From || rec.Rejected != rec.Rollout.To {
		t.Errorf("after undo: %s, live %.12s, rejected %.12s", rec.Rollout.Phase, rec.Live, rec.Rejected)
	}
}

// A gated stage waits for approval; approve releases it and the rollout
// completes.
func TestRolloutApproveReleasesAGatedStage(t *testing.T) {
	f := startRolloutFleet(t, []func() store.Store{memoryStore}, strategyYAML(map[string]string{"three": "approval: true"}))
	before := f.outputs()
	f.publish(reviewsPolicy("5s"))

	f.waitRollout("stage three waiting for approval", func(ro *rollout.Rollout) bool {
		return ro.Stage == 2 && strings.Contains(ro.Reason, "waits for approval")
	})
	f.waitOutputs("stages one and two on the new revision", reviewsPolicy("5s"), clustersOf("one", "two"))
	f.unchanged(before, "three")

	st, err := relayv1.NewAdminClient(f.servers[0].dial(nil)).GetRollout(f.servers[0].adminCtx(), &relayv1.GetRolloutRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetStage() != 2 || st.GetReleased() != 6 || st.GetPending() != 3 || !st.GetStages()[2].GetApproval() || st.GetStages()[2].GetApproved() {
		t.Errorf("GetRollout = stage %d, %d released, %d pending, want stage 2 gated with 6 released and 3 pending", st.GetStage(), st.GetReleased(), st.GetPending())
	}
	f.act(f.servers[0], relayv1.RolloutActionRequest_ACTION_APPROVE, "three")
	f.waitRollout("the rollout completed", func(ro *rollout.Rollout) bool { return ro.Phase == rollout.Completed })
	f.waitOutputs("every cluster on the new revision", reviewsPolicy("5s"), rolloutClusterNames())
	if got := f.policyRollout("reviews-timeout"); got != "" {
		t.Errorf("the policy's status says %q after the rollout completed, want no rollout", got)
	}
	if rec := f.record(); rec.Live != rec.Rollout.To {
		t.Errorf("live revision %.12s, want the new one %.12s", rec.Live, rec.Rollout.To)
	}
}

// gatedAtStageTwo starts two replicas on one real Redis with stage two
// gated, publishes the new policy, and waits until stage one holds it and
// stage two waits for approval. It returns the fleet, the Redis, the
// outputs before the change and the rollout then.
func gatedAtStageTwo(t *testing.T) (*rolloutFleet, *testenv.Redis, map[string]*snapshot.Snapshot, *rollout.Rollout) {
	t.Helper()
	r := testenv.StartRedis(t)
	f := startRolloutFleet(t, []func() store.Store{
		func() store.Store { return redisStore(t, r, "replica-0") },
		func() store.Store { return redisStore(t, r, "replica-1") },
	},
		strategyYAML(map[string]string{"two": "approval: true"}))
	before := f.outputs()
	f.publish(reviewsPolicy("5s"))
	ro := f.waitRollout("stage two waiting for approval", func(ro *rollout.Rollout) bool {
		return ro.Stage == 1 && strings.Contains(ro.Reason, "waits for approval")
	})
	f.waitOutputs("stage one on the new revision", reviewsPolicy("5s"), clustersOf("one"))
	return f, r, before, ro
}

// A replica killed mid-rollout: the other, on the same Redis, resumes the
// same stage, neither repeating nor skipping one.
func TestRolloutReplicaKilledResumesTheSameStage(t *testing.T) {
	f, _, before, ro := gatedAtStageTwo(t)
	released := map[string]time.Time{}
	for name, c := range ro.Clusters {
		released[name] = c.Released
	}

	dead := f.servers[0]
	dead.Stop()
	dead.stop()
	f.servers = f.servers[1:]
	f.pols = f.pols[1:]
	survivor, survivorLogs := f.servers[0], f.logs[1]
	testutil.EventuallyWhy(t, "every agent on the surviving replica", func() (bool, string) {
		survivor.mu.Lock()
		n := len(survivor.streams)
		survivor.mu.Unlock()
		// Should they not come, say how often each agent connected, and
		// whether its Run returned.
		var agents []string
		for _, name := range slices.Sorted(maps.Keys(f.agents)) {
			a := f.agents[name]
			state := "running"
			select {
			case err := <-a.done:
				a.done <- err
				state = fmt.Sprintf("returned %v", err)
			default:
			}
			agents = append(agents, fmt.Sprintf("%s: %d connects, %s; last logged:\n%s", name, a.Stats.Connects.Load(), state, a.logs))
		}
		return n == len(rolloutClusterNames()), fmt.Sprintf("%d streams; the survivor last logged:\n%s\n%s", n, survivorLogs, strings.Join(agents, "\n"))
	})
	f.waitOutputs("stage one still on the new revision", reviewsPolicy("5s"), clustersOf("one"))
	f.unchanged(before, "two", "three")
	if got := f.record().Rollout; got.ID != ro.ID || got.Stage != 1 {
		t.Fatalf("after the kill: rollout %d at stage %d, want %d at stage 1", got.ID, got.Stage, ro.ID)
	}

	f.act(survivor, relayv1.RolloutActionRequest_ACTION_APPROVE, "")
	done := f.waitRollout("the rollout completed on the surviving replica", func(ro *rollout.Rollout) bool { return ro.Phase == rollout.Completed })
	f.waitOutputs("every cluster on the new revision", reviewsPolicy("5s"), rolloutClusterNames())
	for _, c := range clustersOf("one") {
		if !done.Clusters[c].Released.Equal(released[c]) {
			t.Errorf("%s released again at %s, first at %s", c, done.Clusters[c].Released, released[c])
		}
	}
	if done.ID != ro.ID {
		t.Errorf("completed rollout %d, want %d", done.ID, ro.ID)
	}
}

// Redis restarting empty mid-rollout loses the rollout record and the
// revisions: the replicas write back the last copy they read, so the
// rollout goes on at the same stage, instead of the source's revision
// going live everywhere at once.
func TestRolloutSurvivesRedisRestartingEmpty(t *testing.T) {
	f, r, before, ro := gatedAtStageTwo(t)

	r.Stop()
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	got := f.waitRollout("the rollout record written back", func(got *rollout.Rollout) bool { return got.ID == ro.ID })
	if got.Phase != rollout.Progressing || got.Stage != 1 {
		t.Fatalf("after Redis restarted empty: rollout %d %s at stage %d, want %d Progressing at stage 1", got.ID, got.Phase, got.Stage, ro.ID)
	}
	testutil.EventuallyWhy(t, "both revisions kept again", func() (bool, string) {
		for _, h := range []string{ro.From, ro.To} {
			if _, err := f.servers[1].store.GetRollout(context.Background(), revisionRecord(h)); err != nil {
				return false, err.Error()
			}
		}
		return true, ""
	})
	f.waitOutputs("stage one still on the new revision", reviewsPolicy("5s"), clustersOf("one"))
	f.unchanged(before, "two", "three")

	f.act(f.servers[1], relayv1.RolloutActionRequest_ACTION_APPROVE, "")
	f.waitRollout("the rollout completed", func(ro *rollout.Rollout) bool { return ro.Phase == rollout.Completed })
	f.waitOutputs("every cluster on the new revision", reviewsPolicy("5s"), rolloutClusterNames())
}

// rolloutsWithLastCopy returns a replica's rollouts on a memory store
// that holds no record, whose last copy makes the empty policy set, of
// hash h, live after 7 writes.
func rolloutsWithLastCopy() (r *rollouts, st *memory.Store, h string) {
	st = memory.New()
	r = newRollouts(&Server{deps: Deps{Store: st}, log: slog.New(slog.DiscardHandler)})
	h = snapshot.Empty.Hash().String()
	r.revisions[h] = snapshot.Empty
	r.last = &rollout.Record{Live: h, Writes: 7}
	return r, st, h
}

// A read that finds no record (the admin API's GetRollout, between a
// Redis restart and the write-back) keeps the replica's last copy, and
// the next update writes that copy back, with the revision it names,
// instead of starting from an empty record.
func TestRolloutReadKeepsTheLastCopyForTheWriteBack(t *testing.T) {
	r, st, h := rolloutsWithLastCopy()
	ctx := context.Background()

	if rec, err := r.read(ctx); err != nil || !rec.Empty() {
		t.Fatalf("read() of a store without a record = %+v, %v; want an empty record", rec, err)
	}
	if last := r.lastRecord(); last.Live != h {
		t.Fatalf("after a read found no record, the last copy is %+v, want live %.12s", last, h)
	}
	rec, err := r.update(ctx, func(*rollout.Record) (bool, error) { return false, nil })
	if err != nil {
		t.Fatal(err)
	}
	if rec.Live != h || rec.Writes != 7 {
		t.Errorf("update() after the record was lost = %+v, want the last copy (live %.12s, 7 writes)", rec, h)
	}
	if stored, err := st.GetRollout(ctx, rolloutRecord); err != nil || stored.Version != 1 {
		t.Errorf("the store after the write-back: %+v, %v; want the record at version 1", stored, err)
	}
	if _, err := st.GetRollout(ctx, revisionRecord(h)); err != nil {
		t.Errorf("the live revision was not kept again: %v", err)
	}
}

// An older copy of the record written back by another replica (one that
// had not read the last writes when Redis lost the record) does not take
// this replica back: a read leaves its last copy, and its next update
// writes that copy over the older one and steps from it.
func TestRolloutOlderWriteBackGivesWay(t *testing.T) {
	r, st, h := rolloutsWithLastCopy()
	ctx := context.Background()
	older := &rollout.Record{Live: "older", Writes: 5}
	if _, err := st.CompareAndPutRollout(ctx, store.RolloutRecord{Name: rolloutRecord, Data: older.Encode()}); err != nil {
		t.Fatal(err)
	}

	if rec, err := r.read(ctx); err != nil || rec.Writes != 5 {
		t.Fatalf("read() = %+v, %v; want the stored copy of 5 writes", rec, err)
	}
	if last := r.lastRecord(); last.Writes != 7 {
		t.Fatalf("after reading an older copy, the last copy has %d writes, want 7", last.Writes)
	}
	rec, err := r.update(ctx, func(*rollout.Record) (bool, error) { return false, nil })
	if err != nil {
		t.Fatal(err)
	}
	if rec.Live != h || rec.Writes != 7 {
		t.Errorf("update() over an older copy = %+v, want the last copy (live %.12s, 7 writes)", rec, h)
	}
	stored, err := st.GetRollout(ctx, rolloutRecord)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := rollout.Decode(stored.Data); err != nil || got.Writes != 7 || stored.Version != 2 {
		t.Errorf("the store after the write-back: version %d, %+v, %v; want version 2 with 7 writes", stored.Version, got, err)
	}
}

// olderWriteBackFirst is a memory store on which another replica writes
// back an older copy of the rollout record just before this replica's
// first compare-and-set, which then conflicts.
type olderWriteBackFirst struct {
	*memory.Store
	older []byte
	done  bool
}

func (s *olderWriteBackFirst) CompareAndPutRollout(ctx context.Context, r store.RolloutRecord) (store.RolloutRecord, error) {
	if !s.done && r.Name == rolloutRecord {
		s.done = true
		cur, _ := s.Store.GetRollout(ctx, rolloutRecord)
		if _, err := s.Store.CompareAndPutRollout(ctx, store.RolloutRecord{Name: rolloutRecord, Data: s.older, Version: cur.Version}); err != nil {
			return store.RolloutRecord{}, err
		}
	}
	return s.Store.CompareAndPutRollout(ctx, r)
}

// A step that loses its compare-and-set to another replica's write-back
// of an older copy keeps this replica's last copy instead of taking the
// older one.
func TestRolloutStepLosingToAnOlderWriteBackKeepsItsCopy(t *testing.T) {
	r, st, h := rolloutsWithLastCopy()
	ctx := context.Background()
	if _, err := st.CompareAndPutRollout(ctx, store.RolloutRecord{Name: rolloutRecord, Data: r.last.Encode()}); err != nil {
		t.Fatal(err)
	}
	r.s.deps.Store = &olderWriteBackFirst{Store: st, older: (&rollout.Record{Live: "older", Writes: 5}).Encode()}
	rec, err := r.update(ctx, func(rec *rollout.Record) (bool, error) { return true, nil })
	if err != nil {
		t.Fatal(err)
	}
	if rec.Live != h || rec.Writes != 7 {
		t.Errorf("update() that lost to an older write-back = %+v, want the last copy (live %.12s, 7 writes)", rec, h)
	}
	if last := r.lastRecord(); last.Writes != 7 {
		t.Errorf("the last copy has %d writes after the lost step, want 7", last.Writes)
	}
}

// A workload cluster's RolloutStrategy is refused with a diagnostic on
// it; the management source's is not.
func TestFoldRefusesAWorkloadClustersRolloutStrategy(t *testing.T) {
	body := `{"apiVersion":"policy.meshrelay.io/v1alpha1","kind":"RolloutStrategy","metadata":{"name":"fleet","namespace":"meshrelay"},"spec":{"stages":[{"clusters":["east"]}]}}`
	r, err := snapshot.NewResource(snapshot.ID{Group: policyv1alpha1.GroupName, Version: "v1alpha1", Kind: policyv1alpha1.KindRolloutStrategy, Namespace: "meshrelay", Name: "fleet"}, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	in := &statusInputs{}
	if ps := in.fold(policySource{res: r}); len(ps.errors) > 0 || ps.state != policyv1alpha1.StateAccepted {
		t.Errorf("management RolloutStrategy: %s %v, want Accepted without errors", ps.state, ps.errors)
	}
	ps := in.fold(policySource{cluster: "east", res: r})
	if ps.state != policyv1alpha1.StateInvalid || len(ps.status.Diagnostics) != 1 || !strings.Contains(ps.errors[0], "management source only") {
		t.Errorf("workload cluster's RolloutStrategy: %s %v %v, want Invalid with a diagnostic", ps.state, ps.errors, ps.status.Diagnostics)
	}
}

// The store keeps only the revisions the record names: a change applied
// at once forgets the revision it replaced, a rollout keeps its previous
// one (the undo) until the next change.
func TestSupersededRevisions(t *testing.T) {
	tests := map[string]struct {
		before, after *rollout.Record
		want          []string
	}{
		"applied at once":  {before: &rollout.Record{Live: "a"}, after: &rollout.Record{Live: "b"}, want: []string{"a"}},
		"rollout started":  {before: &rollout.Record{Live: "a"}, after: &rollout.Record{Live: "a", Rollout: &rollout.Rollout{From: "a", To: "b"}}},
		"rollout complete": {before: &rollout.Record{Live: "a", Rollout: &rollout.Rollout{From: "a", To: "b"}}, after: &rollout.Record{Live: "b", Rollout: &rollout.Rollout{From: "a", To: "b"}}},
		"next after undo": {
			before: &rollout.Record{Live: "a", Rejected: "b", Rollout: &rollout.Rollout{From: "a", To: "b"}},
			after:  &rollout.Record{Live: "a", Rollout: &rollout.Rollout{From: "a", To: "c"}},
			want:   []string{"b"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := supersededRevisions(tc.before, tc.after); !slices.Equal(got, tc.want) {
				t.Errorf("supersededRevisions = %v, want %v", got, tc.want)
			}
		})
	}
}

// In safe mode a rollout holds: a change does not start one, and one in
// progress releases nothing, until safe mode ends.
func TestRolloutHoldsInSafeMode(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	for _, name := range []string{"east", "west"} {
		if err := st.PutCluster(ctx, store.Cluster{Name: name, Registered: time.Now(), Labels: map[string]string{"tier": "one"}}); err != nil {
			t.Fatal(err)
		}
	}
	pols := &memPolicies{}
	ts := startServerDeps(t, st, "", withPolicies(pols), func(o *Options) { o.RolloutInterval = time.Hour })
	if !ts.inSafeMode() {
		t.Fatal("a server with registered clusters and no inputs is not in safe mode")
	}
	strategy := strategyYAML(map[string]string{"one": "maxConcurrent: 1"})
	step := func() *rollout.Record {
		t.Helper()
		if err := ts.rollouts.step(ctx, time.Now()); err != nil {
			t.Fatal(err)
		}
		return ts.rollouts.lastRecord()
	}
	// set publishes the policies and waits for the rollout to hold them.
	set := func(timeout string) {
		t.Helper()
		pols.set(t, strategy, reviewsPolicy(timeout))
		testutil.Eventually(t, "the rollout holding the source's "+timeout, func() bool {
			ts.rollouts.mu.Lock()
			defer ts.rollouts.mu.Unlock()
			if ts.rollouts.source == nil {
				return false
			}
			for r := range ts.rollouts.source.All() {
				return strings.Contains(string(r.Body), timeout)
			}
			return false
		})
	}
	set("3s")
	if rec := step(); rec.Live == "" || rec.Rollout != nil {
		t.Fatalf("the first policy set: live %q, rollout %v; want live at once", rec.Live, rec.Rollout)
	}
	set("5s")
	if rec := step(); rec.Rollout != nil {
		t.Fatalf("a rollout started in safe mode: %+v", rec.Rollout)
	}

	ts.markFresh("east")
	ts.markFresh("west")
	rec := step()
	if rec.Active() == nil || rec.Rollout.Counts().Released != 1 {
		t.Fatalf("after safe mode: %+v, want a rollout releasing one cluster", rec.Rollout)
	}
	// Back in safe mode (as after a restart), the rollout releases no more.
	ts.mu.Lock()
	ts.safe.on = true
	ts.mu.Unlock()
	if _, err := ts.rollouts.act(ctx, func(rec *rollout.Record, now time.Time) error {
		for _, c := range rec.Rollout.Clusters {
			if c.Phase != rollout.Pending {
				c.Phase = rollout.Succeeded // as if healthy for its soak
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if rec := step(); rec.Rollout.Counts().Released != 1 {
		t.Errorf("in safe mode the rollout released %d clusters, want still 1", rec.Rollout.Counts().Released)
	}
}

// edgeProxy plays the Envoy of node "edge" on an agent's xDS server: it
// asks for the route configuration outbound|9080, acks what it is sent,
// and rejects (NACKs) a route whose timeout is reject, as Envoy rejects a
// configuration it cannot take.
type edgeProxy struct {
	mu   sync.Mutex
	seen []time.Duration // the longest route timeout of each response
}

func startEdgeProxy(t *testing.T, addr string, reject time.Duration) *edgeProxy {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	p := &edgeProxy{}
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-done
	})
	const routeType = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	req := &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "edge"}, TypeUrl: routeType, ResourceNames: []string{"outbound|9080"}}
	go func() {
		defer close(done)
		for {
			if err := stream.Send(req); err != nil {
				return
			}
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			var longest time.Duration
			for _, a := range resp.GetResources() {
				var rc routev3.RouteConfiguration
				if err := a.UnmarshalTo(&rc); err != nil {
					panic(fmt.Sprintf("edge proxy: decode route configuration: %v", err))
				}
				for _, vh := range rc.GetVirtualHosts() {
					for _, r := range vh.GetRoutes() {
						longest = max(longest, r.GetRoute().GetTimeout().AsDuration())
					}
				}
			}
			p.mu.Lock()
			p.seen = append(p.seen, longest)
			p.mu.Unlock()
			req = &discoveryv3.DiscoveryRequest{TypeUrl: routeType, ResourceNames: []string{"outbound|9080"}, ResponseNonce: resp.GetNonce(), VersionInfo: resp.GetVersionInfo()}
			if longest == reject {
				req.VersionInfo = "" // what the proxy still holds: not this
				req.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: fmt.Sprintf("route timeout %s refused by the proxy", longest)}
			}
		}
	}()
	return p
}

// waitSeen waits until the proxy was sent routes with these timeouts, in
// this order (other responses may come between).
func (p *edgeProxy) waitSeen(t *testing.T, what string, want ...time.Duration) {
	t.Helper()
	testutil.EventuallyWhy(t, what, func() (bool, string) {
		p.mu.Lock()
		defer p.mu.Unlock()
		i := 0
		for _, d := range p.seen {
			if i < len(want) && d == want[i] {
				i++
			}
		}
		return i == len(want), fmt.Sprintf("the proxy was sent routes with timeouts %v", p.seen)
	})
}

// An xDS NACK from a stage-one cluster's Envoy pauses the rollout: the
// proxy rejects the new revision's route, the agent's xDS server reports
// it as an apply error of the Envoy output, and the cluster fails. Undo
// sends the proxy its old route again; later stages never see a change.
func TestRolloutXDSNackPausesAndUndoRestores(t *testing.T) {
	f := startRolloutFleet(t, []func() store.Store{memoryStore}, strategyYAML(map[string]string{"one": "minHealthy: 1h"}),
		func(s *fleetSetup) { s.envoy = "one-a" })
	proxy := startEdgeProxy(t, f.xds.addr, 5*time.Second)
	proxy.waitSeen(t, "the edge proxy holding the old route", 3*time.Second)
	before := f.outputs()
	f.publish(reviewsPolicy("5s"))

	ro := f.waitPausedBy("one-a", "envoy", "route timeout 5s refused by the proxy")
	if got := ro.Counts().Released; got != 3 {
		t.Errorf("%d clusters released, want stage one's 3 only", got)
	}
	f.unchanged(before, "two", "three")

	f.act(f.servers[0], relayv1.RolloutActionRequest_ACTION_UNDO, "")
	proxy.waitSeen(t, "the edge proxy sent its old route again", 3*time.Second, 5*time.Second, 3*time.Second)
	f.waitOutputs("stage one back on the old revision", reviewsPolicy("3s"), clustersOf("one"))
	f.unchanged(before, "two", "three")
}

// A released cluster whose agent goes away mid-stage is not healthy until
// it is back: its soak starts again, and the rollout neither fails it nor
// moves on.
func TestRolloutClusterAwayMidStage(t *testing.T) {
	f := startRolloutFleet(t, []func() store.Store{memoryStore}, strategyYAML(map[string]string{"one": "minHealthy: 1h"}),
		func(s *fleetSetup) { s.proxied = []string{"one-a"} })
	f.publish(reviewsPolicy("5s"))
	ro := f.waitRollout("stage one healthy, soaking", func(ro *rollout.Rollout) bool {
		return ro.Phase == rollout.Progressing && ro.Stage == 0 && stageHealthy(ro, "one")
	})
	first := ro.Clusters["one-a"].HealthySince

	f.proxies["one-a"].Cut()
	ro = f.waitRollout("one-a not healthy while its agent is away", func(ro *rollout.Rollout) bool {
		c := ro.Clusters["one-a"]
		return c.HealthySince.IsZero() && c.Reason == "agent not connected"
	})
	if c := ro.Clusters["one-a"]; ro.Phase != rollout.Progressing || ro.Stage != 0 || c.Phase != rollout.Releasing {
		t.Errorf("with one-a away: rollout %s at stage %d, one-a %s; want Progressing at stage 0, one-a Releasing", ro.Phase, ro.Stage, c.Phase)
	}

	f.proxies["one-a"].Restore()
	ro = f.waitRollout("one-a healthy again once back", func(ro *rollout.Rollout) bool {
		return !ro.Clusters["one-a"].HealthySince.IsZero()
	})
	if since := ro.Clusters["one-a"].HealthySince; !since.After(first) {
		t.Errorf("one-a healthy since %s, want its soak started again after %s", since, first)
	}
	if ro.Phase != rollout.Progressing || ro.Stage != 0 {
		t.Errorf("rollout %s at stage %d, want still soaking stage 0", ro.Phase, ro.Stage)
	}
}

// A stage whose cluster never becomes healthy pauses the rollout at its
// progress deadline; once the cluster is back, resume completes it.
func TestRolloutPastItsDeadlinePauses(t *testing.T) {
	f := startRolloutFleet(t, []func() store.Store{memoryStore}, strategyYAML(map[string]string{"one": "progressDeadline: 2s"}),
		func(s *fleetSetup) { s.proxied = []string{"one-a"} })
	f.proxies["one-a"].Cut()
	before := f.outputs()
	f.publish(reviewsPolicy("5s"))

	ro := f.waitRollout("paused at stage one's deadline", func(ro *rollout.Rollout) bool { return ro.Phase == rollout.Paused })
	if want := "stage one did not become healthy within its progress deadline of 2s"; ro.Reason != want {
		t.Errorf("paused because %q, want %q", ro.Reason, want)
	}
	if c := ro.Clusters["one-a"]; c.Phase != rollout.Releasing || c.Reason != "agent not connected" {
		t.Errorf("one-a is %s (%s), want Releasing with its agent away", c.Phase, c.Reason)
	}
	f.unchanged(before, "two", "three")

	f.proxies["one-a"].Restore()
	f.act(f.servers[0], relayv1.RolloutActionRequest_ACTION_RESUME, "")
	f.waitRollout("the rollout completed", func(ro *rollout.Rollout) bool { return ro.Phase == rollout.Completed })
	f.waitOutputs("every cluster on the new revision", reviewsPolicy("5s"), rolloutClusterNames())
}

// A completed rollout can be undone while its revision is live: every
// cluster goes back at once, and the revision does not start again while
// the source still holds it.
func TestRolloutUndoAfterCompletion(t *testing.T) {
	f := startRolloutFleet(t, []func() store.Store{memoryStore}, strategyYAML(nil))
	before := f.outputs()
	f.publish(reviewsPolicy("5s"))
	done := f.waitRollout("the rollout completed", func(ro *rollout.Rollout) bool { return ro.Phase == rollout.Completed })
	f.waitOutputs("every cluster on the new revision", reviewsPolicy("5s"), rolloutClusterNames())

	st := f.act(f.servers[0], relayv1.RolloutActionRequest_ACTION_UNDO, "")
	if st.GetPhase() != "Undone" || st.GetId() != done.ID {
		t.Errorf("undo answered rollout %d %s, want %d Undone", st.GetId(), st.GetPhase(), done.ID)
	}
	f.waitOutputs("every cluster back on the old revision", reviewsPolicy("3s"), rolloutClusterNames())
	for _, c := range rolloutClusterNames() {
		if got := f.output(c); got.Hash() != before[c].Hash() {
			t.Errorf("%s holds %s after undo, want its old output %s", c, got.Hash().Short(), before[c].Hash().Short())
		}
	}
	if err := f.servers[0].rollouts.step(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	if rec := f.record(); rec.Rollout.ID != done.ID || rec.Rollout.Phase != rollout.Undone || rec.Live != done.From || rec.Rejected != done.To {
		t.Errorf("after undo and a step: rollout %d %s, live %.12s, rejected %.12s; want %d Undone on %.12s", rec.Rollout.ID, rec.Rollout.Phase, rec.Live, rec.Rejected, done.ID, done.From)
	}
	_, err := relayv1.NewAdminClient(f.servers[0].dial(nil)).ActOnRollout(f.servers[0].adminCtx(), &relayv1.RolloutActionRequest{Action: relayv1.RolloutActionRequest_ACTION_UNDO})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "nothing to undo") {
		t.Errorf("a second undo: %v, want FailedPrecondition: nothing to undo", err)
	}
}

// conflictOnce is a store whose next rollout compare-and-set first lets
// another replica's write land (race), as when two replicas step at once.
type conflictOnce struct {
	store.Store
	race func()
}

func (c *conflictOnce) CompareAndPutRollout(ctx context.Context, rec store.RolloutRecord) (store.RolloutRecord, error) {
	if race := c.race; race != nil {
		c.race = nil
		race()
	}
	return c.Store.CompareAndPutRollout(ctx, rec)
}

// TestRolloutWithoutStrategyAppliesTheLocalSource: without a strategy, a
// replica whose policy watch lags writes its older source as the record's
// live revision. A replica holding the newer source that loses the
// compare-and-set to that write still translates its own source: applying
// the record's would take its clusters back to the older policies.
func TestRolloutWithoutStrategyAppliesTheLocalSource(t *testing.T) {
	ctx := context.Background()
	st := &conflictOnce{Store: memory.New()}
	pols := &memPolicies{}
	ts := startServerDeps(t, st, "", withPolicies(pols), func(o *Options) { o.RolloutInterval = time.Hour })
	r := ts.rollouts
	// live publishes the policies and waits for the rollout loop's step
	// (each new source kicks one) to make them live.
	live := func(timeout string) *snapshot.Snapshot {
		t.Helper()
		pols.set(t, reviewsPolicy(timeout))
		var src *snapshot.Snapshot
		testutil.Eventually(t, "the source's "+timeout+" live", func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.source == nil {
				return false
			}
			for res := range r.source.All() {
				src = r.source
				return strings.Contains(string(res.Body), timeout) && r.applied == src.Hash().String()+"|"
			}
			return false
		})
		return src
	}
	olderSrc := live("3s")
	older, newer := olderSrc.Hash().String(), live("5s").Hash().String()
	// lag writes the record as a replica whose policy watch lags does:
	// its older source kept as a revision, and live.
	lag := func() {
		if err := r.keepRevision(ctx, olderSrc); err != nil {
			t.Error(err)
			return
		}
		stored, err := st.Store.GetRollout(ctx, rolloutRecord)
		if err != nil {
			t.Error(err)
			return
		}
		rec, err := rollout.Decode(stored.Data)
		if err != nil {
			t.Error(err)
			return
		}
		rec.Live, rec.Writes = older, rec.Writes+1
		stored.Data = rec.Encode()
		if _, err := st.Store.CompareAndPutRollout(ctx, stored); err != nil {
			t.Error(err)
		}
	}
	lag()
	// It writes again between this replica's read of the record and its
	// write, which loses the compare-and-set.
	st.race = lag
	if err := r.step(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if st.race != nil {
		t.Fatal("the step wrote no record; the lagging replica's write never raced it")
	}
	if rec := r.lastRecord(); rec.Live != older {
		t.Fatalf("the record after the lost compare-and-set: live %.12s, want the lagging replica's %.12s", rec.Live, older)
	}
	r.mu.Lock()
	applied := r.applied
	r.mu.Unlock()
	if want := newer + "|"; applied != want {
		t.Errorf("the engine translates revisions %q, want this replica's source %q", applied, want)
	}
}

// listCounting is a store that counts registry listings.
type listCounting struct {
	store.Store
	lists atomic.Int64
}

func (l *listCounting) ListClusters(ctx context.Context) ([]store.Cluster, error) {
	l.lists.Add(1)
	return l.Store.ListClusters(ctx)
}

// TestIdleRolloutStepListsNoClusters: with no rollout running and none to
// start, a step reads the record and nothing else; the registry is listed
// (every cluster with its labels) only when a rollout runs or starts.
func TestIdleRolloutStepListsNoClusters(t *testing.T) {
	ctx := context.Background()
	st := &listCounting{Store: memory.New()}
	pols := &memPolicies{}
	ts := startServerDeps(t, st, "", withPolicies(pols), func(o *Options) { o.RolloutInterval = time.Hour })
	pols.set(t, reviewsPolicy("3s"))
	testutil.Eventually(t, "the rollout holding the source", func() bool {
		ts.rollouts.mu.Lock()
		defer ts.rollouts.mu.Unlock()
		return ts.rollouts.source != nil
	})
	if err := ts.rollouts.step(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	before := st.lists.Load()
	for range 5 {
		if err := ts.rollouts.step(ctx, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if n := st.lists.Load() - before; n != 0 {
		t.Errorf("5 idle rollout steps listed the registry %d times, want none", n)
	}
}
