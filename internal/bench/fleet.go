package bench

import (
	"fmt"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/agent/discovery"
)

// Namespace is where the generated Services live.
const Namespace = "bench"

// revLabel is the selector label a change rewrites; its value is the
// change's marker, which the Istio translator copies into the cluster's
// AuthorizationPolicy and PeerAuthentication selectors.
const revLabel = "bench.meshrelay.io/rev"

// Cluster is one simulated cluster's inputs: S Services in Namespace, each
// with a ServiceAccount, a Deployment and an EndpointSlice of two endpoints,
// plus the Namespaces, a Node and an istiod Deployment from which discovery
// computes the cluster's istio Mesh (and, for [NewGlobalCluster], an Istio
// east-west gateway). A Cluster is not safe for concurrent use.
type Cluster struct {
	Name  string
	index int
	// resources are the inputs; services[j] and deployments[j] index the
	// Service and Deployment of service j in it.
	resources   []snapshot.Resource
	services    []int
	deployments []int
	slices      []int
}

// ClusterName returns the name of the i-th simulated cluster.
func ClusterName(i int) string { return fmt.Sprintf("bench-%05d", i) }

// ServiceName returns the name of the j-th generated Service.
func ServiceName(j int) string { return fmt.Sprintf("svc-%03d", j) }

// NewCluster generates the i-th cluster with the given number of services.
func NewCluster(i, services int) (*Cluster, error) {
	return newCluster(i, services, false)
}

// NewGlobalCluster generates the i-th cluster of the global scenario: the
// cluster of [NewCluster] plus an Istio east-west gateway Service with its
// own load-balancer address, through which the other clusters reach its
// backends of [GlobalPolicyYAML]'s VirtualDestination.
func NewGlobalCluster(i, services int) (*Cluster, error) {
	return newCluster(i, services, true)
}

func newCluster(i, services int, gateway bool) (*Cluster, error) {
	c := &Cluster{Name: ClusterName(i), index: i}
	add := func(obj map[string]any) (int, error) {
		r, err := snapshot.FromObject(obj)
		if err != nil {
			return 0, fmt.Errorf("generate %s: %w", c.Name, err)
		}
		c.resources = append(c.resources, r)
		return len(c.resources) - 1, nil
	}
	region, zone := fmt.Sprintf("region-%d", i%4), fmt.Sprintf("zone-%d", i%12)
	fixed := []map[string]any{
		object("v1", "Node", "", c.Name+"-node-1", map[string]any{
			"topology.kubernetes.io/region": region, "topology.kubernetes.io/zone": zone,
		}, nil),
		object("v1", "Namespace", "", "istio-system", map[string]any{discovery.NetworkLabel: "network-" + c.Name}, nil),
		object("v1", "Namespace", "", Namespace, map[string]any{"istio-injection": "enabled"}, nil),
		object("apps/v1", "Deployment", "istio-system", "istiod", map[string]any{"app": "istiod"}, map[string]any{
			"replicas": 1,
			"selector": map[string]any{"matchLabels": map[string]any{"app": "istiod"}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "istiod"}},
				"spec": map[string]any{"containers": []any{map[string]any{
					"name": "discovery", "image": "docker.io/istio/pilot:1.24.2",
				}}},
			},
		}),
	}
	if gateway {
		fixed = append(fixed, gatewayObject(i))
	}
	for _, obj := range fixed {
		if _, err := add(obj); err != nil {
			return nil, err
		}
	}
	for j := range services {
		name := ServiceName(j)
		if _, err := add(object("v1", "ServiceAccount", Namespace, name, map[string]any{"app": name}, nil)); err != nil {
			return nil, err
		}
		s, err := add(serviceObject(c.index, j, "r0"))
		if err != nil {
			return nil, err
		}
		d, err := add(deploymentObject(j, "r0"))
		if err != nil {
			return nil, err
		}
		c.services, c.deployments = append(c.services, s), append(c.deployments, d)
		e, err := add(endpointSliceObject(c.index, j, zone, ""))
		if err != nil {
			return nil, err
		}
		c.slices = append(c.slices, e)
	}
	c.resources = append(c.resources, discovery.Compute(c.resources)...)
	return c, nil
}

