package server

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/meshrelay/meshrelay/api/meta"
	"github.com/meshrelay/meshrelay/core/agent/discovery"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// kubeFleet is a small cluster: istiod, an injected namespace with two
// versions of reviews behind one Service, and an EndpointSlice whose
// endpoints name their pods and nodes.
const kubeFleet = `
apiVersion: v1
kind: Namespace
metadata: {name: istio-system}
---
apiVersion: v1
kind: Namespace
metadata: {name: bookinfo, labels: {istio-injection: enabled}}
---
apiVersion: v1
kind: Node
metadata: {name: node-a, labels: {topology.kubernetes.io/region: eu-west-1, topology.kubernetes.io/zone: eu-west-1b}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: istiod, namespace: istio-system}
spec:
  selector: {matchLabels: {app: istiod}}
  template:
    metadata: {labels: {app: istiod}}
    spec: {containers: [{name: discovery, image: docker.io/istio/pilot:1.24.2}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: reviews-v1, namespace: bookinfo}
spec:
  replicas: 2
  selector: {matchLabels: {app: reviews, version: v1}}
  template:
    metadata: {labels: {app: reviews, version: v1}}
    spec:
      serviceAccountName: bookinfo-reviews
      containers: [{name: reviews, image: reviews:v1, ports: [{name: http, containerPort: 9080}]}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: reviews-v2, namespace: bookinfo}
spec:
  selector: {matchLabels: {app: reviews, version: v2}}
  template:
    metadata: {labels: {app: reviews, version: v2}, annotations: {sidecar.istio.io/inject: "false"}}
    spec: {containers: [{name: reviews, image: reviews:v2}]}
---
apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: bookinfo, labels: {app: reviews}}
spec:
  selector: {app: reviews}
  ports: [{name: http, port: 9080, targetPort: http}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: reviews-1, namespace: bookinfo, labels: {kubernetes.io/service-name: reviews}}
addressType: IPv4
ports: [{name: http, port: 9080}]
endpoints:
- addresses: [10.0.0.1]
  nodeName: node-a
  targetRef: {kind: Pod, name: reviews-v1-6c4f9-x1, namespace: bookinfo}
- addresses: [10.0.0.2]
  nodeName: node-a
  conditions: {ready: false}
  targetRef: {kind: Pod, name: reviews-v1-6c4f9-x2, namespace: bookinfo}
- addresses: [10.0.0.3]
  targetRef: {kind: Pod, name: reviews-v2-77aa1-y1, namespace: bookinfo}
`

