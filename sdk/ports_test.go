package sdk

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// portsCluster builds a cluster "east" from YAML documents.
func portsCluster(t *testing.T, docs ...string) *clusterData {
	t.Helper()
	objects := map[snapshot.ID][]byte{}
	for _, doc := range docs {
		raw, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			APIVersion string            `json:"apiVersion"`
			Kind       string            `json:"kind"`
			Metadata   metav1.ObjectMeta `json:"metadata"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		group, version, ok := strings.Cut(m.APIVersion, "/")
		if !ok {
			group, version = "", m.APIVersion
		}
		objects[snapshot.ID{Group: group, Version: version, Kind: m.Kind, Namespace: m.Metadata.Namespace, Name: m.Metadata.Name}] = raw
	}
	return newClusterData("east", false, nil, nil, objects)
}

const (
	// web forwards 80 to the container port named http, 5000 to 8080, 9090
	// to itself, 81 to a name no container has, and 53 over TCP and UDP
	// to the port named dns of each protocol.
	webService = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: http}
  - {name: api, port: 5000, targetPort: 8080}
  - {name: metrics, port: 9090}
  - {name: admin, port: 81, targetPort: admin}
  - {name: dns-tcp, port: 53, targetPort: dns, protocol: TCP}
  - {name: dns-udp, port: 53, targetPort: dns, protocol: UDP}`
	// webV1 names http 8080; webV2, a StatefulSet, names it 8081; both
	// name dns 5353 over TCP and 5354 over UDP.
	webV1 = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web-v1, namespace: shop}
spec:
  selector: {matchLabels: {app: web, version: v1}}
  template:
    metadata: {labels: {app: web, version: v1}}
    spec:
      containers:
      - name: web
        ports:
        - {name: http, containerPort: 8080}
        - {name: dns, containerPort: 5353}
        - {name: dns, containerPort: 5354, protocol: UDP}`
	webV2 = `apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web-v2, namespace: shop}
spec:
  selector: {matchLabels: {app: web, version: v2}}
  template:
    metadata: {labels: {app: web, version: v2}}
    spec:
      containers:
      - {name: sidecar, ports: [{name: stats, containerPort: 15090}]}
      - name: web
        ports:
        - {name: http, containerPort: 8081}
        - {name: dns, containerPort: 5353}
        - {name: dns, containerPort: 5354, protocol: UDP}`
	// Neither selects web's pods: another namespace, other labels.
	otherNamespace = `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: web, namespace: other}
spec:
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, ports: [{name: http, containerPort: 7000}, {name: admin, containerPort: 7001}]}]}`
	otherApp = `apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: shop}
spec:
  template:
    metadata: {labels: {app: api}}
    spec: {containers: [{name: api, ports: [{name: http, containerPort: 7000}, {name: admin, containerPort: 7001}]}]}`
	// webSlice is what the EndpointSlice controller writes for web's pods
	// of some other controller: the port numbers, by Service port name.
	webSlice = `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-abc, namespace: shop, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8082}, {name: admin, port: 8083}]