// Services returns how many services the cluster has.
func (c *Cluster) Services() int { return len(c.services) }

// Snapshot returns the cluster's current inputs.
func (c *Cluster) Snapshot() (*snapshot.Snapshot, error) {
	return snapshot.New(0, c.resources)
}

// Change rewrites service j's selector and its Deployment's labels with
// marker, as a rollout would, and returns the new inputs. Only this
// cluster's outputs depend on it.
func (c *Cluster) Change(j int, marker string) (*snapshot.Snapshot, error) {
	s, err := snapshot.FromObject(serviceObject(c.index, j, marker))
	if err != nil {
		return nil, fmt.Errorf("change %s: %w", c.Name, err)
	}
	d, err := snapshot.FromObject(deploymentObject(j, marker))
	if err != nil {
		return nil, fmt.Errorf("change %s: %w", c.Name, err)
	}
	c.resources[c.services[j]], c.resources[c.deployments[j]] = s, d
	return c.Snapshot()
}

// ChangeEndpoint gives the first endpoint of service j's EndpointSlice the
// address address, as a rescheduled pod would, and returns the new inputs.
// Nothing else changes. In the global scenario every Istio cluster's
// outputs are computed from svc-000's endpoints in every cluster; the
// address itself appears only in this cluster's outputs.
func (c *Cluster) ChangeEndpoint(j int, address string) (*snapshot.Snapshot, error) {
	zone := fmt.Sprintf("zone-%d", c.index%12)
	e, err := snapshot.FromObject(endpointSliceObject(c.index, j, zone, address))
	if err != nil {
		return nil, fmt.Errorf("change %s: %w", c.Name, err)
	}
	c.resources[c.slices[j]] = e
	return c.Snapshot()
}

// EndpointAddress returns the address the seq-th endpoint change gives an
// endpoint: unique for the first 4,194,304 changes, and outside the ranges
// the generated pods (10.128.0.0/9) and gateways (198.18.0.0/15) use.
func EndpointAddress(seq int) string {
	return fmt.Sprintf("100.%d.%d.%d", 64+seq>>16&63, seq>>8&255, seq&255)
}

func object(apiVersion, kind, namespace, name string, labels, spec map[string]any) map[string]any {
	meta := map[string]any{"name": name}
	if namespace != "" {
		meta["namespace"] = namespace
	}
	if len(labels) > 0 {
		meta["labels"] = labels
	}
	obj := map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": meta}
	if spec != nil {
		obj["spec"] = spec
	}
	return obj
}

func serviceObject(cluster, j int, rev string) map[string]any {
	name := ServiceName(j)
	return object("v1", "Service", Namespace, name, map[string]any{"app": name}, map[string]any{
		"selector":  map[string]any{"app": name, revLabel: rev},
		"ports":     []any{map[string]any{"name": "http", "port": 8080, "targetPort": 8080, "protocol": "TCP"}},
		"clusterIP": fmt.Sprintf("10.96.%d.%d", j/250, j%250+1),
		"type":      "ClusterIP",
	})
}

func deploymentObject(j int, rev string) map[string]any {
	name := ServiceName(j)
	labels := map[string]any{"app": name, "version": "v1", revLabel: rev}
	return object("apps/v1", "Deployment", Namespace, name+"-v1", map[string]any{"app": name}, map[string]any{
		"replicas": 2,
		"selector": map[string]any{"matchLabels": map[string]any{"app": name, "version": "v1"}},
		"template": map[string]any{
			"metadata": map[string]any{"labels": labels},
			"spec": map[string]any{
				"serviceAccountName": name,
				"containers": []any{map[string]any{
					"name": "app", "image": "registry.example.com/bench/" + name + ":1.0.0",
					"ports": []any{map[string]any{"containerPort": 8080}},
				}},
			},
		},
	})
}

