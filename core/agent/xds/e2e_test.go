package xds_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
	xdsapi "github.com/meshrelay/meshrelay/api/xds"
	"github.com/meshrelay/meshrelay/core/agent"
	"github.com/meshrelay/meshrelay/core/agent/sink"
	"github.com/meshrelay/meshrelay/core/agent/xds"
	"github.com/meshrelay/meshrelay/internal/testutil"
	"github.com/meshrelay/meshrelay/plugins/envoy"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
)

// TestEndToEnd drives real grpc-go xDS clients and servers through the
// whole chain: a fleet fixture, the envoy translator, Apply on two agents'
// xDS servers (clusters east and west), and gRPC processes that resolve
// xds:/// targets and serve with xDS-configured RBAC.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs gRPC subprocesses")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	helper := buildHelper(t, dir)
	pki := newTestPKI(t, dir)

	var nackMu sync.Mutex
	var nacks []string
	reports := map[string]map[snapshot.ID]bool{} // what west reported, by backend
	agents := map[string]*xds.Server{}
	addrs := map[string]string{}
	for _, c := range []string{"east", "west"} {
		srv := xds.New(xds.Options{OnNack: func(node, typeURL string, names []string, err error) {
			nackMu.Lock()
			defer nackMu.Unlock()
			nacks = append(nacks, fmt.Sprintf("%s %s %v", node, typeURL, names))
		}, Report: func(backend string, rejected map[snapshot.ID]error) {
			nackMu.Lock()
			defer nackMu.Unlock()
			if c != "west" {
				return
			}
			if reports[backend] == nil {
				reports[backend] = map[snapshot.ID]bool{}
			}
			for id := range rejected {
				reports[backend][id] = true
			}
		}})
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ctx, lis) }()
		t.Cleanup(func() {
			cancel()
			if err := <-served; err != nil {
				t.Errorf("Serve() = %v", err)
			}
		})
		agents[c], addrs[c] = srv, lis.Addr().String()
	}

	// Servers: reviews and ratings in each cluster, in node group "backend".
	servers := map[string]string{}
	// East also runs details in two versions, v1 and v2, for subsets.
	for _, c := range []string{"east", "west"} {
		names := []string{"reviews-" + c, "ratings-" + c}
		if c == "east" {
			names = append(names, "details-v1", "details-v2")
		}
		p := startHelper(ctx, t, helper, bootstrap(t, dir, addrs[c], "backend"),
			append([]string{"serve", "-cert", pki.server, "-key", pki.serverKey, "-ca", pki.ca}, names...)...)
		for range names {
			var line struct{ Name, Addr string }
			p.read(t, &line, 30*time.Second)
			servers[line.Name] = line.Addr
		}
	}

	fleet := func(ratingsEast bool) *sdktest.Fixture {
		return &sdktest.Fixture{
			Clusters: []sdktest.Cluster{
				{Name: "east", Meshes: []string{"envoy"}, Objects: clusterObjects(t, "east", servers, []string{"backend"}, ratingsEast)},
				{Name: "west", Meshes: []string{"envoy"}, Objects: clusterObjects(t, "west", servers, []string{"backend", "frontend"}, true)},
			},
			Policies: objects(t, e2ePolicies),
		}
	}
	apply := func(f *sdktest.Fixture, extra ...snapshot.Resource) {
		t.Helper()
		res := sdktest.RunFixture(t, envoy.New(), f)
		for _, d := range res.Diagnostics {
			t.Errorf("diagnostic: %+v", d)
		}
		for c, srv := range agents {
			var rs []snapshot.Resource
			for _, o := range res.Outputs {
				if o.Cluster != c {
					continue
				}
				r, err := snapshot.FromJSON(o.Body)
				if err != nil {
					t.Fatal(err)
				}
				rs = append(rs, r)
			}
			if c == "west" {
				rs = append(rs, extra...)
			}
			snap, err := snapshot.New(1, rs)
			if err != nil {
				t.Fatal(err)
			}
			errs, err := srv.Apply(ctx, envoy.Backend, snap, true)
			if err != nil || len(errs) > 0 {
				t.Fatalf("Apply(%s) = %v, %v", c, errs, err)
			}
		}
	}
	apply(fleet(true))

	client := startHelper(ctx, t, helper, bootstrap(t, dir, addrs["west"], "frontend"), "client",
		"-cert", pki.client, "-key", pki.clientKey, "-ca", pki.ca)

	t.Run("weighted split", func(t *testing.T) {
		client.await(ctx, t, "xds:///reviews.global /shop.Reviews/Get 1", func(r callResult) bool { return r.Codes["OK"] == 1 })
		const n = 400
		r := client.call(t, fmt.Sprintf("xds:///reviews.global /shop.Reviews/Get %d wait", n))
		if r.Codes["OK"] != n {
			t.Fatalf("calls = %v (last error %s), want %d OK", r.Codes, r.Last, n)
		}
		t.Logf("served: %v", r.Served)
		// 70% to east: mean 280, standard deviation about 9.2; allow over 5.
		if east := r.Served["reviews-east"]; east < 233 || east > 327 || east+r.Served["reviews-west"] != n {
			t.Errorf("served = %v, want about 70%% by reviews-east and the rest by reviews-west", r.Served)
		}
	})

	t.Run("weighted split between subsets", func(t *testing.T) {
		client.await(ctx, t, "xds:///details.shop.svc.cluster.local /shop.Details/Get 1", func(r callResult) bool { return r.Codes["OK"] == 1 })
		const n = 400
		r := client.call(t, fmt.Sprintf("xds:///details.shop.svc.cluster.local /shop.Details/Get %d wait", n))
		if r.Codes["OK"] != n {
			t.Fatalf("calls = %v (last error %s), want %d OK", r.Codes, r.Last, n)
		}
		t.Logf("served: %v", r.Served)
		// 80% to subset v1: mean 320, standard deviation 8; allow 5.
		if v1 := r.Served["details-v1"]; v1 < 280 || v1 > 360 || v1+r.Served["details-v2"] != n {
			t.Errorf("served = %v, want about 80%% by details-v1 and the rest by details-v2", r.Served)
		}
	})

	t.Run("rbac", func(t *testing.T) {
		r := client.call(t, "xds:///reviews.global /shop.Admin/Drop 10 wait")
		if r.Codes["PermissionDenied"] != 10 {
			t.Errorf("calls of a path the AccessPolicy does not allow = %v (last error %s), want 10 PermissionDenied", r.Codes, r.Last)
		}
		r = client.call(t, "xds:///reviews.global /shop.Reviews/List 10 wait")
		if r.Codes["OK"] != 10 {
			t.Errorf("calls of an allowed path = %v (last error %s), want 10 OK", r.Codes, r.Last)
		}
	})

	t.Run("failover", func(t *testing.T) {
		client.await(ctx, t, "xds:///ratings.global /shop.Ratings/Get 1", func(r callResult) bool { return r.Codes["OK"] == 1 })
		r := client.call(t, "xds:///ratings.global /shop.Ratings/Get 20")
		if r.Served["ratings-east"] != 20 {
			t.Fatalf("served = %v (codes %v), want all by ratings-east, first in the failover order", r.Served, r.Codes)
		}
		// ratings' endpoints in east go away: traffic moves to west.
		apply(fleet(false))
		client.await(ctx, t, "xds:///ratings.global /shop.Ratings/Get 20", func(r callResult) bool { return r.Served["ratings-west"] == 20 })
	})

	t.Run("golden fixtures accepted", func(t *testing.T) {
		// grpc-go must accept every outbound resource the golden fixtures
		// produce (routes with regexes, retries, faults, mirrors, locality
		// priorities): serve them to a third client and watch for NACKs.
		agent := xds.New(xds.Options{OnNack: func(node, typeURL string, names []string, err error) {
			t.Errorf("grpc-go rejected %s %v for %s: %v", typeURL, names, node, err)
		}})
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = agent.Serve(ctx, lis) }()
		c := startHelper(ctx, t, helper, bootstrap(t, dir, lis.Addr().String(), "frontend"), "client",
			"-cert", pki.client, "-key", pki.clientKey, "-ca", pki.ca)
		for fixture, targets := range map[string][]string{
			"traffic":            {"xds:///reviews.shop.svc.cluster.local", "xds:///reviews.shop.svc.cluster.local:9080"},
			"virtualdestination": {"xds:///reviews.global", "xds:///ratings.global:80"},
			// A cluster with an Envoy node group too: the gRPC group's
			// api_listeners are unchanged by it. (Targets no other fixture
			// calls: a client would see a name it watches removed.)
			"envoyproxy": {"xds:///ratings.shop.svc.cluster.local", "xds:///ratings.shop.svc.cluster.local:9090"},
			// Weighted clusters of subsets.
			"subsets": {"xds:///details.shop.svc.cluster.local"},
		} {
			snap := fixtureSnapshot(t, "../../../plugins/envoy/testdata/"+fixture+".yaml", "east")
			if errs, err := agent.Apply(ctx, envoy.Backend, snap, true); err != nil || len(errs) > 0 {
				t.Fatalf("Apply(%s) = %v, %v", fixture, errs, err)
			}
			for _, target := range targets {
				// The endpoints do not exist: the call fails once the
				// client has taken in (or rejected) the whole chain.
				r := c.call(t, target+" /shop.Reviews/Get 1")
				t.Logf("%s: %v %s", target, r.Codes, r.Last)
				if r.Codes["OK"] != 0 {
					t.Errorf("%s: %+v", target, r)
				}
				if strings.Contains(r.Last, "resource error") || strings.Contains(r.Last, "validation") {
					t.Errorf("%s: %s", target, r.Last)
				}
			}
		}
	})

	t.Run("nack", func(t *testing.T) {
		// grpc-go has no client-side RBAC filter: it must reject this Listener.
		bad := badListener(t, "frontend", "nack.test")
		apply(fleet(false), bad...)
		client.send(t, "xds:///nack.test /shop.Reviews/Get 1")
		want := fmt.Sprintf("frontend %s [nack.test]", xdsapi.ListenerType)
		testutil.EventuallyWhy(t, "the NACK "+want, func() (bool, string) {
			nackMu.Lock()
			got := append([]string(nil), nacks...)
			nackMu.Unlock()
			return slices.Contains(got, want), fmt.Sprintf("NACKs = %q", got)
		})
		var r callResult
		client.read(t, &r, 30*time.Second)
	})

	t.Run("another backend", func(t *testing.T) {
		// A user's plugin, backend acme, emits xDS for the same node,
		// and a ConfigMap: the agent's sinks route the xDS resources to
		// the xDS server and everything to the directory.
		files := t.TempDir()
		sinks := agent.Sinks{agents["west"], sink.NewDir(files)}
		cm, err := snapshot.FromJSON([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"acme","namespace":"shop"}}`))
		if err != nil {
			t.Fatal(err)
		}
		service := hostService(t, "frontend", "acme.test", "acme|reviews", "acme|reviews", servers["reviews-west"])
		out := snapshotOf(t, 1, service, []snapshot.Resource{cm})
		if errs, err := sinks.Apply(ctx, "acme", out, true); err != nil || len(errs) > 0 {
			t.Fatalf("Apply(acme) = %v, %v", errs, err)
		}
		client.await(ctx, t, "xds:///acme.test /shop.Reviews/Get 1", func(r callResult) bool { return r.Codes["OK"] == 1 })
		if r := client.call(t, "xds:///acme.test /shop.Reviews/Get 10 wait"); r.Served["reviews-west"] != 10 {
			t.Errorf("calls of acme.test = %+v, want 10 served by reviews-west", r)
		}
		if r := client.call(t, "xds:///reviews.global /shop.Reviews/Get 10 wait"); r.Codes["OK"] != 10 {
			t.Errorf("calls of envoy's reviews.global after acme applied = %+v, want 10 OK", r)
		}
		written, err := filepath.Glob(filepath.Join(files, "acme", "*.yaml"))
		if err != nil || len(written) != out.Len() {
			t.Errorf("acme's files = %v, want one for each of its %d resources", written, out.Len())
		}

		// acme's Listener rejected: the NACK is acme's, with its ID.
		bad := badListener(t, "frontend", "nack-acme.test")
		withBad := snapshotOf(t, 2, service, bad)
		if _, err := sinks.Apply(ctx, "acme", withBad, true); err != nil {
			t.Fatal(err)
		}
		client.send(t, "xds:///nack-acme.test /shop.Reviews/Get 1")
		testutil.EventuallyWhy(t, "acme's NACK reported to acme", func() (bool, string) {
			nackMu.Lock()
			defer nackMu.Unlock()
			return reports["acme"][bad[0].ID], fmt.Sprintf("reports = %v", reports)
		})
		var r callResult
		client.read(t, &r, 30*time.Second)
		nackMu.Lock()
		defer nackMu.Unlock()
		for backend, ids := range reports {
			if backend != "acme" && ids[bad[0].ID] {
				t.Errorf("acme's Listener %s reported to backend %s", bad[0].ID, backend)
			}
		}
		for id := range reports["acme"] {
			if _, own := withBad.Get(id); !own {
				t.Errorf("backend acme was reported %s, which it did not emit", id)
			}
		}
	})
}

var e2ePolicies = `
- apiVersion: policy.meshrelay.io/v1alpha1
  kind: VirtualDestination
  metadata: {name: reviews-global, namespace: shop}
  spec:
    hostname: reviews.global
    ports: [{number: 9080, protocol: GRPC}]
    services:
    - {cluster: east, namespace: shop, name: reviews}
    - {cluster: west, namespace: shop, name: reviews}
- apiVersion: policy.meshrelay.io/v1alpha1
  kind: TrafficPolicy
  metadata: {name: reviews-split, namespace: shop}
  spec:
    destinationSelectors: [{namespaces: [shop], names: [reviews]}]
    http:
    - name: split
      route:
      - {service: {cluster: east, namespace: shop, name: reviews}, weight: 70}
      - {service: {cluster: west, namespace: shop, name: reviews}, weight: 30}
- apiVersion: policy.meshrelay.io/v1alpha1
  kind: TrafficPolicy
  metadata: {name: details-canary, namespace: shop}
  spec:
    destinationSelectors: [{namespaces: [shop], names: [details]}]
    http:
    - name: canary
      route:
      - {service: {cluster: east, namespace: shop, name: details}, subset: {version: v1}, weight: 80}
      - {service: {cluster: east, namespace: shop, name: details}, subset: {version: v2}, weight: 20}
- apiVersion: policy.meshrelay.io/v1alpha1
  kind: VirtualDestination
  metadata: {name: ratings-global, namespace: shop}
  spec:
    hostname: ratings.global
    ports: [{number: 9090, protocol: GRPC}]
    destinationSelectors: [{namespaces: [shop], names: [ratings]}]
    failover: {mode: Priority, priority: [east, west]}
    outlierDetection: {consecutiveErrors: 5, interval: 10s, baseEjectionTime: 30s, maxEjectionPercent: 100}
- apiVersion: policy.meshrelay.io/v1alpha1
  kind: AccessPolicy
  metadata: {name: reviews-from-frontend, namespace: shop}
  spec:
    destinationSelectors: [{namespaces: [shop], names: [reviews]}]
    from:
    - serviceAccounts: [{namespace: shop, name: frontend}]
    paths: ["/shop.Reviews/*"]
`

// clusterObjects is one cluster's inputs: the envoy Mesh, Deployments of
// the node groups, and Services whose EndpointSlices point at the helper
// servers named APP-CLUSTER.
func clusterObjects(t *testing.T, cluster string, servers map[string]string, nodes []string, withRatings bool) []json.RawMessage {
	t.Helper()
	nodeList, _ := json.Marshal(nodes)
	var b bytes.Buffer
	fmt.Fprintf(&b, `
- apiVersion: discovery.meshrelay.io/v1alpha1
  kind: Mesh
  metadata: {name: envoy}
  spec: {type: envoy, envoyNodes: %s}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: frontend, namespace: shop}
  spec:
    selector: {matchLabels: {app: frontend}}
    template:
      metadata: {labels: {app: frontend, meshrelay.io/envoy-node: frontend}}
      spec: {serviceAccountName: frontend, containers: [{name: c, image: i}]}
`, nodeList)
	for app, port := range map[string]int{"reviews": 9080, "ratings": 9090} {
		_, p, err := net.SplitHostPort(servers[app+"-"+cluster])
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, `
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: %[1]s, namespace: shop}
  spec:
    selector: {matchLabels: {app: %[1]s}}
    template:
      metadata: {labels: {app: %[1]s, meshrelay.io/envoy-node: backend}}
      spec: {serviceAccountName: %[1]s, containers: [{name: c, image: i}]}