endpoints: [{addresses: [10.0.0.1], conditions: {ready: true}}]`
)

func ports(ns ...int32) []int32 { return ns }

func TestTargetPorts(t *testing.T) {
	type port struct {
		Port    int32
		Proto   string
		Name    string
		Numbers []int32
	}
	type problem struct {
		Reason    PortReason
		Port      int32
		Workloads []string
	}
	tests := map[string]struct {
		objects  []string
		ports    []int32
		want     []port
		problems []problem
	}{
		"numeric target port": {
			objects: []string{webService}, ports: ports(5000),
			want: []port{{5000, "", "", ports(8080)}},
		},
		"no target port": {
			objects: []string{webService}, ports: ports(9090),
			want: []port{{9090, "", "", ports(9090)}},
		},
		"named target port, per workload": {
			objects: []string{webService, webV1, webV2, otherNamespace, otherApp}, ports: ports(80),
			want: []port{{80, "", "http", ports(8080, 8081)}},
		},
		"named target port of each protocol": {
			objects: []string{webService, webV1}, ports: ports(53),
			want: []port{{53, "TCP", "dns", ports(5353)}, {53, "UDP", "dns", ports(5354)}},
		},
		"named target port of no container": {
			objects: []string{webService, webV1, webV2, otherNamespace, otherApp}, ports: ports(80, 81),
			want:     []port{{80, "", "http", ports(8080, 8081)}},
			problems: []problem{{PortNoContainerPort, 81, []string{"Deployment/web-v1", "StatefulSet/web-v2"}}},
		},
		"named target port from endpoints when no workload": {
			objects: []string{webService, webSlice, otherNamespace}, ports: ports(80, 81),
			want: []port{{80, "", "http", ports(8082)}, {81, "", "admin", ports(8083)}},
		},
		"named target port unknown": {
			objects: []string{webService, otherApp}, ports: ports(80),
			want:     []port{{80, "", "http", nil}},
			problems: []problem{{PortNumberUnknown, 80, nil}},
		},
		"not a port of the service": {
			objects: []string{webService, webV1}, ports: ports(8080, 5000),
			want:     []port{{5000, "", "", ports(8080)}},
			problems: []problem{{PortNotInService, 8080, nil}},
		},
		"every port": {
			objects: []string{webService, webV1}, ports: nil,
			want: []port{
				{80, "", "http", ports(8080)}, {5000, "", "", ports(8080)}, {9090, "", "", ports(9090)},
				{53, "TCP", "dns", ports(5353)}, {53, "UDP", "dns", ports(5354)},
			},
			problems: []problem{{PortNoContainerPort, 81, []string{"Deployment/web-v1"}}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := portsCluster(t, tc.objects...).handle(nil)
			svc, ok := c.Service("shop", "web")
			if !ok {
				t.Fatal("no Service shop/web")
			}
			resolved, problems := c.TargetPorts(svc, tc.ports)
			var got []port
			for _, tp := range resolved {
				got = append(got, port{tp.Service.Port, string(tp.Service.Protocol), tp.Name, tp.Numbers})
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ports (-want +got):\n%s", diff)
			}
			var gotProblems []problem
			for _, p := range problems {
				if p.Cluster != "east" || p.Namespace != "shop" || p.Service != "web" {
					t.Errorf("problem %+v names another Service than east/shop/web", p)
				}
				gotProblems = append(gotProblems, problem{p.Reason, p.Port, p.Workloads})
			}
			if diff := cmp.Diff(tc.problems, gotProblems); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTargetPortsWarning checks that the diagnostic of each problem names
// the policy, the Service, its cluster and the port.
func TestTargetPortsWarning(t *testing.T) {
	ap := &policyv1alpha1.AccessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}}
	for _, p := range []PortProblem{
		{Reason: PortNotInService, Cluster: "east", Namespace: "shop", Service: "web", Port: 8080},
		{Reason: PortNoContainerPort, Cluster: "east", Namespace: "shop", Service: "web", Port: 81, TargetPort: "admin", Workloads: []string{"Deployment/web-v1"}},
		{Reason: PortNumberUnknown, Cluster: "east", Namespace: "shop", Service: "web", Port: 80, TargetPort: "http"},
	} {
		d := p.Warning(ap, "spec.ports")
		if d.Severity != SeverityWarning || d.Cluster != "east" || d.Path != "spec.ports" || d.Policy.String() != "AccessPolicy/shop/web" {
			t.Errorf("%+v: diagnostic %+v", p, d)
		}
		for _, want := range []string{"shop/web", `"east"`, fmt.Sprintf("port %d ", p.Port), "admits nothing"} {
			if !strings.Contains(d.Summary, want) {
				t.Errorf("%q lacks %q", d.Summary, want)
			}
		}
		if p.TargetPort != "" && !strings.Contains(d.Summary, `"`+p.TargetPort+`"`) {
			t.Errorf("%q does not name the target port %q", d.Summary, p.TargetPort)
		}
	}
}

// TestTargetPortsReads checks what resolving reads: numbers nothing, a
// named targetPort the cluster's workloads and, without workloads of the
// Service, its endpoints.
func TestTargetPortsReads(t *testing.T) {
	workloads := []read{
		{op: readObjects, cluster: "east", group: "apps", kind: "Deployment"},
		{op: readObjects, cluster: "east", group: "apps", kind: "StatefulSet"},
		{op: readObjects, cluster: "east", group: "apps", kind: "DaemonSet"},
	}
	endpoints := read{op: readEndpoints, cluster: "east", namespace: "shop", name: "web"}
	tests := map[string]struct {
		objects []string
		ports   []int32
		want    []read
	}{
		"numbers":                    {[]string{webService, webV1}, ports(5000, 9090, 1), nil},
		"named, with workloads":      {[]string{webService, webV1}, ports(80), workloads},
		"named, without workloads":   {[]string{webService, webSlice}, ports(80), append(slices.Clone(workloads), endpoints)},
		"named, of another workload": {[]string{webService, otherApp}, ports(80), append(slices.Clone(workloads), endpoints)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cd := portsCluster(t, tc.objects...)
			svc, _ := cd.handle(nil).Service("shop", "web")
			rec := newRecorder()
			cd.handle(rec).TargetPorts(svc, tc.ports)
			var got []read
			for r := range rec.reads {
				got = append(got, r)
			}
			key := func(r read) string { return r.kind + "/" + r.name }
			slices.SortFunc(got, func(a, b read) int { return strings.Compare(key(a), key(b)) })
			want := slices.Clone(tc.want)
			slices.SortFunc(want, func(a, b read) int { return strings.Compare(key(a), key(b)) })
			if diff := cmp.Diff(want, got, cmp.AllowUnexported(read{})); diff != "" {
				t.Errorf("reads (-want +got):\n%s", diff)
			}
		})
	}
}