var kubeResources = map[string]schema.GroupVersionResource{
	"Namespace":     nsGVR,
	"Node":          {Version: "v1", Resource: "nodes"},
	"Service":       {Version: "v1", Resource: "services"},
	"Deployment":    {Group: "apps", Version: "v1", Resource: "deployments"},
	"EndpointSlice": {Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"},
}

// createAll creates every object of a multi-document YAML.
func createAll(t *testing.T, k *testenv.Kube, docs string) {
	t.Helper()
	dyn := k.Dynamic(t)
	for _, doc := range strings.Split(docs, "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: obj}
		if _, err := dyn.Resource(kubeResources[u.GetKind()]).Namespace(u.GetNamespace()).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// A cluster discovered from a real kube-apiserver by a real agent shows up
// in the admin API as Meshes, Workloads and Destinations, with service
// accounts, localities, meshes and endpoints; describe finds the Service,
// unknown names are NotFound, a call without the token is refused, and
// deregistering the cluster takes its objects away.
func TestInspectKubeFleet(t *testing.T) {
	k := testenv.StartKube(t)
	createAll(t, k, kubeFleet)
	ts := startServer(t, nil, "")
	src, err := discovery.NewKube(k.Config(), discovery.KubeOptions{Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	startAgentSource(t, ts, "west", ts.register("west"), src)
	admin := relayv1.NewAdminClient(ts.dial(nil))
	ctx := ts.adminCtx()

	list := func(req *relayv1.ListRequest) *relayv1.ListResponse {
		t.Helper()
		resp, err := admin.List(ctx, req)
		if err != nil {
			t.Fatalf("List(%v): %v", req, err)
		}
		return resp
	}
	testutil.Eventually(t, "west's workloads", func() bool {
		return len(list(&relayv1.ListRequest{Kind: "workloads", Namespace: "bookinfo"}).GetWorkloads()) == 2
	})

	ws := list(&relayv1.ListRequest{Kind: "workloads", Namespace: "bookinfo"}).GetWorkloads()
	v1, v2 := ws[0], ws[1]
	if v1.GetName() != "reviews-v1" || v1.GetCluster() != "west" || v1.GetServiceAccount() != "bookinfo-reviews" || v1.GetReplicas() != 2 {
		t.Errorf("reviews-v1 = %v", v1)
	}
	if !slices.Equal(v1.GetMeshes(), []string{"istio"}) || len(v2.GetMeshes()) != 0 {
		t.Errorf("meshes: v1 %v (want istio), v2 %v (opted out: want none)", v1.GetMeshes(), v2.GetMeshes())
	}
	if !slices.Equal(v1.GetLocalities(), []string{"eu-west-1/eu-west-1b"}) || v1.GetEndpoints() != 2 || v1.GetReadyEndpoints() != 1 {
		t.Errorf("reviews-v1 localities %v, endpoints %d/%d; want eu-west-1/eu-west-1b, 1/2 ready",
			v1.GetLocalities(), v1.GetReadyEndpoints(), v1.GetEndpoints())
	}
	if !slices.Equal(v1.GetDestinations(), []string{"reviews"}) || v2.GetEndpoints() != 1 {
		t.Errorf("reviews-v1 destinations %v, reviews-v2 endpoints %d", v1.GetDestinations(), v2.GetEndpoints())
	}
	if got := list(&relayv1.ListRequest{Kind: "workload", LabelSelector: "version=v2"}).GetWorkloads(); len(got) != 1 || got[0].GetName() != "reviews-v2" {
		t.Errorf("-l version=v2: %v", got)
	}

	ds := list(&relayv1.ListRequest{Kind: "destinations", Cluster: "west", Namespace: "bookinfo"}).GetDestinations()
	if len(ds) != 1 || ds[0].GetName() != "reviews" || !slices.Equal(ds[0].GetWorkloads(), []string{"Deployment/reviews-v1", "Deployment/reviews-v2"}) ||
		ds[0].GetEndpoints() != 3 || ds[0].GetClusterCount() != 1 || ds[0].GetPorts()[0].GetTargetPort() != "http" {
		t.Errorf("destinations = %v", ds)
	}
	ms := list(&relayv1.ListRequest{Kind: "meshes"}).GetMeshes()
	if len(ms) != 1 || ms[0].GetType() != "istio" || ms[0].GetVersion() != "1.24.2" || ms[0].GetWorkloads() != 1 || ms[0].GetCluster() != "west" {
		t.Errorf("meshes = %v", ms)
	}
	if cs := list(&relayv1.ListRequest{Kind: "clusters"}).GetClusters(); len(cs) != 1 || !cs[0].GetConnected() {
		t.Errorf("clusters = %v", cs)
	}
	// Outputs follow the input after the engine's next cycle.
	testutil.Eventually(t, "the echo ConfigMap for reviews, with its body", func() bool {
		outs := list(&relayv1.ListRequest{Kind: "outputs", Cluster: "west", Bodies: true}).GetOutputs()
		return slices.ContainsFunc(outs, func(o *relayv1.OutputResource) bool {
			return o.GetName() == "reviews" && o.GetBackend() == "test" && strings.Contains(o.GetBody(), `"cluster":"west"`)
		})
	})

	d, err := admin.DescribeDestination(ctx, &relayv1.DescribeRequest{Name: "reviews"})
	if err != nil {
		t.Fatal(err)
	}
	if d.GetNamespace() != "bookinfo" || len(d.GetDestinations()) != 1 || len(d.GetWorkloads()) != 2 {
		t.Errorf("describe destination reviews = %v", d)
	}
	c, err := admin.DescribeCluster(ctx, &relayv1.DescribeRequest{Name: "west"})
	if err != nil {
		t.Fatal(err)
	}
	// The API server's own default/kubernetes Service is a destination too.
	if c.GetWorkloads() != 3 || c.GetDestinations() != 2 || len(c.GetMeshes()) != 1 {
		t.Errorf("describe cluster west: %d workloads, %d destinations, meshes %v", c.GetWorkloads(), c.GetDestinations(), c.GetMeshes())
	}

	for what, call := range map[string]func(context.Context) error{
		"destination": func(ctx context.Context) error {
			_, err := admin.DescribeDestination(ctx, &relayv1.DescribeRequest{Name: "ratings"})
			return err
		},
		"policy": func(ctx context.Context) error {
			_, err := admin.DescribePolicy(ctx, &relayv1.DescribeRequest{Name: "nope"})
			return err
		},
		"cluster": func(ctx context.Context) error {
			_, err := admin.DescribeCluster(ctx, &relayv1.DescribeRequest{Name: "east"})
			return err
		},
	} {
		if err := call(ctx); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "not found") {
			t.Errorf("describe unknown %s: %v, want NotFound", what, err)
		}
		if err := call(context.Background()); status.Code(err) != codes.Unauthenticated {
			t.Errorf("describe %s without the token: %v, want Unauthenticated", what, err)
		}
	}
	if _, err := admin.List(context.Background(), &relayv1.ListRequest{Kind: "workloads"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("List without the token: %v, want Unauthenticated", err)
	}
	if _, err := admin.List(ctx, &relayv1.ListRequest{Kind: "pods"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("List(pods): %v, want InvalidArgument", err)
	}
	if _, err := admin.List(ctx, &relayv1.ListRequest{Kind: "workloads", LabelSelector: "a in (b"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("List with a malformed selector: %v, want InvalidArgument", err)
	}

	// Derived state goes with its cluster.
	if _, err := admin.DeregisterCluster(ctx, &relayv1.DeregisterClusterRequest{Cluster: "west"}); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"workloads", "destinations", "meshes", "outputs"} {
		if resp := list(&relayv1.ListRequest{Kind: kind}); len(resp.GetWorkloads())+len(resp.GetDestinations())+len(resp.GetMeshes())+len(resp.GetOutputs()) != 0 {
			t.Errorf("after deregistering west, %s = %v", kind, resp)
		}
	}
}

// A policy's state per cluster folds its outputs there: applied when the
// agent acked them all without error, failed with the agent's errors,
// pending while the agent has not acked the current output.
func TestPolicyClusters(t *testing.T) {
	got := policyClusters([]*relayv1.OutputResource{
		{Cluster: "east", Kind: "VirtualService", Namespace: "bookinfo", Name: "a", Applied: true},
		{Cluster: "east", Kind: "DestinationRule", Namespace: "bookinfo", Name: "b", Applied: true},
		{Cluster: "west", Kind: "VirtualService", Namespace: "bookinfo", Name: "a", Error: "admission webhook denied it"},
		{Cluster: "west", Kind: "DestinationRule", Namespace: "bookinfo", Name: "b", Applied: true},
		{Cluster: "central", Kind: "CiliumClusterwideNetworkPolicy", Name: "c"},
	})
	want := []*relayv1.PolicyCluster{
		{Cluster: "east", Applied: true, Resources: 2},
		{Cluster: "west", Resources: 2, Errors: []string{"VirtualService bookinfo/a: admission webhook denied it"}},
		{Cluster: "central", Resources: 1, Pending: true, Errors: nil},
	}
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Errorf("policyClusters (-want +got):\n%s", d)
	}
}

// The policy a DescribePolicy request names: "Kind/ns/name" without a
// cluster is the management source's when there is one, "@cluster" a
// workload cluster's, a shorter name is ambiguous between them; a name
// that cannot be one is refused.
func TestDescribePolicyName(t *testing.T) {
	mgmt := policyStatus{ref: meta.PolicyRef{Kind: "AccessPolicy", Namespace: "bookinfo", Name: "reviews"}}
	east := policyStatus{ref: meta.PolicyRef{Kind: "AccessPolicy", Namespace: "bookinfo", Name: "reviews", Cluster: "east"}}
	other := policyStatus{ref: meta.PolicyRef{Kind: "TrafficPolicy", Namespace: "bookinfo", Name: "split"}}
	statuses := []policyStatus{mgmt, east, other}
	tests := map[string]struct {
		req  *relayv1.DescribeRequest
		want meta.PolicyRef
		code codes.Code
	}{
		"full name is the management source's": {req: &relayv1.DescribeRequest{Name: "AccessPolicy/bookinfo/reviews"}, want: mgmt.ref},
		"kind and namespace as flags":          {req: &relayv1.DescribeRequest{Name: "reviews", Kind: "accesspolicy", Namespace: "bookinfo"}, want: mgmt.ref},
		"a workload cluster's":                 {req: &relayv1.DescribeRequest{Name: "reviews@east"}, want: east.ref},
		"a workload cluster's by --cluster":    {req: &relayv1.DescribeRequest{Name: "bookinfo/reviews", Cluster: "east"}, want: east.ref},
		"unique short name":                    {req: &relayv1.DescribeRequest{Name: "split"}, want: other.ref},
		"ambiguous short name":                 {req: &relayv1.DescribeRequest{Name: "bookinfo/reviews"}, code: codes.InvalidArgument},
		"not found":                            {req: &relayv1.DescribeRequest{Name: "reviews@west"}, code: codes.NotFound},
		"no cluster after @":                   {req: &relayv1.DescribeRequest{Name: "reviews@"}, code: codes.InvalidArgument},
		"@cluster against --cluster":           {req: &relayv1.DescribeRequest{Name: "reviews@east", Cluster: "west"}, code: codes.InvalidArgument},
		"too many parts":                       {req: &relayv1.DescribeRequest{Name: "a/b/c/d"}, code: codes.InvalidArgument},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got policyStatus
			q, err := parsePolicyName(tc.req)
			if err == nil {
				got, err = q.find(statuses)
			}
			if status.Code(err) != tc.code || got.ref != tc.want {
				t.Errorf("DescribePolicy(%+v) = %v, %v; want %v, %v", tc.req, got.ref, err, tc.want, tc.code)
			}
		})
	}
}