- apiVersion: v1
  kind: Service
  metadata: {name: %[1]s, namespace: shop}
  spec:
    selector: {app: %[1]s}
    ports: [{name: grpc, port: %[2]d}]
`, app, port)
		if app == "ratings" && !withRatings {
			continue
		}
		fmt.Fprintf(&b, `
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: %[1]s-1, namespace: shop, labels: {kubernetes.io/service-name: %[1]s}}
  addressType: IPv4
  ports: [{name: grpc, port: %[2]s}]
  endpoints: [{addresses: [127.0.0.1], conditions: {ready: true}}]
`, app, p)
	}
	// details: a Service in every cluster, so that clients there route
	// it; east runs it, v1 and v2 each a Deployment whose pod the
	// EndpointSlice's targetRef names.
	fmt.Fprintf(&b, `
- apiVersion: v1
  kind: Service
  metadata: {name: details, namespace: shop}
  spec:
    selector: {app: details}
    ports: [{name: grpc, port: 9070}]
`)
	if cluster == "east" {
		for _, v := range []string{"v1", "v2"} {
			_, p, err := net.SplitHostPort(servers["details-"+v])
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, `
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: details-%[1]s, namespace: shop}
  spec:
    selector: {matchLabels: {app: details, version: %[1]s}}
    template:
      metadata: {labels: {app: details, version: %[1]s, meshrelay.io/envoy-node: backend}}
      spec: {serviceAccountName: details, containers: [{name: c, image: i}]}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: details-%[1]s, namespace: shop, labels: {kubernetes.io/service-name: details}}
  addressType: IPv4
  ports: [{name: grpc, port: %[2]s}]
  endpoints: [{addresses: [127.0.0.1], conditions: {ready: true}, targetRef: {kind: Pod, namespace: shop, name: details-%[1]s-0}}]
