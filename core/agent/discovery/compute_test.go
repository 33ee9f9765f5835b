package discovery

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	discoveryv1alpha1 "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
)

func mustResources(t *testing.T, objs ...string) []snapshot.Resource {
	t.Helper()
	var out []snapshot.Resource
	for _, o := range objs {
		var m map[string]any
		if err := json.Unmarshal([]byte(o), &m); err != nil {
			t.Fatalf("bad fixture %s: %v", o, err)
		}
		r, err := resourceOf(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// ciliumConfig is a cilium-config ConfigMap setting enable-envoy-config.
func ciliumConfig(ns, envoyConfig string) string {
	return `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cilium-config","namespace":"` + ns + `"},
	  "data":{"enable-envoy-config":"` + envoyConfig + `","cluster-name":"west"}}`
}

func TestCompute(t *testing.T) {
	istiod := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"istiod","namespace":"istio-system"},
	  "spec":{"template":{"spec":{"containers":[{"name":"discovery","image":"docker.io/istio/pilot:1.24.2-distroless","env":[{"name":"TRUST_DOMAIN","value":"corp.example"}]}]}}}}`
	istioNS := `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"istio-system","labels":{"topology.istio.io/network":"net1"}}}`
	cilium := `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"cilium","namespace":"kube-system"},
	  "spec":{"template":{"spec":{"containers":[{"name":"cilium-agent","image":"quay.io/cilium/cilium:v1.16.1@sha256:abc"}]}}}}`
	ciliumOp := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"cilium-operator","namespace":"cilium"},
	  "spec":{"template":{"spec":{"containers":[{"name":"operator","image":"quay.io/cilium/operator-generic:v1.15.0"}]}}}}`
	envoyA := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"a","namespace":"x"},
	  "spec":{"template":{"metadata":{"labels":{"meshrelay.io/envoy-node":"edge"}}}}}`
	envoyB := `{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":"b","namespace":"x"},
	  "spec":{"template":{"metadata":{"labels":{"meshrelay.io/envoy-node":"core"}}}}}`
	envoyC := `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"c","namespace":"y"},
	  "spec":{"template":{"metadata":{"labels":{"meshrelay.io/envoy-node":"edge"}}}}}`
	envoyProxy := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"p","namespace":"x"},
	  "spec":{"template":{"metadata":{"labels":{"meshrelay.io/envoy-node":"edge","meshrelay.io/envoy-proxy":"envoy"}}}}}`
	grpcClient := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"g","namespace":"x"},
	  "spec":{"template":{"metadata":{"labels":{"meshrelay.io/envoy-node":"core","meshrelay.io/envoy-proxy":"grpc"}}}}}`
	grpcEdge := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"h","namespace":"y"},
	  "spec":{"template":{"metadata":{"labels":{"meshrelay.io/envoy-node":"edge","meshrelay.io/envoy-proxy":"grpc"}}}}}`
	oddProxy := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"o","namespace":"y","labels":{"meshrelay.io/envoy-proxy":"envoy"}},
	  "spec":{"template":{"metadata":{"labels":{"meshrelay.io/envoy-node":"odd","meshrelay.io/envoy-proxy":"nginx"}}}}}`
	ewLabel := `{"apiVersion":"v1","kind":"Service","metadata":{"name":"istio-eastwestgateway","namespace":"istio-system","labels":{"istio":"eastwestgateway"}},
	  "spec":{"type":"LoadBalancer","selector":{"istio":"eastwestgateway","app":"istio-eastwestgateway"},"ports":[{"name":"status-port","port":15021},{"name":"tls","port":15443}]},
	  "status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.1"},{"hostname":"gw.example"},{"ip":"192.0.2.1"}]}}}`
	ewNetwork := `{"apiVersion":"v1","kind":"Service","metadata":{"name":"cross","namespace":"gw","labels":{"topology.istio.io/network":"net2"}},
	  "spec":{"type":"LoadBalancer","externalIPs":["198.51.100.9"],"ports":[{"name":"tls-istio-mtls","port":16443}]}}`
	notGateway := `{"apiVersion":"v1","kind":"Service","metadata":{"name":"plain","namespace":"gw","labels":{"topology.istio.io/network":"net2"}},
	  "spec":{"type":"ClusterIP"}}`

	type want struct {
		meshes   map[string]discoveryv1alpha1.MeshSpec
		gateways map[string]discoveryv1alpha1.GatewaySpec
	}
	tests := map[string]struct {
		objs []string
		want want
	}{
		"nothing": {objs: []string{notGateway}, want: want{}},
		"istio with network and gateways": {
			objs: []string{istiod, istioNS, ewLabel, ewNetwork, notGateway},
			want: want{
				meshes: map[string]discoveryv1alpha1.MeshSpec{
					"istio": {Type: "istio", Namespace: "istio-system", Version: "1.24.2", TrustDomain: "corp.example", Network: "net1"},
				},
				gateways: map[string]discoveryv1alpha1.GatewaySpec{
					"istio-system/istio-eastwestgateway": {Mesh: "istio", Addresses: []string{"192.0.2.1", "gw.example"}, Port: 15443, Network: "net1",
						Selector: map[string]string{"istio": "eastwestgateway", "app": "istio-eastwestgateway"}},
					"gw/cross": {Mesh: "istio", Addresses: []string{"198.51.100.9"}, Port: 16443, Network: "net2"},
				},
			},
		},
		"cilium daemonset wins over operator": {
			objs: []string{ciliumOp, cilium},
			want: want{meshes: map[string]discoveryv1alpha1.MeshSpec{
				"cilium": {Type: "cilium", Namespace: "kube-system", Version: "v1.16.1"},
			}},
		},
		// Cilium's Envoy takes CiliumEnvoyConfig where the cilium-config
		// ConfigMap of the agents' namespace turns it on; the ConfigMap
		// itself is never an input (see derivedOnly).
		"cilium with envoy config": {
			objs: []string{cilium, ciliumConfig("kube-system", "true"), ciliumConfig("other", "false")},
			want: want{meshes: map[string]discoveryv1alpha1.MeshSpec{
				"cilium": {Type: "cilium", Namespace: "kube-system", Version: "v1.16.1", EnvoyConfig: true},
			}},
		},
		"cilium-config of another namespace": {
			objs: []string{cilium, ciliumConfig("other", "true")},
			want: want{meshes: map[string]discoveryv1alpha1.MeshSpec{
				"cilium": {Type: "cilium", Namespace: "kube-system", Version: "v1.16.1"},
			}},
		},
		"cilium operator alone": {
			objs: []string{ciliumOp},
			want: want{meshes: map[string]discoveryv1alpha1.MeshSpec{
				"cilium": {Type: "cilium", Namespace: "cilium", Version: "v1.15.0"},
			}},
		},
		"envoy nodes sorted and unique": {
			objs: []string{envoyA, envoyB, envoyC},
			want: want{meshes: map[string]discoveryv1alpha1.MeshSpec{
				"envoy": {Type: "envoy", EnvoyNodes: []string{"core", "edge"}},
			}},
		},
		// A group's proxy kind is read where its node label is; envoy wins
		// when workloads disagree; an unknown value is no kind (grpc).
		"envoy proxy kinds": {
			objs: []string{envoyA, envoyProxy, grpcClient, grpcEdge, oddProxy},
			want: want{meshes: map[string]discoveryv1alpha1.MeshSpec{
				"envoy": {Type: "envoy", EnvoyNodes: []string{"core", "edge", "odd"},
					EnvoyProxies: map[string]string{"core": "grpc", "edge": "envoy"}},
			}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := want{meshes: map[string]discoveryv1alpha1.MeshSpec{}, gateways: map[string]discoveryv1alpha1.GatewaySpec{}}
			for _, r := range Compute(mustResources(t, tc.objs...)) {
				if r.ID.Group != discoveryv1alpha1.Group || r.ID.Version != discoveryv1alpha1.Version {
					t.Errorf("computed %s, want group %s", r.ID, discoveryv1alpha1.APIVersion)
				}
				switch r.ID.Kind {
				case "Mesh":
					var m discoveryv1alpha1.Mesh
					if err := r.Decode(&m); err != nil {
						t.Fatal(err)
					}
					got.meshes[r.ID.Name] = m.Spec
				case "Gateway":
					var g discoveryv1alpha1.Gateway
					if err := r.Decode(&g); err != nil {
						t.Fatal(err)
					}
					got.gateways[r.ID.Namespace+"/"+r.ID.Name] = g.Spec
				}
			}
			w := tc.want
			if w.meshes == nil {
				w.meshes = map[string]discoveryv1alpha1.MeshSpec{}
			}
			if w.gateways == nil {
				w.gateways = map[string]discoveryv1alpha1.GatewaySpec{}
			}
			if diff := cmp.Diff(w, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("Compute() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	tests := map[string]struct{ a, b string }{
		"endpointslice condition churn": {
			a: `{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"s","namespace":"n","annotations":{"endpoints.kubernetes.io/last-change-trigger-time":"2026-01-01T00:00:00Z"}},
			  "endpoints":[{"addresses":["10.0.0.1"],"conditions":{"ready":true,"serving":true,"terminating":false},"targetRef":{"kind":"Pod","name":"p","uid":"1","resourceVersion":"5"}}]}`,
			b: `{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"s","namespace":"n","annotations":{"endpoints.kubernetes.io/last-change-trigger-time":"2026-01-02T00:00:00Z"}},
			  "endpoints":[{"addresses":["10.0.0.1"],"conditions":{"ready":true,"serving":false,"terminating":true},"targetRef":{"kind":"Pod","name":"p","uid":"1","resourceVersion":"9"}}]}`,
		},
		"node status and labels": {
			a: `{"apiVersion":"v1","kind":"Node","metadata":{"name":"n","labels":{"topology.kubernetes.io/zone":"a","kubernetes.io/hostname":"n"}},"status":{"conditions":[{"type":"Ready"}]}}`,
			b: `{"apiVersion":"v1","kind":"Node","metadata":{"name":"n","resourceVersion":"7","labels":{"topology.kubernetes.io/zone":"a","node.kubernetes.io/instance-type":"big"}},"spec":{"podCIDR":"10.0.0.0/24"}}`,
		},
		"replicaset bookkeeping": {
			a: `{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"r","namespace":"n","annotations":{"deployment.kubernetes.io/desired-replicas":"1"}},"spec":{"replicas":1},"status":{"replicas":0}}`,
			b: `{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"r","namespace":"n","annotations":{"deployment.kubernetes.io/desired-replicas":"3"}},"spec":{"replicas":1},"status":{"replicas":1,"readyReplicas":1}}`,
		},
		"rollout restart": {
			a: `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","namespace":"n"},"spec":{"template":{"metadata":{"labels":{"app":"d"}}}}}`,
			b: `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","namespace":"n"},"spec":{"template":{"metadata":{"labels":{"app":"d"},"annotations":{"kubectl.kubernetes.io/restartedAt":"now"}}}}}`,
		},
		"service status other than load balancer": {
			a: `{"apiVersion":"v1","kind":"Service","metadata":{"name":"s","namespace":"n"},"spec":{"type":"ClusterIP"}}`,
			b: `{"apiVersion":"v1","kind":"Service","metadata":{"name":"s","namespace":"n"},"spec":{"type":"ClusterIP"},"status":{"loadBalancer":{},"conditions":[{"type":"x"}]}}`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rs := mustResources(t, tc.a, tc.b)
			if rs[0].Hash != rs[1].Hash {
				t.Errorf("hashes differ:\n%s\n%s", rs[0].Body, rs[1].Body)
			}
		})
	}
	// Meaning still counts: readiness and load-balancer addresses.
	rs := mustResources(t,
		`{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"s","namespace":"n"},"endpoints":[{"addresses":["10.0.0.1"],"conditions":{"ready":true}}]}`,
		`{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"s","namespace":"n"},"endpoints":[{"addresses":["10.0.0.1"],"conditions":{"ready":false}}]}`,
		`{"apiVersion":"v1","kind":"Service","metadata":{"name":"s","namespace":"n"},"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.1"}]}}}`,
		`{"apiVersion":"v1","kind":"Service","metadata":{"name":"s","namespace":"n"},"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.2"}]}}}`,
	)
	if rs[0].Hash == rs[1].Hash || rs[2].Hash == rs[3].Hash {
		t.Error("a change of readiness or load-balancer address did not change the hash")
	}
}
