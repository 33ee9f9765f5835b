package catalog

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/internal/bench"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The members Derive reads decode as they do into k8s.io/api's types.
func TestInputsDecodeAsKubernetesTypes(t *testing.T) {
	docs := []string{
		deploy("reviews", "app", `, annotations: {linkerd.io/inject: enabled}`), statefulSet, daemonSet,
		`{apiVersion: apps/v1, kind: Deployment, metadata: {name: old, namespace: app}, spec: {replicas: 3, selector: {matchLabels: {app: old}}, template: {metadata: {labels: {app: old}}, spec: {serviceAccount: legacy, containers: [{name: c, image: i}]}}}}`,
		`{apiVersion: v1, kind: Service, metadata: {name: reviews, namespace: app, labels: {x: z}}, spec: {type: NodePort, selector: {app: reviews}, ports: [{port: 80, targetPort: 8080, name: http, appProtocol: h2}, {port: 81, targetPort: web, protocol: UDP}]}}`,
		`{apiVersion: discovery.k8s.io/v1, kind: EndpointSlice, metadata: {name: reviews-x, namespace: app, labels: {kubernetes.io/service-name: reviews}}, addressType: IPv4,
		  endpoints: [{addresses: [10.0.0.1], nodeName: n1, targetRef: {kind: Pod, name: reviews-v2-abc-1}}, {addresses: [10.0.0.2], zone: z9, conditions: {ready: false}, targetRef: {kind: Pod, name: reviews-def-2}}, {addresses: [10.0.0.3]}]}`,
	}
	c, err := bench.NewGlobalCluster(1, 2)
	if err != nil {
		t.Fatal(err)
	}
	generated, err := c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, in := range []*snapshot.Snapshot{input(t, docs...), generated} {
		for r := range in.All() {
			var want, got any
			switch r.ID.Kind {
			case "Service":
				var full corev1.Service
				mustDecode(t, r, &full)
				s := service{objectMeta: metaOf(full.ObjectMeta)}
				s.Spec.Type, s.Spec.Selector, s.Spec.Ports = full.Spec.Type, full.Spec.Selector, full.Spec.Ports
				want, got = s, decodeAs[service](t, r)
			case "EndpointSlice":
				var full discoveryv1.EndpointSlice
				mustDecode(t, r, &full)
				es := endpointSlice{objectMeta: metaOf(full.ObjectMeta)}
				for _, e := range full.Endpoints {
					ep := endpoint{NodeName: e.NodeName, Zone: e.Zone}
					ep.Conditions.Ready = e.Conditions.Ready
					if e.TargetRef != nil {
						ep.TargetRef = &struct {
							Kind string `json:"kind"`
							Name string `json:"name"`
						}{e.TargetRef.Kind, e.TargetRef.Name}
					}
					es.Endpoints = append(es.Endpoints, ep)
				}
				want, got = es, decodeAs[endpointSlice](t, r)
			case "Deployment", "StatefulSet", "DaemonSet":
				var (
					meta     metav1.ObjectMeta
					replicas *int32
					tmpl     corev1.PodTemplateSpec
				)
				switch r.ID.Kind {
				case "Deployment":
					var full appsv1.Deployment
					mustDecode(t, r, &full)
					meta, replicas, tmpl = full.ObjectMeta, full.Spec.Replicas, full.Spec.Template
				case "StatefulSet":
					var full appsv1.StatefulSet
					mustDecode(t, r, &full)
					meta, replicas, tmpl = full.ObjectMeta, full.Spec.Replicas, full.Spec.Template
				default:
					var full appsv1.DaemonSet
					mustDecode(t, r, &full)
					meta, tmpl = full.ObjectMeta, full.Spec.Template
				}
				w := workload{objectMeta: metaOf(meta)}
				w.Spec.Replicas = replicas
				w.Spec.Template.objectMeta = metaOf(tmpl.ObjectMeta)
				w.Spec.Template.Spec.ServiceAccountName = tmpl.Spec.ServiceAccountName
				w.Spec.Template.Spec.DeprecatedServiceAccount = tmpl.Spec.DeprecatedServiceAccount
				want, got = w, decodeAs[workload](t, r)
			default:
				continue
			}
			kinds[r.ID.Kind]++
			if d := cmp.Diff(want, got, cmp.AllowUnexported(service{}, endpointSlice{}, workload{}, podTemplate{})); d != "" {
				t.Errorf("%s decoded (-k8s.io/api +catalog):\n%s", r.ID, d)
			}
		}
	}
	if len(kinds) != 5 {
		t.Errorf("decoded %v, want every kind Derive reads", kinds)
	}
}

func metaOf(m metav1.ObjectMeta) objectMeta {
	return objectMeta{Name: m.Name, Namespace: m.Namespace, Labels: m.Labels, Annotations: m.Annotations}
}

func mustDecode(t *testing.T, r snapshot.Resource, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %s: %v", r.ID, err)
	}
}

func decodeAs[T any](t *testing.T, r snapshot.Resource) T {
	t.Helper()
	var v T
	mustDecode(t, r, &v)
	return v
}