`, v, p)
		}
	}
	return objects(t, b.String())
}

func objects(t *testing.T, yamlList string) []json.RawMessage {
	t.Helper()
	path := filepath.Join(t.TempDir(), "objects.yaml")
	if err := os.WriteFile(path, []byte("clusters: []\npolicies:\n"+indent(yamlList)), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := sdktest.LoadFixture(path)
	if err != nil {
		t.Fatal(err)
	}
	return f.Policies
}

func indent(s string) string {
	var b bytes.Buffer
	for _, line := range bytes.Split([]byte(s), []byte("\n")) {
		b.WriteString("  ")
		b.Write(line)
		b.WriteString("\n")
	}
	return b.String()
}

func buildHelper(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "xdshelper")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = filepath.Join("testdata", "xdshelper")
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOSUMDB=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build xdshelper: %v\n%s", err, out)
	}
	return bin
}

// bootstrap writes a grpc-go xDS bootstrap for node, pointing at addr.
func bootstrap(t *testing.T, dir, addr, node string) string {
	t.Helper()
	data, err := json.Marshal(map[string]any{
		"xds_servers": []any{map[string]any{
			"server_uri":      addr,
			"channel_creds":   []any{map[string]any{"type": "insecure"}},
			"server_features": []string{"xds_v3"},
		}},
		"node":                                   map[string]any{"id": node},
		"server_listener_resource_name_template": envoy.InboundListenerPrefix + "%s",
	})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(dir, "bootstrap-*.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// proc is a running helper process.
type proc struct {
	stdin io.WriteCloser
	lines chan []byte
}

type callResult struct {
	Served map[string]int `json:"served"`
	Codes  map[string]int `json:"codes"`
	Last   string         `json:"last"`
}

func startHelper(ctx context.Context, t *testing.T, bin, bootstrapFile string, args ...string) *proc {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "GRPC_XDS_BOOTSTRAP="+bootstrapFile, "GRPC_GO_LOG_SEVERITY_LEVEL=error")
	var stderr testutil.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{stdin: stdin, lines: make(chan []byte, 16)}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			p.lines <- append([]byte(nil), sc.Bytes()...)
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("%s %v stderr:\n%s", filepath.Base(bin), args[0], stderr.String())
		}
	})
	return p
}

func (p *proc) read(t *testing.T, v any, timeout time.Duration) {
	t.Helper()
	select {
	case line, ok := <-p.lines:
		if !ok {
			t.Fatal("helper exited")
		}
		if err := json.Unmarshal(line, v); err != nil {
			t.Fatalf("helper said %q: %v", line, err)
		}
	case <-time.After(timeout):
		t.Fatalf("helper said nothing for %v", timeout)
	}
}

func (p *proc) send(t *testing.T, cmd string) {
	t.Helper()
	if _, err := fmt.Fprintln(p.stdin, cmd); err != nil {
		t.Fatal(err)
	}
}

func (p *proc) call(t *testing.T, cmd string) callResult {
	t.Helper()
	p.send(t, cmd)
	var r callResult
	p.read(t, &r, 2*time.Minute)
	return r
}

// await repeats cmd until ok accepts its result, for at most a minute.
func (p *proc) await(ctx context.Context, t *testing.T, cmd string, ok func(callResult) bool) {
	t.Helper()
	testutil.EventuallyWhy(t, fmt.Sprintf("%q", cmd), func() (bool, string) {
		r := p.call(t, cmd)
		if ctx.Err() != nil {
			t.Fatalf("%q: last result %+v", cmd, r)
		}
		return ok(r), fmt.Sprintf("last result %+v", r)
	})
}

// testPKI holds the files of a throwaway CA, a server certificate for the
// global hostnames and a client certificate for shop/frontend in west.
type testPKI struct {
	ca, server, serverKey, client, clientKey string
}

func newTestPKI(t *testing.T, dir string) testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "meshrelay test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	p := testPKI{ca: filepath.Join(dir, "ca.pem")}
	writePEM(t, p.ca, "CERTIFICATE", caDER)
	issue := func(name string, serial int64, spiffe string, dns []string, usage x509.ExtKeyUsage) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(spiffe)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			URIs: []*url.URL{u}, DNSNames: dns,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		certFile, keyFile := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		writePEM(t, certFile, "CERTIFICATE", der)
		writePEM(t, keyFile, "PRIVATE KEY", keyDER)
		return certFile, keyFile
	}
	p.server, p.serverKey = issue("server", 2, envoy.SPIFFEID("east", "shop", "reviews"),
		[]string{"reviews.global", "ratings.global", "details.shop.svc.cluster.local", "nack.test", "acme.test"}, x509.ExtKeyUsageServerAuth)
	p.client, p.clientKey = issue("client", 3, envoy.SPIFFEID("west", "shop", "frontend"), nil, x509.ExtKeyUsageClientAuth)
	return p
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