// endpointSliceObject returns service j's EndpointSlice of two endpoints;
// first, when not empty, replaces the first endpoint's address.
func endpointSliceObject(cluster, j int, zone, first string) map[string]any {
	name := ServiceName(j)
	var endpoints []any
	for k := range 2 {
		address := fmt.Sprintf("10.%d.%d.%d", 128+cluster>>8&127, cluster&255, (2*j+k)%254+1)
		if k == 0 && first != "" {
			address = first
		}
		endpoints = append(endpoints, map[string]any{
			"addresses":  []any{address},
			"conditions": map[string]any{"ready": true},
			"zone":       zone,
			"targetRef":  map[string]any{"kind": "Pod", "namespace": Namespace, "name": fmt.Sprintf("%s-v1-%d", name, k)},
		})
	}
	return map[string]any{
		"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
		"metadata": map[string]any{
			"name": name + "-1", "namespace": Namespace,
			"labels": map[string]any{"kubernetes.io/service-name": name},
		},
		"addressType": "IPv4",
		"ports":       []any{map[string]any{"name": "http", "port": 8080, "protocol": "TCP"}},
		"endpoints":   endpoints,
	}
}

// gatewayObject returns the i-th cluster's Istio east-west gateway: a
// LoadBalancer Service with the address 198.18.x.y, from which discovery
// computes the cluster's Gateway.
func gatewayObject(i int) map[string]any {
	obj := object("v1", "Service", "istio-system", "istio-eastwestgateway", map[string]any{
		"istio": "eastwestgateway", discovery.NetworkLabel: "network-" + ClusterName(i),
	}, map[string]any{
		"type":     "LoadBalancer",
		"selector": map[string]any{"istio": "eastwestgateway"},
		"ports":    []any{map[string]any{"name": "tls", "port": 15443, "targetPort": 15443, "protocol": "TCP"}},
	})
	obj["status"] = map[string]any{"loadBalancer": map[string]any{"ingress": []any{
		map[string]any{"ip": fmt.Sprintf("198.%d.%d.%d", 18+i>>16&1, i>>8&255, i&255)},
	}}}
	return obj
}

// GlobalPolicyYAML returns the global scenario's VirtualDestination: one
// hostname, svc-000.bench.global, for svc-000 of Namespace in every
// cluster, with locality failover. Every Istio cluster gets a ServiceEntry
// with its own svc-000 endpoints and every other cluster's gateway at that
// cluster's endpoints' locality, so every cluster's Istio output is
// computed from every cluster's svc-000 EndpointSlice.
func GlobalPolicyYAML() []byte {
	return fmt.Appendf(nil, `apiVersion: policy.meshrelay.io/v1alpha1
kind: VirtualDestination
metadata:
  name: bench-global
  namespace: %[1]s
spec:
  hostname: %[2]s.%[1]s.global
  ports:
  - {number: 8080, protocol: HTTP, targetPort: 8080}
  destinationSelectors:
  - namespaces: [%[1]s]
    names: [%[2]s]
  failover:
    mode: Locality
  outlierDetection:
    consecutiveErrors: 5
    interval: 10s
    baseEjectionTime: 30s
    maxEjectionPercent: 50
`, Namespace, ServiceName(0))
}

// PolicyYAML returns the fleet-wide AccessPolicy: every Service in
// Namespace of every cluster accepts GET on marker's path from svc-000's
// service account. Every cluster's Istio output depends on it.
func PolicyYAML(marker string) []byte {
	return fmt.Appendf(nil, `apiVersion: policy.meshrelay.io/v1alpha1
kind: AccessPolicy
metadata:
  name: bench-access
  namespace: %[1]s
spec:
  destinationSelectors:
  - namespaces: [%[1]s]
  action: Allow
  from:
  - serviceAccounts:
    - {namespace: %[1]s, name: %[2]s}
  ports: [8080]
  methods: [GET]
  paths: ["/%[3]s/*"]
`, Namespace, ServiceName(0), marker)
}
